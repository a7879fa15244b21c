#!/usr/bin/env bash
# GPT-2 124M training step with DDP on 2 ranks (mpirun -np 2, one machine).
#
#   bench/run_ddp_step.sh [BUILD]        (BUILD defaults to build; `make bench-ddp` runs it)
#
# Runs build/bench/ddp_step (bench/ddp_step.c) BENCH_RUNS times under
#   mpirun -np 2 --oversubscribe --bind-to none
# with OMPI_MCA_btl=self,vader (shared memory) and
# OMPI_MCA_mpi_yield_when_idle=1, each rank with BENCH_THREADS OpenMP threads
# (default 1: the two ranks share this machine's cores). Each run prints its
# table: per mode (overlap: bucket all-reduces start during backward; no
# overlap: all start after it) the median step time and its phases, the time
# waited in communication (ut_comm_stats), and the all-reduce bandwidth of the
# gradient buckets issued through utrain's communicator against a bare
# MPI_Allreduce(MPI_IN_PLACE) of the same bytes, in one call and in the same
# buckets (goal: utrain >= 0.90 of the bare one call). Then a summary: the
# median over the runs of each figure.
#
# OpenBLAS 0.3.21 picks its generic Prescott kernels on this CPU; as in
# run_gpt2_step.sh the runs use OPENBLAS_CORETYPE=SkylakeX when the library
# reports Prescott on a CPU with avx512f (UT_BENCH_KEEP_CORE=1 keeps the
# library's choice).
#
# Environment: BENCH_RUNS (3), BENCH_STEPS (timed steps per mode, 6),
# BENCH_REPS (all-reduce repetitions, 5), BENCH_BATCH (4), BENCH_SEQ (64),
# BENCH_THREADS (1), BENCH_SWEEP (other bucket sizes in MiB, "1,5,100"),
# BENCH_ARGS (more ddp_step flags, e.g. "--layers 2 --embd 256" for a quick
# look). OpenMPI's own variables pass through, e.g.
# OMPI_MCA_btl_vader_single_copy_mechanism=none (copy through shared-memory
# fragments instead of CMA; see docs/performance.md).
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
RUNS=${BENCH_RUNS:-3}
STEPS=${BENCH_STEPS:-6}
REPS=${BENCH_REPS:-5}
BATCH=${BENCH_BATCH:-4}
SEQ=${BENCH_SEQ:-64}
THREADS=${BENCH_THREADS:-1}
SWEEP=${BENCH_SWEEP:-1,5,100}
BIN=$BUILD/bench/ddp_step
bench_build "$BUILD" "$BIN" bench/ddp_step.c
bench_tmpdir ddp

# ---- OpenMPI: as root, more ranks + threads than cores, shared memory ----
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader}
export OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=$THREADS

bench_machine
echo "== $(mpirun --version 2>/dev/null | head -1); btl $OMPI_MCA_btl," \
    "vader single copy: ${OMPI_MCA_btl_vader_single_copy_mechanism:-cma, the OpenMPI default}"

bench_openblas_core "$BIN" --core

# ---- runs ----
for i in $(seq 1 "$RUNS"); do
    echo
    echo "== run $i of $RUNS (load $(bench_load))"
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of flags
    mpirun -np 2 --oversubscribe --bind-to none "$BIN" --threads "$THREADS" --batch "$BATCH" \
        --seq "$SEQ" --steps "$STEPS" --reps "$REPS" --sweep-mb "$SWEEP" --json "$TMP/run$i.json" \
        ${BENCH_ARGS:-} || { echo "ddp_step failed (run $i)" >&2; exit 1; }
done

# ---- summary: medians over the runs ----
med() { # KEY [SCALE]: the median over runs of a JSON field, times SCALE
    local vals="" f
    for f in "$TMP"/run*.json; do vals="$vals $(calc %.9f "$(jget "$1" <"$f")*${2:-1}")"; done
    echo "$vals" | median
}
# the per-run GB/s of a time field (bytes field / time field), then the median over runs
med_gbps() { # BYTES_KEY TIME_KEY
    local vals="" f
    for f in "$TMP"/run*.json; do
        vals="$vals $(calc %.6f "$(jget "$1" <"$f")/$(jget "$2" <"$f")/1e9")"
    done
    echo "$vals" | median
}
med_ratio() { # NUM_KEY DEN_KEY (each run's ratio of two fields, then the median)
    local vals="" f
    for f in "$TMP"/run*.json; do vals="$vals $(calc %.6f "$(jget "$1" <"$f")/$(jget "$2" <"$f")")"; done
    echo "$vals" | median
}
j1="$TMP/run1.json"
echo
P=$(jget params <"$j1"); NR=$(jget ranks <"$j1"); NT=$(jget threads <"$j1")
NB=$(jget buckets <"$j1"); BMB=$(jget bucket_mb <"$j1")
B=$(jget batch <"$j1"); T=$(jget seq <"$j1")
echo "== summary: medians over $RUNS runs: $P parameters, $NR ranks x $NT threads," \
    "batch $B x seq $T per rank, $NB buckets of $BMB MiB"
printf "  %-46s %12s %12s\n" "ms, rank 0 unless said" "overlap" "no overlap"
for row in "step:step" "forward + loss:fwd" "backward:bwd" "ut_ddp_finish (after backward):finish" \
    "  waiting for the other rank's backward:skew" "  after the last rank's backward:tail" \
    "AdamW + zero grad + reset:opt" "comm wait, rank 0:wait"; do
    label=${row%%:*}; key=${row#*:}
    printf "  %-46s %12.1f %12.1f\n" "$label" "$(med "overlap_${key}_r0" 1e3)" "$(med "no_overlap_${key}_r0" 1e3)"
done
printf "  %-46s %12.1f %12.1f\n" "step, rank 1" "$(med overlap_step_r1 1e3)" "$(med no_overlap_step_r1 1e3)"
printf "  %-46s %12.1f %12.1f\n" "  waiting for the other's backward, rank 1" "$(med overlap_skew_r1 1e3)" \
    "$(med no_overlap_skew_r1 1e3)"
printf "  %-46s %12.1f %12.1f\n" "comm wait, rank 1" "$(med overlap_wait_r1 1e3)" "$(med no_overlap_wait_r1 1e3)"
so=$(med overlap_step_r0); sn=$(med no_overlap_step_r0)
printf "  overlap saves %.1f ms per step (%.1f%%)\n" "$(calc %.6f "($sn-$so)*1e3")" "$(calc %.6f "100*($sn-$so)/$sn")"
echo
printf "  %-46s %9s %9s\n" "all-reduce of $(calc %.1f "$(jget grad_bytes <"$j1")/1048576") MiB" "ms" "GB/s"
printf "  %-46s %9.1f %9.2f\n" "bare MPI_Allreduce, one call" "$(med bare1_s 1e3)" "$(med_gbps span_bytes bare1_s)"
printf "  %-46s %9.1f %9.2f\n" "utrain iallreduce, one call" "$(med ut1_s 1e3)" "$(med_gbps span_bytes ut1_s)"
printf "  %-46s %9.1f %9.2f\n" "bare MPI_Allreduce, ut_ddp's buckets" "$(med bare_buckets_s 1e3)" \
    "$(med_gbps grad_bytes bare_buckets_s)"
printf "  %-46s %9.1f %9.2f\n" "utrain iallreduce, ut_ddp's buckets" "$(med ut_buckets_s 1e3)" \
    "$(med_gbps grad_bytes ut_buckets_s)"
printf "  %-46s %9.1f %9.2f\n" "bare MPI_Allreduce, $(jget split_nb <"$j1") pieces <= $BMB MiB" \
    "$(med split_bare_s 1e3)" "$(med_gbps grad_bytes split_bare_s)"
printf "  %-46s %9.1f %9.2f\n" "utrain iallreduce, $(jget split_nb <"$j1") pieces <= $BMB MiB" \
    "$(med split_ut_s 1e3)" "$(med_gbps grad_bytes split_ut_s)"
printf "  %-46s %9.1f %9.2f\n" "no-overlap step: ut_ddp_finish" "$(med no_overlap_finish_r0 1e3)" \
    "$(med_gbps step_bytes no_overlap_finish_r0)"
printf "  %-46s %9.1f %9.2f\n" "no-overlap step: after the last backward" "$(med no_overlap_tail_r0 1e3)" \
    "$(med_gbps step_bytes no_overlap_tail_r0)"
for mb in ${SWEEP//,/ }; do
    nb=$(jget "sweep_${mb}_nb" <"$j1")
    [ -n "$nb" ] || continue
    printf "  %-46s %9.1f %9.2f\n" "bare MPI_Allreduce, $nb buckets of $mb MiB" "$(med "sweep_${mb}_bare_s" 1e3)" \
        "$(med_gbps grad_bytes "sweep_${mb}_bare_s")"
    printf "  %-46s %9.1f %9.2f\n" "utrain iallreduce, $nb buckets of $mb MiB" "$(med "sweep_${mb}_ut_s" 1e3)" \
        "$(med_gbps grad_bytes "sweep_${mb}_ut_s")"
done
echo
r=$(med ratio)
printf "  %-52s %6.2f  (goal >= 0.90: %s)\n" "ratio utrain buckets / bare one call (bandwidth)" "$r" \
    "$(awk "BEGIN{print ($r >= 0.90) ? \"met\" : \"NOT met\"}")"
printf "  %-52s %6.2f\n" "ratio utrain buckets / bare buckets" "$(med_ratio bare_buckets_s ut_buckets_s)"
printf "  %-52s %6.2f\n" "ratio utrain one call / bare one call" "$(med_ratio bare1_s ut1_s)"
printf "  per run, ratio utrain buckets / bare one call:"
for f in "$TMP"/run*.json; do printf " %.2f" "$(jget ratio <"$f")"; done
echo
same=$(cat "$TMP"/run*.json | jget same | sort -u | tr '\n' ' ')
echo "  ranks' parameters identical after the steps: $same"
echo "== load at the end: $(bench_load)"
exit 0
