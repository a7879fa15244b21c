#!/usr/bin/env bash
# Sequence-to-sequence fine-tuning step and generation speed (greedy and 4
# beams) of a T5-small-sized and a BART-base-sized model with random
# weights, utrain against transformers + PyTorch on this machine, side by side.
#
#   bench/run_seq2seq.sh [BUILD]     (BUILD defaults to build; `make bench-seq2seq` runs it)
#
# Environment: PYTHON (default python3; needs torch and transformers),
# BENCH_STEPS (timed steps and generations per run, default 3), THREADS
# (default 2), BATCH (8), SRC (128 source tokens), TGT (32 target tokens),
# NEW (32 generated tokens, end of sequence banned until then).
#
# utrain: build/bench/seq2seq_step; PyTorch: bench/torch_seq2seq.py. For each
# model and beam count, utrain then PyTorch; each figure is a run's median.
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
STEPS=${BENCH_STEPS:-3}
TH=${THREADS:-2}
ARGS="--steps $STEPS --threads $TH --batch ${BATCH:-8} --src ${SRC:-128} --tgt ${TGT:-32} --new ${NEW:-32}"
BIN=$BUILD/bench/seq2seq_step
bench_build "$BUILD" "$BIN"

bench_machine
bench_have_torch torch transformers
echo "== $ARGS"
printf "  %-5s %-5s  %-8s %10s %14s\n" model beams impl "step ms" "gen tokens/s"
for model in t5 bart; do
    for beams in 1 4; do
        for impl in utrain torch; do
            if [ "$impl" = utrain ]; then
                j=$("$BIN" --model $model --beams $beams $ARGS --json) || { echo "seq2seq_step failed" >&2; exit 1; }
            else
                [ $have_torch = 1 ] || continue
                j=$("$PY" bench/torch_seq2seq.py --model $model --beams $beams $ARGS --json 2>/dev/null | tail -n 1)
                [ -n "$j" ] || { echo "torch_seq2seq.py failed" >&2; exit 1; }
            fi
            printf "  %-5s %-5s  %-8s %10.1f %14.1f\n" $model $beams $impl "$(calc %.3f "$(jget step_s <<<"$j")*1e3")" \
                "$(jget gen_tokens_per_s <<<"$j")"
        done
    done
done
echo "== load now $(bench_load)"
