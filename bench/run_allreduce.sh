#!/usr/bin/env bash
# All-reduce between 2 ranks on this machine: utrain's communicator over MPI
# (mpirun, shared memory) and over TCP (ranks started with torchrun's
# variables), and PyTorch's Gloo over TCP, side by side.
#
#   bench/run_allreduce.sh [BUILD]        (`make bench-allreduce` runs it)
#
# Runs build/bench/comm_allreduce (bench/comm_allreduce.c) and
# bench/torch_allreduce.py BENCH_RUNS times each, interleaved (mpi, tcp,
# gloo, mpi, ...), with one OpenMP thread per rank, and prints per size the
# median over the runs of each run's median call time, and the ratios
# utrain tcp / gloo and utrain tcp / utrain mpi (time: below 1 is faster).
#
# Environment: BENCH_RUNS (3), BENCH_REPS (timed calls per size, 20; a
# quarter for 4 MiB and up), PYTHON (the interpreter with torch; without it
# Gloo is skipped).
set -uo pipefail

# shellcheck source=bench/common.sh
. "$(dirname "$0")/common.sh"
BUILD=${1:-build}
RUNS=${BENCH_RUNS:-3}
REPS=${BENCH_REPS:-20}
BIN=$BUILD/bench/comm_allreduce
bench_build "$BUILD" "$BIN" bench/comm_allreduce.c
bench_tmpdir allreduce
bench_have_torch torch.distributed
if [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
bench_machine

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null ||
    echo $((20000 + RANDOM % 20000)); }
two_ranks() { # OUT CMD...: two processes with torchrun's variables
    local out=$1 port pids=() r rc=0
    shift
    port=$(free_port)
    for r in 0 1; do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
            "$@" --json "$out" >"$out.r$r.log" 2>&1 &
        pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=1; done
    [ $rc = 0 ] || { echo "failed: $* (logs in $out.r*.log)" >&2; cat "$out".r*.log >&2; exit 1; }
}

for i in $(seq 1 "$RUNS"); do
    echo
    echo "== run $i of $RUNS (load $(bench_load))"
    mpirun -np 2 --oversubscribe --bind-to none "$BIN" --reps "$REPS" --json "$TMP/mpi$i.json" ||
        { echo "comm_allreduce under mpirun failed" >&2; exit 1; }
    two_ranks "$TMP/tcp$i.json" "$BIN" --reps "$REPS"
    cat "$TMP/tcp$i.json.r0.log"
    if [ "$have_torch" = 1 ]; then
        two_ranks "$TMP/gloo$i.json" "$PY" bench/torch_allreduce.py --reps "$REPS"
        cat "$TMP/gloo$i.json.r0.log"
    fi
done

med() { # KIND KEY: the median over runs
    local vals="" f
    for f in "$TMP"/"$1"[0-9]*.json; do [ -f "$f" ] && vals="$vals $(jget "$2" <"$f")"; done
    echo "$vals" | median
}
echo
echo "== summary: medians over $RUNS runs, ms per all-reduce (2 ranks, this machine; load $(bench_load))"
printf "  %10s %10s %10s %10s %12s %12s\n" bytes "utrain mpi" "utrain tcp" gloo "tcp / gloo" "tcp / mpi"
for b in 4096 262144 4194304 67108864; do
    m=$(med mpi "s_$b"); t=$(med tcp "s_$b"); g=$(med gloo "s_$b")
    if [ -n "$g" ]; then
        printf "  %10s %10.3f %10.3f %10.3f %12.2f %12.2f\n" "$b" "$(calc %.6f "$m*1e3")" "$(calc %.6f "$t*1e3")" \
            "$(calc %.6f "$g*1e3")" "$(calc %.4f "$t/$g")" "$(calc %.4f "$t/$m")"
    else
        printf "  %10s %10.3f %10.3f %10s %12s %12.2f\n" "$b" "$(calc %.6f "$m*1e3")" "$(calc %.6f "$t*1e3")" \
            - - "$(calc %.4f "$t/$m")"
    fi
done
