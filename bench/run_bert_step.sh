#!/usr/bin/env bash
# BERT-base-sized sequence-classification training step (random weights,
# 110M parameters, batch 32 x 128 tokens), fp32 and bf16, utrain against
# transformers + PyTorch on this machine, side by side.
#
#   bench/run_bert_step.sh [BUILD]     (BUILD defaults to build; `make bench-bert` runs it)
#
# Environment: PYTHON (default python3; needs torch and transformers, e.g.
# PYTHON=/tmp/hfvenv/bin/python), BENCH_STEPS (timed steps per run after 2
# warm-up, default 3), BENCH_RUNS (rounds, default 1), THREADS (default 2),
# PARALLEL=1 (utrain and PyTorch of a precision at the same time: on a machine
# that others load, both then see the same load, at the price of competing
# with each other), MLM=1 (the masked-LM step instead: BertForMaskedLM, 15% of
# the positions labeled; utrain's head on those rows alone, PyTorch's on all),
# PRECISIONS (default "fp32 bf16"; "fp32" alone skips PyTorch's slow CPU bf16).
#
# utrain: build/bench/bert_step (fp32; --bf16: train.precision bf16's autocast).
# PyTorch: bench/torch_bert_step.py (fp32; --bf16: torch.autocast("cpu", bfloat16)).
# Each round runs utrain fp32, PyTorch fp32, utrain bf16, PyTorch bf16 (even
# rounds: PyTorch first), so machine noise hits both alike. Each figure is the
# median step time of a run; with several rounds, the median over rounds.
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
STEPS=${BENCH_STEPS:-3}
RUNS=${BENCH_RUNS:-1}
TH=${THREADS:-2}
PARALLEL=${PARALLEL:-0}
MLM=${MLM:-0}
PRECISIONS=${PRECISIONS:-fp32 bf16}
TASKFLAG=""
TASK="sequence classification"
[ "$MLM" = 1 ] && TASKFLAG=--mlm && TASK="masked-LM"
STEP_BIN=$BUILD/bench/bert_step
bench_build "$BUILD" "$STEP_BIN"

bench_machine
bench_have_torch torch transformers
bench_tmpdir bert

run() { # impl precision round: prints its line, writes its median to $TMP/<impl>_<precision>.<round>
    local flag="$TASKFLAG" j
    [ "$2" = bf16 ] && flag="$flag --bf16"
    if [ "$1" = utrain ]; then
        j=$("$STEP_BIN" --threads "$TH" --steps "$STEPS" $flag --json) || { echo "bert_step failed" >&2; return 1; }
    else
        j=$("$PY" bench/torch_bert_step.py --threads "$TH" --steps "$STEPS" $flag --json 2>/dev/null | tail -n 1)
        [ -n "$j" ] || { echo "torch_bert_step.py failed" >&2; return 1; }
    fi
    local med; med=$(jget median_s <<<"$j")
    echo "$med" >"$TMP/$1_$2.$3"
    printf "   %-7s %-5s  median %8.1f ms  (fwd %7.1f  bwd %7.1f  opt %6.1f)  loss %s -> %s\n" "$1" "$2" \
        "$(calc %.3f "$med*1e3")" "$(calc %.3f "$(jget fwd_s <<<"$j")*1e3")" \
        "$(calc %.3f "$(jget bwd_s <<<"$j")*1e3")" "$(calc %.3f "$(jget opt_s <<<"$j")*1e3")" \
        "$(jget loss_first <<<"$j")" "$(jget loss_last <<<"$j")"
}

echo "== runs ($RUNS rounds, $STEPS timed steps each after 2 warm-up; batch 32 x seq 128, threads $TH$([ "$PARALLEL" = 1 ] && echo ', utrain and PyTorch at the same time'))"
for ((r = 1; r <= RUNS; r++)); do
    for p in $PRECISIONS; do
        if [ $have_torch = 0 ]; then
            run utrain $p $r || exit 1
        elif [ "$PARALLEL" = 1 ]; then
            run utrain $p $r & run torch $p $r & wait
        elif ((r % 2)); then
            run utrain $p $r && run torch $p $r || exit 1
        else
            run torch $p $r && run utrain $p $r || exit 1
        fi
    done
done

echo
echo "== BERT-base $TASK step (B=32, T=128, AdamW), threads $TH, load now $(bench_load)"
for p in fp32 bf16; do
    u=$(cat "$TMP"/utrain_$p.* 2>/dev/null | median)
    [ -n "$u" ] || continue
    printf "  %-5s utrain %8.1f ms" $p "$(calc %.3f "$u*1e3")"
    t=$(cat "$TMP"/torch_$p.* 2>/dev/null | median)
    if [ -n "$t" ]; then
        printf "   PyTorch %8.1f ms   ratio %.2f (goal <= 0.5)" "$(calc %.3f "$t*1e3")" "$(calc %.6f "$u/$t")"
    fi
    echo
done
exit 0
