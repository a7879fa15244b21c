# What the bench/run_*.sh scripts share; each sources it first:
#     . "$(dirname "$0")/common.sh"
# It moves to the repository root and sets PY (the interpreter that runs
# PyTorch: $PYTHON, default python3). The helpers:
#   jget NAME           field NAME of a one-line JSON object on stdin
#   calc FMT EXPR       awk's printf of an arithmetic expression
#   median              the median of whitespace-separated numbers on stdin
#                       (nothing when there are none)
#   bench_load          the 1, 5 and 15 minute load averages
#   fmnist_loop_s METRICS
#                       the training loop's seconds of a configs/fmnist_cnn.yml
#                       epoch from its metrics.jsonl: the sum over the train
#                       lines of the examples in each interval / samples_per_s
#                       (fails when the lines do not cover the 55,000 images)
#   bench_machine       the "== machine: ..." line: cores, CPU model, load
#   bench_build BUILD TARGET [SOURCE]
#                       makes TARGET when it is missing (or older than SOURCE)
#   bench_tmpdir NAME   a fresh /tmp/utrain_NAME.XXXXXX in TMP, removed at exit
#   bench_have_torch MODULES...
#                       have_torch=1 when $PY imports them, else 0 and a line
#                       saying that PyTorch is skipped
#   bench_openblas_core CMD...
#                       core: the OpenBLAS kernel set CMD prints; where that is
#                       the generic Prescott on an avx512f CPU (and neither
#                       OPENBLAS_CORETYPE nor UT_BENCH_KEEP_CORE=1 is set),
#                       exports OPENBLAS_CORETYPE=SkylakeX and asks again;
#                       core_asis: what it printed first
# shellcheck shell=bash disable=SC2034  # have_torch, core, core_asis are for the caller

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
PY=${PYTHON:-python3}

jget() { sed -n "s/.*\"$1\": *\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {if (NR) print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

bench_load() { cut -d' ' -f1-3 /proc/loadavg; }
fmnist_loop_s() {
    awk -v bs=64 -v n=55000 '/"split": "train"/ {
            match($0, /"step": [0-9]+/); s = substr($0, RSTART + 8, RLENGTH - 8) + 0
            match($0, /"samples_per_s": [0-9.eE+-]+/); r = substr($0, RSTART + 17, RLENGTH - 17) + 0
            e = s * bs; if (e > n) e = n; t += (e - prev) / r; prev = e }
            END { if (prev != n) exit 1; printf "%.3f", t }' "$1"
}

bench_machine() {
    echo "== machine: $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores," \
        "$(lscpu | sed -n 's/^Model name: *//p'), load $(bench_load)"
}

bench_build() { # BUILD TARGET [SOURCE]
    [ -x "$2" ] && { [ -z "${3:-}" ] || [ "$2" -nt "$3" ]; } && return 0
    make --no-print-directory BUILD="$1" "$2" >/dev/null || exit 1
}

bench_tmpdir() { # NAME
    TMP=$(mktemp -d "/tmp/utrain_$1.XXXXXX") || exit 1
    # shellcheck disable=SC2064  # the path is fixed now
    trap "rm -rf '$TMP'" EXIT
}

bench_have_torch() { # MODULES...
    local mods
    mods=$(IFS=,; echo "$*")
    have_torch=1
    "$PY" -c "import $mods" 2>/dev/null && return 0
    have_torch=0
    echo "== $PY cannot import $mods (set PYTHON=): PyTorch is skipped, utrain's figures alone"
}

bench_openblas_core() { # CMD...
    core=$("$@")
    core_asis=$core
    if [ "$core" = Prescott ] && [ -z "${OPENBLAS_CORETYPE:-}" ] && [ "${UT_BENCH_KEEP_CORE:-0}" != 1 ] &&
        grep -qw avx512f /proc/cpuinfo; then
        export OPENBLAS_CORETYPE=SkylakeX
        core=$("$@")
        echo "== OpenBLAS picked Prescott (generic SSE3) on an AVX-512 CPU: using OPENBLAS_CORETYPE=SkylakeX ($core)"
    fi
    echo "== OpenBLAS kernels: $core"
}
