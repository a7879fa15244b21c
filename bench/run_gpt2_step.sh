#!/usr/bin/env bash
# GPT-2 124M training step, utrain against PyTorch on this machine.
#
#   bench/run_gpt2_step.sh [BUILD]        (BUILD defaults to build; `make bench` runs it)
#
# Runs utrain's step (build/bench/gpt2_step) with threads 1 and 2 and PyTorch's
# (bench/torch_gpt2_step.py) in each of threads {1, 2} x OMP_WAIT_POLICY {unset,
# PASSIVE}, interleaved utrain, torch, utrain, torch, ... so that machine noise
# hits both sides alike; each side runs BENCH_ROUNDS times (default 4: utrain each thread count
# twice). Each side's figure is its best run (lowest median step time).
# Each round also runs both sides in bf16: utrain `--precision bf16`
# (train.precision: bf16) against PyTorch under torch.autocast("cpu",
# dtype=torch.bfloat16) (`--amp`), same settings.
# Then prints the table: medians, ratio utrain/PyTorch (goal <= 0.5), the
# step's FLOPs, the measured sgemm rate on the step's shapes, the limit (FLOPs
# / sgemm rate) and the fraction of it that utrain reaches; then the bf16
# rows: both medians, their ratio, bf16/fp32 step time per side, the path
# utrain's bf16 products take, and utrain's peak activation memory in bf16
# against fp32.
#
# OpenBLAS 0.3.21 does not know this CPU (Xeon, family 6 model 207) and falls
# back to its generic Prescott (SSE3) kernels, about 4x slower than its AVX-512
# ones. When the library reports Prescott on a CPU with avx512f, the runs use
# OPENBLAS_CORETYPE=SkylakeX, and utrain is also timed once as installed
# (Prescott) for the record. UT_BENCH_KEEP_CORE=1 keeps the library's choice.
#
# Environment: BENCH_STEPS (timed steps per run, default 8); BENCH_ROUNDS
# (rounds, 1 to 4, default 4: the first two cover threads 1 and 2 on both
# sides); PYTHON (the interpreter that runs PyTorch, default python3).
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
STEPS=${BENCH_STEPS:-8}
ROUNDS=${BENCH_ROUNDS:-4}
[[ "$ROUNDS" =~ ^[1-4]$ ]] || { echo "run_gpt2_step.sh: BENCH_ROUNDS must be 1 to 4, got '$ROUNDS'" >&2; exit 2; }
STEP_BIN=$BUILD/bench/gpt2_step
SGEMM_BIN=$BUILD/bench/sgemm_rate
bench_build "$BUILD" "$STEP_BIN"
bench_build "$BUILD" "$SGEMM_BIN" bench/sgemm_rate.c

bench_machine
bench_openblas_core "$SGEMM_BIN" --core
asis_core=$core_asis

# ---- sgemm rate on the step's shapes ----
declare -A RATE
for th in 1 2; do
    j=$("$SGEMM_BIN" --threads $th --repeats 5 --json)
    RATE[$th]=$(jget gflops <<<"$j")
    echo "   sgemm (step-weighted) threads $th: ${RATE[$th]} GFLOP/s"
done
GEMM_FLOPS=$("$SGEMM_BIN" --threads 1 --repeats 1 --json | jget step_gemm_flops)

# ---- interleaved runs ----
bench_have_torch torch

# best median and its setting per side and precision (fp32, bf16)
declare -A UBEST UBEST_SET TBEST TBEST_SET UJ
fmt_run() { # label json
    printf "   %-46s median %7.1f ms  (fwd %6.1f  bwd %6.1f  opt %6.1f)\n" "$1" \
        "$(calc %.6f "$(jget median_s <<<"$2")*1e3")" "$(calc %.6f "$(jget fwd_s <<<"$2")*1e3")" \
        "$(calc %.6f "$(jget bwd_s <<<"$2")*1e3")" "$(calc %.6f "$(jget opt_s <<<"$2")*1e3")"
}
better() { [ -z "$2" ] || awk "BEGIN{exit !($1 < $2)}"; }
run_utrain() { # threads precision
    local j med
    j=$("$STEP_BIN" --threads "$1" --steps "$STEPS" --precision "$2" --json) || { echo "gpt2_step failed" >&2; exit 1; }
    med=$(jget median_s <<<"$j")
    fmt_run "utrain  $2 threads $1" "$j"
    if better "$med" "${UBEST[$2]:-}"; then UBEST[$2]=$med; UBEST_SET[$2]="threads $1"; UJ[$2]=$j; fi
}
run_torch() { # threads policy precision
    local j med amp=""
    [ "$3" = bf16 ] && amp=--amp
    if [ "$2" = unset ]; then
        j=$(env -u OMP_WAIT_POLICY "$PY" bench/torch_gpt2_step.py --threads "$1" --steps "$STEPS" $amp --json)
    else
        j=$(OMP_WAIT_POLICY=$2 "$PY" bench/torch_gpt2_step.py --threads "$1" --steps "$STEPS" $amp --json)
    fi || { echo "torch_gpt2_step.py failed" >&2; exit 1; }
    med=$(jget median_s <<<"$j")
    fmt_run "pytorch $3 threads $1 OMP_WAIT_POLICY=$2" "$j"
    if better "$med" "${TBEST[$3]:-}"; then TBEST[$3]=$med; TBEST_SET[$3]="threads $1, OMP_WAIT_POLICY $2"; fi
}

echo "== runs ($STEPS timed steps each after 2 warm-up; batch 4 x seq 64)"
torch_settings=("1 unset" "2 unset" "1 PASSIVE" "2 PASSIVE")
utrain_threads=(1 2 1 2)
for ((i = 0; i < ROUNDS; i++)); do
    for prec in fp32 bf16; do
        run_utrain "${utrain_threads[$i]}" $prec
        [ $have_torch = 1 ] && run_torch ${torch_settings[$i]} $prec
    done
done
ubest=${UBEST[fp32]}; ubest_set=${UBEST_SET[fp32]}; UJ[best]=${UJ[fp32]}
tbest=${TBEST[fp32]:-}; tbest_set=${TBEST_SET[fp32]:-}

asis_med=""
if [ "$asis_core" != "$core" ]; then
    uth=${ubest_set#threads }
    # named explicitly: unset, gpt2_step (ut_blas_select_kernels) would re-exec with SkylakeX
    j=$(OPENBLAS_CORETYPE=$asis_core "$STEP_BIN" --threads "$uth" --steps 3 --json) &&
        asis_med=$(jget median_s <<<"$j")
    printf "   utrain  threads %s, OpenBLAS as installed (%s), 3 steps: median %7.1f ms\n" \
        "$uth" "$asis_core" "$(calc %.6f "${asis_med:-0}*1e3")"
fi

# ---- table ----
P=$(jget params <<<"${UJ[best]}")
uth=${ubest_set#threads }
rate=${RATE[$uth]}
# FLOPs: 6 * params * tokens (matmuls fwd + bwd) + attention 12 * L * B * T^2 * C
FLOPS=$(calc %.0f "6*$P*256 + 12*12*4*64*64*768")
limit=$(calc %.6f "$FLOPS / ($rate*1e9)")
echo
echo "== GPT-2 124M training step (B=4, T=64, AdamW), $(nproc) cores"
printf "  %-44s %s\n" "parameters" "$P"
printf "  %-44s %.1f GFLOP  (6*P*B*T + 12*L*B*T^2*C; gemm part %.1f GFLOP)\n" "step FLOPs" \
    "$(calc %.6f "$FLOPS/1e9")" "$(calc %.6f "$GEMM_FLOPS/1e9")"
printf "  %-44s %8.1f ms   (%s, OpenBLAS %s)\n" "utrain median (best setting)" "$(calc %.6f "$ubest*1e3")" "$ubest_set" "$core"
[ -n "$asis_med" ] &&
    printf "  %-44s %8.1f ms   (%s)\n" "utrain median, OpenBLAS as installed" "$(calc %.6f "$asis_med*1e3")" "$asis_core"
if [ $have_torch = 1 ]; then
    printf "  %-44s %8.1f ms   (%s)\n" "PyTorch median (best setting)" "$(calc %.6f "$tbest*1e3")" "$tbest_set"
    printf "  %-44s %8.2f     (goal <= 0.5)\n" "ratio utrain / PyTorch" "$(calc %.6f "$ubest/$tbest")"
    [ -n "$asis_med" ] &&
        printf "  %-44s %8.2f\n" "ratio, OpenBLAS as installed" "$(calc %.6f "$asis_med/$tbest")"
fi
printf "  %-44s %8.1f GFLOP/s (%s threads, step-weighted shapes)\n" "sgemm rate" "$rate" "$uth"
printf "  %-44s %8.1f ms\n" "limit = FLOPs / sgemm rate" "$(calc %.6f "$limit*1e3")"
printf "  %-44s %8.2f\n" "fraction of the limit utrain achieves" "$(calc %.6f "$limit/$ubest")"
printf "  %-44s %8.1f MiB\n" "utrain peak activation memory" "$(calc %.6f "$(jget peak_act_bytes <<<"${UJ[best]}")/1048576")"

# ---- bf16 ----
ub=${UBEST[bf16]}
echo
echo "== bf16: utrain train.precision bf16 vs PyTorch torch.autocast(\"cpu\", dtype=torch.bfloat16)"
printf "  %-44s %s\n" "utrain bf16 matmul path" "$(jget matmul_path <<<"${UJ[bf16]}")"
printf "  %-44s %8.1f ms   (%s)\n" "utrain bf16 median (best setting)" "$(calc %.6f "$ub*1e3")" "${UBEST_SET[bf16]}"
printf "  %-44s %8.2f\n" "utrain bf16 / utrain fp32 step time" "$(calc %.6f "$ub/$ubest")"
if [ $have_torch = 1 ]; then
    tb=${TBEST[bf16]}
    printf "  %-44s %8.1f ms   (%s)\n" "PyTorch autocast bf16 median (best setting)" "$(calc %.6f "$tb*1e3")" "${TBEST_SET[bf16]}"
    printf "  %-44s %8.2f\n" "PyTorch bf16 / PyTorch fp32 step time" "$(calc %.6f "$tb/$tbest")"
    printf "  %-44s %8.2f\n" "ratio utrain bf16 / PyTorch bf16" "$(calc %.6f "$ub/$tb")"
fi
pf=$(jget peak_act_bytes <<<"${UJ[fp32]}"); pb=$(jget peak_act_bytes <<<"${UJ[bf16]}")
printf "  %-44s %8.1f MiB (fp32 %.1f MiB: %.2f of it)\n" "utrain peak activation memory, bf16" \
    "$(calc %.6f "$pb/1048576")" "$(calc %.6f "$pf/1048576")" "$(calc %.6f "$pb/$pf")"
exit 0
