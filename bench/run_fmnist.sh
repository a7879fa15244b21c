#!/usr/bin/env bash
# Fashion-MNIST CNN, one epoch: utrain against PyTorch on this machine.
#
#   bench/run_fmnist.sh [BUILD]        (BUILD defaults to build; `make bench-fmnist` runs it)
#
# utrain: `utrain train configs/fmnist_cnn.yml` with threads 1 and 2
# (`--set threads=N`), `train.eval_strategy=no` (the model trained is the same;
# only the end-of-epoch dev evaluation is left out of the clock) and a temporary
# output_dir, then `utrain test` on the run for the test accuracy (t10k).
# PyTorch: bench/torch_fmnist.py, the same network, data, batches and AdamW,
# in each of threads {1, 2} x OMP_WAIT_POLICY {unset, PASSIVE}.
#
# What each side's epoch time covers -- the same thing on both sides: the
# training loop of one epoch (860 steps of batch 64 over 55,000 images: batch
# assembly from the in-memory, normalised dataset, forward, loss, backward,
# AdamW step, zero grad), no data loading, no evaluation.
#   utrain: the sum of the train intervals in metrics.jsonl (each logged line's
#     examples / samples_per_s; log_interval 100); the last interval also holds
#     the end-of-epoch checkpoint write (~14 MB, a few ms). The trainer's own
#     "Training done: N steps in X s" (the loop plus the final checkpoint and
#     the epoch table) is printed alongside.
#   PyTorch: time.perf_counter around its loop.
#
# Runs are interleaved per round: utrain threads 1, torch 1/unset, torch
# 1/PASSIVE, utrain threads 2, torch 2/unset, torch 2/PASSIVE; BENCH_RUNS
# rounds (default 2: about 12 minutes on an idle 2-core machine). PYTHON
# names the interpreter that runs PyTorch (default python3); BENCH_THREADS
# the thread counts of the rounds (default "1 2"; "1" halves the time). Each setting's
# figure is the median over its runs; each side keeps its fastest setting.
# Then the table: both epoch times and test accuracies, the ratio
# utrain/PyTorch (goal <= 0.5), the epoch's training FLOPs (forward
# multiply-adds of conv1+conv2+fc1+fc2 x 2 x 3 x 55,000), the limit = FLOPs /
# the step-weighted sgemm rate on the CNN's gemm shapes (build/bench/sgemm_cnn)
# and the fraction of it utrain reaches.
#
# OpenBLAS 0.3.21 picks its Prescott kernels on this CPU; as in
# run_gpt2_step.sh the sgemm measurement uses OPENBLAS_CORETYPE=SkylakeX when
# it reports Prescott on an avx512f CPU (utrain selects it itself:
# ut_blas_select_kernels). UT_BENCH_KEEP_CORE=1 keeps the library's choice.
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
RUNS=${BENCH_RUNS:-2}
THREADS=${BENCH_THREADS:-1 2}
[[ "$THREADS" =~ ^[12]( [12])*$ ]] || { echo "run_fmnist.sh: BENCH_THREADS is a list of 1 and 2, got '$THREADS'" >&2; exit 2; }
UT=$BUILD/utrain
SGEMM_BIN=$BUILD/bench/sgemm_cnn
bench_build "$BUILD" "$UT"
bench_build "$BUILD" "$SGEMM_BIN" bench/sgemm_cnn.c
bench_tmpdir fmnist

bench_machine
# shellcheck disable=SC2317  # called through bench_openblas_core
sgemm_core() { OPENBLAS_VERBOSE=0 "$SGEMM_BIN" --threads 1 --repeats 1 --json | jget core; }
bench_openblas_core sgemm_core
declare -A RATE
for th in 1 2; do
    j=$("$SGEMM_BIN" --threads $th --repeats 7 --json)
    RATE[$th]=$(jget gflops <<<"$j")
    echo "   sgemm (CNN step-weighted, core $(jget core <<<"$j")) threads $th: ${RATE[$th]} GFLOP/s" \
        "(convolutions as batch-wide gemms: $(jget conv_batched_gflops <<<"$j"))"
done

bench_have_torch torch

declare -A T ACC DONE   # per setting: space-separated values over runs
run_utrain() { # threads run
    local dir=$TMP/u$1_$2 out loop done_s acc
    out=$("$UT" train configs/fmnist_cnn.yml --set output_dir="$dir" --set threads="$1" \
        --set train.eval_strategy=no --set train.progress=lines 2>&1) || { echo "$out" >&2; exit 1; }
    done_s=$(sed -n 's/.*Training done: [0-9]* steps in \([0-9.]*\) s.*/\1/p' <<<"$out")
    # loop time: sum over train lines of examples in the interval / samples_per_s
    loop=$(fmnist_loop_s "$dir/fmnist_cnn/metrics.jsonl") ||
        { echo "metrics.jsonl does not cover the epoch" >&2; exit 1; }
    "$UT" test "$dir/fmnist_cnn" >/dev/null 2>&1 || { echo "utrain test failed" >&2; exit 1; }
    acc=$(tr -d '\n' <"$dir/fmnist_cnn/test_results.json" | jget accuracy)
    rm -rf "$dir"
    T[u$1]+=" $loop"; ACC[u$1]+=" $acc"; DONE[u$1]+=" $done_s"
    printf "   utrain  threads %s                        loop %7.2f s  (Training done %5.1f s)  test acc %.4f\n" \
        "$1" "$loop" "$done_s" "$acc"
}
run_torch() { # threads policy
    local j
    if [ "$2" = unset ]; then
        j=$(env -u OMP_WAIT_POLICY "$PY" bench/torch_fmnist.py --threads "$1" --json)
    else
        j=$(OMP_WAIT_POLICY=$2 "$PY" bench/torch_fmnist.py --threads "$1" --json)
    fi || { echo "torch_fmnist.py failed" >&2; exit 1; }
    local e a; e=$(jget epoch_s <<<"$j"); a=$(jget test_accuracy <<<"$j")
    T[t$1_$2]+=" $e"; ACC[t$1_$2]+=" $a"
    printf "   pytorch threads %s OMP_WAIT_POLICY=%-7s loop %7.2f s                         test acc %.4f\n" \
        "$1" "$2" "$e" "$a"
}

echo "== runs ($RUNS rounds; one epoch each: 860 steps of batch 64)"
for ((r = 1; r <= RUNS; r++)); do
    for th in $THREADS; do
        run_utrain $th $r
        if [ $have_torch = 1 ]; then
            run_torch $th unset
            run_torch $th PASSIVE
        fi
    done
done

best() { # prefix: prints "key median" of the fastest setting
    local k m bk="" bm=""
    for k in "${!T[@]}"; do
        [[ $k == $1* ]] || continue
        m=$(median <<<"${T[$k]}")
        if [ -z "$bm" ] || awk "BEGIN{exit !($m < $bm)}"; then bk=$k; bm=$m; fi
    done
    echo "$bk $bm"
}
read -r uk um <<<"$(best u)"
uth=${uk#u}
uacc=$(median <<<"${ACC[$uk]}")
udone=$(median <<<"${DONE[$uk]}")
MACS=$((32 * 26 * 26 * 9 + 64 * 24 * 24 * 288 + 9216 * 128 + 128 * 10))
FLOPS=$(calc %.0f "$MACS*2*3*55000")
rate=${RATE[$uth]}
limit=$(calc %.6f "$FLOPS / ($rate*1e9)")

echo
echo "== Fashion-MNIST CNN, one epoch (55,000 images, batch 64, AdamW), $(nproc) cores; medians over $RUNS runs"
printf "  %-46s %8.2f s   (threads %s; %.0f samples/s; Training done %.1f s)\n" "utrain epoch, training loop (best setting)" \
    "$um" "$uth" "$(calc %.6f "55000/$um")" "$udone"
printf "  %-46s %8.4f\n" "utrain test accuracy" "$uacc"
if [ $have_torch = 1 ]; then
    read -r tk tm <<<"$(best t)"
    tset=${tk#t}
    tacc=$(median <<<"${ACC[$tk]}")
    printf "  %-46s %8.2f s   (threads %s, OMP_WAIT_POLICY %s; %.0f samples/s)\n" \
        "PyTorch epoch, training loop (best setting)" "$tm" "${tset%_*}" "${tset#*_}" "$(calc %.6f "55000/$tm")"
    printf "  %-46s %8.4f\n" "PyTorch test accuracy" "$tacc"
    printf "  %-46s %8.2f     (goal <= 0.5 at equal accuracy)\n" "ratio utrain / PyTorch" "$(calc %.6f "$um/$tm")"
fi
printf "  %-46s %8.3f TFLOP (%d MACs/image fwd x 2 x 3 x 55,000)\n" "training FLOPs per epoch" \
    "$(calc %.6f "$FLOPS/1e12")" "$MACS"
printf "  %-46s %8.1f GFLOP/s (%s threads, CNN step-weighted shapes)\n" "sgemm rate" "$rate" "$uth"
printf "  %-46s %8.2f s\n" "limit = FLOPs / sgemm rate" "$limit"
printf "  %-46s %8.2f\n" "fraction of the limit utrain achieves" "$(calc %.6f "$limit/$um")"
exit 0
