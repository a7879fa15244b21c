#!/usr/bin/env bash
# MiniLM sentiment fine-tuning (configs/rt_minilm.yml), utrain against
# transformers + PyTorch on this machine, side by side.
#
#   bench/run_minilm.sh [BUILD]        (BUILD defaults to build; `make bench-minilm` runs it)
#
# Environment: PYTHON (default python3; needs torch and transformers, e.g.
# PYTHON=/tmp/hfvenv/bin/python), BENCH_RUNS (rounds, default 1), THREADS
# (default 2), PARALLEL=1 (both sides of a round at the same time: on a
# machine that others load, both then see the same load, at the price of
# competing with each other), BENCH_MAX_STEPS=N (a timing probe: both sides
# stop after N steps of the first epoch, without evaluation or test; the
# table then gives the time of those N steps and the epoch time it implies,
# 122/N times it, and no accuracies), BENCH_SEEDS (the seeds of the rounds,
# default "42": round r runs both sides with the r-th, cycling; utrain's
# `seed:` and torch_minilm.py's --seed: the classifier's init, the shuffle and
# dropout; several seeds give accuracies with their spread, e.g.
# BENCH_RUNS=3 BENCH_SEEDS="1 2 3"), DEVICE (default cpu; cuda: both sides
# on the GPU, utrain's `device:` and torch_minilm.py's --device),
# MINILM_MODEL (default data/pretrained/all-MiniLM-L6-v2; the GPU check's
# minilm step points it at bench/make_minilm_like.py's random weights) and
# RT_DATA (default data/rt: train.tsv, dev.tsv, test.tsv).
#
# utrain: `utrain train configs/rt_minilm.yml` (2 epochs, dev evaluation and a
#   checkpoint after each, the best kept) with `threads`, a temporary
#   output_dir and log_interval 1, then `utrain test` on the run for the test
#   accuracy (best dev checkpoint). An epoch's time is the sum over its steps of
#   the step's examples / samples_per_s from metrics.jsonl: the training steps
#   only (batch assembly, forward, loss, backward, AdamW), since the trainer
#   leaves evaluations and checkpoint writes out of samples_per_s.
# PyTorch: bench/torch_minilm.py, the same recipe (its docstring says how it
#   matches), its epoch times from time.perf_counter around the training loop.
# Both tokenize the whole data set once before training (not timed).
#
# Each round runs utrain then PyTorch (odd rounds) or PyTorch then utrain
# (even rounds), so machine noise hits both alike. Each side's epoch time is
# the median over all its epochs of all rounds; the table gives both, their
# ratio (goal <= 0.5) and both test accuracies (goal: utrain >= PyTorch).
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
RUNS=${BENCH_RUNS:-1}
TH=${THREADS:-2}
PARALLEL=${PARALLEL:-0}
MAXS=${BENCH_MAX_STEPS:-0}
UT=$BUILD/utrain
DEV=${DEVICE:-cpu}
MODEL=${MINILM_MODEL:-data/pretrained/all-MiniLM-L6-v2}
DATA=${RT_DATA:-data/rt}
read -r -a SEEDS <<<"${BENCH_SEEDS:-42}"
((${#SEEDS[@]} > 0)) || { echo "run_minilm: BENCH_SEEDS is empty" >&2; exit 2; }
for s in "${SEEDS[@]}"; do
    [[ "$s" =~ ^[0-9]+$ ]] || { echo "run_minilm: BENCH_SEEDS must be whole numbers, got '$s'" >&2; exit 2; }
done
seed_of() { echo "${SEEDS[$((($1 - 1) % ${#SEEDS[@]}))]}"; } # round
bench_build "$BUILD" "$UT"
for f in "$MODEL/model.safetensors" "$DATA/train.tsv" "$DATA/dev.tsv" "$DATA/test.tsv"; do
    [ -f "$f" ] || { echo "run_minilm: $f is missing: run scripts/fetch-pretrained.sh" >&2; exit 1; }
done

bench_tmpdir minilm
bench_machine
bench_have_torch torch transformers

# Each run writes "epoch times|test accuracy" to $TMP/<side><round>.res and prints its line.
run_utrain() { # round
    local dir=$TMP/u$1 out ep acc dev
    local probe=()
    ((MAXS > 0)) && probe=(--set train.max_steps="$MAXS" --set train.eval_strategy=no --set train.save_strategy=no)
    out=$("$UT" train configs/rt_minilm.yml --set output_dir="$dir" --set threads="$TH" --set seed="$(seed_of "$1")" \
        --set train.log_interval=1 --set train.progress=lines --set device="$DEV" --set model.pretrained="$MODEL" \
        --set data.train_path="$DATA/train.tsv" --set data.dev_path="$DATA/dev.tsv" \
        --set data.test_path="$DATA/test.tsv" "${probe[@]}" 2>&1) || { echo "$out" >&2; return 1; }
    # per epoch: sum of (examples in the step) / samples_per_s; "epoch" is epochs done + cursor / n
    ep=$(awk -v n="$(($(wc -l <"$DATA/train.tsv") - 1))" '/"split": "train"/ {
            match($0, /"epoch": [0-9.eE+-]+/); e = substr($0, RSTART + 9, RLENGTH - 9) + 0
            match($0, /"samples_per_s": [0-9.eE+-]+/); r = substr($0, RSTART + 17, RLENGTH - 17) + 0
            k = int(e - 1e-9); t[k] += (e - prev) * n / r; prev = e; if (k > last) last = k }
            END { for (i = 0; i <= last; i++) printf "%.2f ", t[i] }' "$dir/rt_minilm/metrics.jsonl")
    if ((MAXS > 0)); then
        acc=nan
    else
        "$UT" test "$dir/rt_minilm" >"$dir/test.log" 2>&1 || { cat "$dir/test.log" >&2; return 1; }
        acc=$(tr -d '\n' <"$dir/rt_minilm/test_results.json" | jget accuracy)
    fi
    dev=$(grep -o 'dev:.*accuracy [0-9.]*' <<<"$out" | sed 's/.*accuracy //' | tr '\n' ' ')
    rm -rf "$dir"
    echo "$ep|$acc" >"$TMP/u$1.res"
    printf "   utrain  seed %-4s threads %s   epochs %-16s s   dev accuracy %-14s test accuracy %s   (%s)\n" \
        "$(seed_of "$1")" "$TH" "$ep" "$dev" "$acc" "$(grep -o 'Training done.*' <<<"$out")"
}
run_torch() { # round
    local j ep acc dev
    local probe=()
    ((MAXS > 0)) && probe=(--max-steps "$MAXS" --epochs 1 --no-test)
    j=$("$PY" bench/torch_minilm.py --threads "$TH" --seed "$(seed_of "$1")" --device "$DEV" --model "$MODEL" \
        --data "$DATA" "${probe[@]}" --json 2>"$TMP/torch$1.err" | tail -n 1)
    [ -n "$j" ] || { cat "$TMP/torch$1.err" >&2; return 1; }
    ep=$("$PY" -c 'import json,sys; print(" ".join("%.2f" % t for t in json.loads(sys.argv[1])["epoch_s"]))' "$j")
    dev=$("$PY" -c 'import json,sys; print(" ".join("%.4f" % t for t in json.loads(sys.argv[1])["dev_accuracy"]))' "$j")
    acc=$(jget test_accuracy <<<"$j")
    echo "$ep|$acc" >"$TMP/t$1.res"
    printf "   pytorch seed %-4s threads %s   epochs %-16s s   dev accuracy %-14s test accuracy %s\n" \
        "$(seed_of "$1")" "$TH" "$ep " "$dev " "$acc"
}

what="2 epochs of 122 steps"
((MAXS > 0)) && what="the first $MAXS steps, no evaluation"
echo "== runs ($RUNS rounds$([ "$PARALLEL" = 1 ] && echo ', both sides at the same time'); $what, batch 32, max length 64, dynamic padding)"
for ((r = 1; r <= RUNS; r++)); do
    if [ "$PARALLEL" = 1 ] && [ $have_torch = 1 ]; then
        run_utrain "$r" & run_torch "$r" & wait
    elif ((r % 2)); then
        run_utrain "$r" || exit 1
        [ $have_torch = 1 ] && { run_torch "$r" || exit 1; }
    else
        [ $have_torch = 1 ] && { run_torch "$r" || exit 1; }
        run_utrain "$r" || exit 1
    fi
done
UE=$(cat "$TMP"/u*.res 2>/dev/null | cut -d'|' -f1 | tr '\n' ' ')
UACC=$(cat "$TMP"/u*.res 2>/dev/null | cut -d'|' -f2 | tr '\n' ' ')
TE=$(cat "$TMP"/t*.res 2>/dev/null | cut -d'|' -f1 | tr '\n' ' ')
TACC=$(cat "$TMP"/t*.res 2>/dev/null | cut -d'|' -f2 | tr '\n' ' ')
[ -n "$UE" ] || { echo "run_minilm: no utrain run finished" >&2; exit 1; }

ue=$(median <<<"$UE")
echo
echo "== MiniLM on Rotten Tomatoes (configs/rt_minilm.yml), device $DEV, model $MODEL, threads $TH, load now $(bench_load)"
if ((MAXS > 0)); then
    te=$(median <<<"$TE")
    printf "  %-40s %8.1f s    (epoch of 122 steps: %.1f s)\n" "utrain, first $MAXS steps" "$ue" "$(calc %.6f "$ue*122/$MAXS")"
    [ -n "$te" ] && printf "  %-40s %8.1f s    (epoch of 122 steps: %.1f s)\n" "PyTorch, first $MAXS steps" "$te" \
        "$(calc %.6f "$te*122/$MAXS")" && printf "  %-40s %8.2f      (goal <= 0.5)\n" "ratio utrain / PyTorch" "$(calc %.6f "$ue/$te")"
    exit 0
fi
mean() { awk '{ for (i = 1; i <= NF; i++) { s += $i; n++ } } END { if (n) printf "%.4f", s / n }'; }
printf "  %-40s %8.1f s    test accuracy: median %s, mean %s over %s\n" "utrain epoch (median)" "$ue" \
    "$(median <<<"$UACC")" "$(mean <<<"$UACC")" "$UACC"
if [ -n "$TE" ]; then
    te=$(median <<<"$TE")
    printf "  %-40s %8.1f s    test accuracy: median %s, mean %s over %s\n" "PyTorch epoch (median)" "$te" \
        "$(median <<<"$TACC")" "$(mean <<<"$TACC")" "$TACC"
    printf "  %-40s %8.2f      (goal <= 0.5)\n" "ratio utrain / PyTorch" "$(calc %.6f "$ue/$te")"
fi
exit 0
