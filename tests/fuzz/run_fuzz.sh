#!/usr/bin/env bash
# `make fuzz`: runs each fuzz target for SECONDS, one after another, on its
# committed corpus (tests/fuzz/<name>/corpus and crashes/, read only). New
# interesting inputs go to BUILD/fuzz/<name>/new/, crashes to
# BUILD/fuzz/<name>/ (crash-*, leak-*, oom-*, timeout-*); the full log is
# BUILD/fuzz/<name>.log. Prints executions per target and exits 1 if any
# target stopped on a finding.
# usage: tests/fuzz/run_fuzz.sh BUILD SECONDS NAME...
set -u
build=$1 seconds=$2; shift 2
cd "$(dirname "$0")/../.." || exit 1
failed=0
printf '%-12s %12s %10s  %s\n' target executions exec/s result
for name in "$@"; do
    out="$build/fuzz/$name"
    mkdir -p "$out/new"
    dict=(); [ -f "tests/fuzz/$name.dict" ] && dict=(-dict="tests/fuzz/$name.dict")
    dirs=("$out/new" "tests/fuzz/$name/corpus"); [ -d "tests/fuzz/$name/crashes" ] && dirs+=("tests/fuzz/$name/crashes")
    "$build/tests/fuzz/fuzz_$name" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/" "${dict[@]}" "${dirs[@]}" \
        > "$out.log" 2>&1
    rc=$?
    runs=$(grep -E '^stat::number_of_executed_units' "$out.log" | awk '{print $2}')
    speed=$(grep -E '^stat::average_exec_per_sec' "$out.log" | awk '{print $2}')
    result="no crash"
    if [ "$rc" -ne 0 ]; then
        result="FOUND (exit $rc): $(ls "$out" | grep -E '^(crash|leak|oom|timeout|slow-unit)-' | head -n 1), see $out.log"
        failed=1
    fi
    printf '%-12s %12s %10s  %s\n' "$name" "${runs:-?}" "${speed:-?}" "$result"
done
exit $failed
