#!/usr/bin/env bash
# Runs every test binary under BUILD/tests (for each BUILD given; default
# build) and adds up their "N passed, N failed" lines into one closing line,
# after each program's seconds and a list of the slowest.
# The fuzz replay programs (BUILD/tests/fuzz/test_fuzz_<name>) come from
# tests/fuzz/fuzz_<name>.c.
set -u
[ $# -eq 0 ] && set -- build
cd "$(dirname "$0")/.." || exit 1
total_pass=0; total_fail=0; broken=(); times=()
for build in "$@"; do
for t in $(find "$build/tests" -type f -perm -u+x -name 'test_*' | sort); do
    src="tests/${t#"$build"/tests/}.c"
    case "$t" in */tests/fuzz/test_fuzz_*) src="tests/fuzz/fuzz_${t##*/test_fuzz_}.c" ;; esac
    if [ ! -f "$src" ]; then echo "== $t: no $src (a stale binary), skipped"; continue; fi
    echo "== $t"
    t0=$SECONDS
    out=$("$t" 2>&1); rc=$?
    echo "$out"
    echo "(${t}: $((SECONDS - t0)) s)"
    times+=("$((SECONDS - t0)) $t")
    line=$(echo "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed' | tail -n 1)
    if [ -z "$line" ]; then
        broken+=("$t (exit $rc, no summary)"); total_fail=$((total_fail + 1)); continue
    fi
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        broken+=("$t (exit $rc)"); total_fail=$((total_fail + 1))
    fi
done
done
echo "the slowest test programs (seconds):"
printf '%s\n' "${times[@]+"${times[@]}"}" | sort -rn | head -8 | sed 's/^/  /'
for b in "${broken[@]+"${broken[@]}"}"; do echo "broken: $b"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
