#!/usr/bin/env bash
# Two builds of utrain on the same CPU work, interleaved: did a change slow
# the CPU down?
#
#   bench/run_builds_compare.sh OLD_BUILD NEW_BUILD
#
# Each build directory holds utrain and bench/gpt2_step (make build/utrain
# build/bench/gpt2_step in a checkout of the old commit, e.g. a git worktree).
# Per round, old then new then new then old (so drift hits both alike):
#   - the GPT-2 124M training step: BUILD/bench/gpt2_step --steps 6 --threads 2
#     --json (its median step time);
#   - the Fashion-MNIST CNN epoch: BUILD/utrain train configs/fmnist_cnn.yml
#     with threads 2, no evaluation, a temporary output_dir (the epoch time is
#     the trainer's "Training done: N steps in X s").
# BENCH_ROUNDS rounds (default 2; each round runs every case twice per build).
# `uptime` is printed before and after: measure on a quiet machine (load
# below 1.5, no builds, tests or helpers running). Prints each build's
# medians and new / old.
set -uo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: bench/run_builds_compare.sh OLD_BUILD NEW_BUILD}
NEW=${2:?usage: bench/run_builds_compare.sh OLD_BUILD NEW_BUILD}
ROUNDS=${BENCH_ROUNDS:-2}
for b in "$OLD" "$NEW"; do
    [ -x "$b/utrain" ] && [ -x "$b/bench/gpt2_step" ] || { echo "$b: needs utrain and bench/gpt2_step" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/utrain-compare-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
echo "load before: $(uptime)"

gpt2() { # BUILD -> median step seconds
    "$1/bench/gpt2_step" --steps 6 --threads 2 --json 2>/dev/null | tail -1 |
        grep -o '"median_s": *[0-9.e+-]*' | grep -o '[0-9.e+-]*$'
}
cnn() { # BUILD -> epoch seconds
    rm -rf "$tmp/runs"
    "$1/utrain" train configs/fmnist_cnn.yml --set threads=2 --set train.eval_strategy=no \
        --set output_dir="$tmp/runs" --set train.progress=off 2>&1 |
        grep -o 'Training done: [0-9]* steps in [0-9.]* s' | grep -o '[0-9.]* s$' | grep -o '[0-9.]*'
}

declare -A res
for ((r = 1; r <= ROUNDS; r++)); do
    for b in "$OLD" "$NEW" "$NEW" "$OLD"; do
        g=$(gpt2 "$b"); c=$(cnn "$b")
        echo "round $r  $b: gpt2 step ${g:-?} s, cnn epoch ${c:-?} s"
        res[$b.gpt2]+="$g "; res[$b.cnn]+="$c "
    done
done
echo "load after: $(uptime)"
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
printf '\n%-10s %14s %14s %10s\n' case "old (median)" "new (median)" "new/old"
for k in gpt2 cnn; do
    o=$(echo "${res[$OLD.$k]}" | median); n=$(echo "${res[$NEW.$k]}" | median)
    printf '%-10s %12.3f s %12.3f s %10.3f\n' "$k" "$o" "$n" "$(echo "$n / $o" | bc -l)"
done
