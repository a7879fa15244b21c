#!/usr/bin/env bash
# Tensor and pipeline parallelism against ddp, through `utrain train`: GPT-2
# (124M by default) on the King James Bible in GPT-2's BPE, 2 ranks on this
# machine, at the same global batch.
#
#   bench/run_parallel.sh [BUILD]        (`make bench-parallel` runs it)
#
# For each number of micro-batches m in BENCH_MICRO (default "1 4 8") it runs:
#   one    one process with one rank's threads, batch 2b, m accumulation steps
#          (a step's work on one rank's share of the machine)
#   ddp    2 ranks, batch b each, m accumulation steps
#   tp2    dist.tensor_parallel 2, batch 2b, m accumulation steps
#   pp2    dist.pipeline_parallel 2 (1F1B), m micro-batches of 2b
# each rank with BENCH_THREADS OpenMP threads (default 1), b = BENCH_BATCH (1) sequences of
# BENCH_SEQ (64) tokens, BENCH_STEPS (6) steps of which the first 2 are left
# out. It prints per run the median step time (from metrics.jsonl's
# samples_per_s), its ratio to ddp's, and rank 0's communication a step (the
# "communication:" line of its log); for pp2 the measured bubble,
# 1 - one's step time / (2 x pp2's) (the ideal pipeline halves the step),
# against (p-1)/(m+p-1).
#
# Environment: BENCH_MICRO, BENCH_BATCH, BENCH_SEQ, BENCH_STEPS, BENCH_THREADS,
# BENCH_LAYERS (12), BENCH_EMBD (768), BENCH_HEADS (12), BENCH_VOCAB (50304).
# Needs data/pretrained/gpt2-bpe (scripts/fetch-pretrained.sh) and Debian's
# bible-kjv; the token shards are written once to data/kjv_bpe.
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
MICRO=${BENCH_MICRO:-1 4 8}
B=${BENCH_BATCH:-1}
SEQ=${BENCH_SEQ:-64}
STEPS=${BENCH_STEPS:-6}
THREADS=${BENCH_THREADS:-1}
L=${BENCH_LAYERS:-12}
C=${BENCH_EMBD:-768}
H=${BENCH_HEADS:-12}
V=${BENCH_VOCAB:-50304} # GPT-2's 50257 padded to a multiple of 64, as Megatron-LM and llm.c pad it (tp needs it even)
UTRAIN=$BUILD/utrain
[ -x "$UTRAIN" ] || { echo "run_parallel: $UTRAIN not built (make)" >&2; exit 1; }
[ -s data/kjv_bpe/train.bin ] || scripts/prepare-kjv.sh data/kjv_bpe "$UTRAIN" data/pretrained/gpt2-bpe || exit 1
bench_tmpdir parallel
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=1
bench_machine
echo "== GPT-2 n_layer $L n_embd $C n_head $H vocab $V, $SEQ tokens a sequence, b = $B, $STEPS steps (median of" \
    "steps 3..), $THREADS thread(s) a rank"

cat > "$TMP/base.yml" <<EOF
output_dir: $TMP/runs
seed: 1
model: {name: gpt2, n_layer: $L, n_head: $H, n_embd: $C, vocab_size: $V, block_size: $SEQ}
data: {name: tokens, train_path: data/kjv_bpe/train.bin, seq_len: $SEQ}
train: {max_steps: $STEPS, log_interval: 1, eval_strategy: "no", save_strategy: "no", progress: "off"}
optim: {name: adamw, lr: 1.0e-4}
EOF

# step_time RUN GLOBAL: the median of GLOBAL / samples_per_s over steps 3..
step_time() {
    grep '"split": "train"' "$TMP/runs/$1/metrics.jsonl" | awk -v g="$2" -F'"samples_per_s": ' \
        'NR > 2 { split($2, a, ","); if (a[1] > 0) printf "%.6f ", g / a[1] }' | median
}
comm_mib() {
    sed -n 's/.*communication: rank 0 moved .* steps (\([0-9.]*\) MiB a step).*/\1/p' \
        "$TMP/runs/$1/logger_logs/training_0.log" 2>/dev/null | tail -1
}
run() { # NAME NPROC THREADS SETS...
    local name=$1 np=$2 th=$3
    shift 3
    local sets=()
    for s in "$@"; do sets+=(--set "$s"); done
    if ! "$UTRAIN" train "$TMP/base.yml" --nproc "$np" --set experiment_name="$name" --set threads="$th" \
        "${sets[@]}" > "$TMP/$name.out" 2>&1; then
        echo "run_parallel: $name failed: $(grep -m1 'error' "$TMP/$name.out")" >&2
        return 1
    fi
}

printf '%-4s %-6s %12s %10s %14s %s\n' m run "step (s)" "vs ddp" "comm a step" "bubble: measured, (p-1)/(m+p-1)"
for m in $MICRO; do
    G=$((2 * B * m))
    run "one_$m" 1 "$THREADS" train.batch_size=$((2 * B)) train.gradient_accumulation_steps="$m" || continue
    run "ddp_$m" 2 "$THREADS" train.batch_size="$B" train.gradient_accumulation_steps="$m" || continue
    run "tp2_$m" 2 "$THREADS" train.batch_size=$((2 * B)) train.gradient_accumulation_steps="$m" \
        dist.tensor_parallel=2 || continue
    run "pp2_$m" 2 "$THREADS" train.batch_size=$((2 * B)) train.gradient_accumulation_steps="$m" \
        dist.pipeline_parallel=2 || continue
    ddp=$(step_time "ddp_$m" "$G")
    one=$(step_time "one_$m" "$G")
    for r in one ddp tp2 pp2; do
        t=$(step_time "${r}_$m" "$G")
        extra=""
        if [ "$r" = pp2 ]; then
            # the ideal pipeline: the step's work split evenly over the 2 ranks
            extra="$(calc '%.3f' "1 - $one / (2 * $t)"), $(calc '%.3f' "1 / ($m + 1)")"
        fi
        printf '%-4s %-6s %12s %10s %14s %s\n' "$m" "$r" "$t" "$(calc '%.3f' "$t / $ddp")" \
            "$( [ "$r" = one ] && echo - || echo "$(comm_mib "${r}_$m") MiB")" "$extra"
    done
done
echo "== load after: $(bench_load)"
