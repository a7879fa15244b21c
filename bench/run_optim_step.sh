#!/usr/bin/env bash
# One optimizer step over GPT-2 124M's parameters, utrain's optimizers
# against PyTorch's on this machine, side by side (docs/performance.md).
#
#   bench/run_optim_step.sh [BUILD]     (BUILD defaults to build; `make bench-optim` runs it)
#
# Environment: PYTHON (default python3; needs torch, transformers and
# lion-pytorch), BENCH_STEPS (timed steps per run after 2 warm-up, default
# 10), BENCH_RUNS (rounds, default 3), THREADS (default 2).
#
# utrain: build/bench/optim_step; PyTorch: bench/torch_optim_step.py. Each
# round runs both (even rounds: PyTorch first); each figure is a run's
# median step time, and with several rounds the median over the rounds.
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
STEPS=${BENCH_STEPS:-10}
RUNS=${BENCH_RUNS:-3}
TH=${THREADS:-2}
BIN=$BUILD/bench/optim_step
bench_build "$BUILD" "$BIN"

bench_machine
bench_have_torch torch transformers lion_pytorch
bench_tmpdir optim

for r in $(seq 1 "$RUNS"); do
    order="utrain torch"
    [ $((r % 2)) -eq 0 ] && order="torch utrain"
    for impl in $order; do
        if [ "$impl" = utrain ]; then
            "$BIN" --steps "$STEPS" --threads "$TH" > "$TMP/utrain.$r" || { echo "optim_step failed" >&2; exit 1; }
        elif [ "$have_torch" = 1 ]; then
            $PY bench/torch_optim_step.py --steps "$STEPS" --threads "$TH" > "$TMP/torch.$r" ||
                { echo "torch_optim_step.py failed" >&2; exit 1; }
        fi
    done
done

ms() { # impl optimizer: the median over the rounds of the optimizer's step_ms
    cat "$TMP/$1".* 2>/dev/null | grep "\"optimizer\": \"$2\"" | jget step_ms | median
}
printf '%-16s %12s %12s %12s %8s\n' optimizer "utrain ms" "PyTorch ms" "state MiB" ratio
for o in adamw lion adafactor adafactor_beta1 sgd_momentum; do
    u=$(ms utrain "$o")
    t=$(ms torch "$o")
    st=$(grep "\"optimizer\": \"$o\"" "$TMP/utrain.1" | jget state_mib)
    if [ -n "$t" ]; then
        printf '%-16s %12s %12s %12s %8s\n' "$o" "$u" "$t" "$st" "$(calc '%.2f' "$u / $t")"
    else
        printf '%-16s %12s %12s %12s\n' "$o" "$u" - "$st"
    fi
done
t=$(ms torch adamw_fused)
[ -n "$t" ] && printf '%-16s %12s %12s %12s %8s\n' "adamw vs fused" "$(ms utrain adamw)" "$t" - \
    "$(calc '%.2f' "$(ms utrain adamw) / $t")"
echo "== load after: $(bench_load)"
