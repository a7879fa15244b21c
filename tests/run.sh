#!/usr/bin/env bash
# Runs every test binary under BUILD/tests (for each BUILD given; default
# build) and adds up their "N passed, N failed" lines into one closing line,
# after each program's seconds and a list of the slowest.
# The fuzz replay programs (BUILD/tests/fuzz/test_fuzz_<name>) come from
# tests/fuzz/fuzz_<name>.c.
#
# A build given as BUILD:N runs its programs N at a time (each one's output
# is printed whole, in name order, once they have all ended). `make test`
# gives the CUDA emulator's build 2: the emulator runs a program's kernels
# on one host thread, so two of them keep two cores busy. The other builds'
# programs run one after another: they use the cores themselves (OpenBLAS's
# threads, mpirun's ranks) and some time signals and stops.
set -u
[ $# -eq 0 ] && set -- build
cd "$(dirname "$0")/.." || exit 1
total_pass=0; total_fail=0; broken=(); times=()

# the programs of build, in name order, with their sources; stale binaries said and left out
programs() {
    local t src
    for t in $(find "$1/tests" -type f -perm -u+x -name 'test_*' | sort); do
        src="tests/${t#"$1"/tests/}.c"
        case "$t" in */tests/fuzz/test_fuzz_*) src="tests/fuzz/fuzz_${t##*/test_fuzz_}.c" ;; esac
        if [ ! -f "$src" ]; then echo "== $t: no $src (a stale binary), skipped" >&2; continue; fi
        echo "$t"
    done
}

# what program $1 printed ($2), its exit status $3 and seconds $4, into the totals
account() {
    local t=$1 out=$2 rc=$3 secs=$4 line p f
    echo "== $t"
    echo "$out"
    echo "(${t}: ${secs} s)"
    times+=("$secs $t")
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        broken+=("$t (exit $rc, no summary)"); total_fail=$((total_fail + 1)); return
    fi
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        broken+=("$t (exit $rc)"); total_fail=$((total_fail + 1))
    fi
}

for spec in "$@"; do
    build=${spec%%:*}; jobs=1
    case "$spec" in *:*) jobs=${spec##*:} ;; esac
    case "$jobs" in '' | *[!0-9]* | 0) echo "tests/run.sh: $spec: the job count must be a positive number" >&2; exit 2 ;; esac
    mapfile -t list < <(programs "$build")
    if [ "$jobs" -eq 1 ]; then
        for t in "${list[@]}"; do
            t0=$SECONDS
            out=$("$t" 2>&1); rc=$?
            account "$t" "$out" "$rc" "$((SECONDS - t0))"
        done
        continue
    fi
    tmp=$(mktemp -d) || exit 1
    running=0
    for i in "${!list[@]}"; do
        if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
        (
            t0=$SECONDS
            "${list[$i]}" > "$tmp/$i.out" 2>&1
            echo "$? $((SECONDS - t0))" > "$tmp/$i.rc"
        ) &
        running=$((running + 1))
    done
    wait
    for i in "${!list[@]}"; do
        read -r rc secs < "$tmp/$i.rc" || { rc=1; secs=0; }
        account "${list[$i]}" "$(cat "$tmp/$i.out")" "$rc" "$secs"
    done
    rm -rf "$tmp"
done
echo "the slowest test programs (seconds):"
printf '%s\n' "${times[@]+"${times[@]}"}" | sort -rn | head -8 | sed 's/^/  /'
for b in "${broken[@]+"${broken[@]}"}"; do echo "broken: $b"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
