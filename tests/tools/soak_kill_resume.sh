#!/usr/bin/env bash
# Soak test of crash recovery (not part of `make test`; docs/testing.md):
# trains a tiny GPT-2 on the SST-2 sample text once without interruption,
# then trains the same configuration again, killing it with SIGKILL at random
# moments (a random step, plus a random fraction of a step) KILLS times,
# resuming each time with continue_training=true, and finally lets it
# finish. It prints, per kill, the step the run had reached, the step it
# resumed from and the steps lost, and whether every loss the resumed
# segment logged equals the uninterrupted run's loss at that step ("exact"); at the end the count of exact resumes and whether the
# final checkpoint is byte for byte the uninterrupted run's (cmp).
#
# usage: tests/tools/soak_kill_resume.sh [-n KILLS] [-s STEPS] [-i SAVE_INTERVAL]
#                                        [-r SEED] [-b BUILD] [-k]
#   -n  kills (default 10)        -s  training steps (default 300)
#   -i  save every N steps (20)   -r  seed of the kill times (default: random)
#   -b  build directory with utrain (default build; built if missing)
#   -k  keep the temporary directory
# Exit status 0 when every resume was exact and the final checkpoints match.
set -euo pipefail
kills=10 steps=300 every=20 seed=$RANDOM build=build keep=0
while getopts "n:s:i:r:b:k" o; do
    case $o in
        n) kills=$OPTARG ;; s) steps=$OPTARG ;; i) every=$OPTARG ;; r) seed=$OPTARG ;;
        b) build=$OPTARG ;; k) keep=1 ;; *) sed -n '12,18p' "$0"; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
[ -x "$build/utrain" ] || make --no-print-directory BUILD="$build" all
utrain=$PWD/$build/utrain
tmp=$(mktemp -d /tmp/utrain-soak-XXXXXX)
pid=
finish() { [ -n "$pid" ] && kill -KILL "$pid" 2> /dev/null; wait 2> /dev/null; if [ "$keep" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi; }
trap finish EXIT
RANDOM=$seed

"$utrain" tokenize --tokenizer byte data/sst2_sample/train.tsv "$tmp/text.bin" > /dev/null
# One configuration for both runs (the same experiment name, so the same
# config hash); each run gets its own output_dir with --set.
cat > "$tmp/soak.yml" <<EOF
experiment_name: soak
seed: 5
model: {name: gpt2, n_layer: 2, n_head: 2, n_embd: 32, vocab_size: 256, block_size: 16}
data: {name: tokens, train_path: $tmp/text.bin, seq_len: 16}
train: {max_steps: $steps, batch_size: 8, log_interval: 1, eval_strategy: "no",
        save_strategy: steps, save_interval: $every, save_total_limit: 2, progress: lines}
optim: {name: adamw, lr: 1.0e-3}
EOF
final=$(printf 'checkpoints/step_%08d.safetensors' "$steps")

# "loss" of the train line for step $2 in metrics file $1 (lines from $3 on).
loss_at() { [ -f "$1" ] || return 0; tail -n +"${3:-1}" "$1" | grep -F "{\"step\": $2, " | grep -F '"split": "train"' |
            tail -n 1 | sed -n 's/.*"loss": \([^,}]*\).*/\1/p' || true; }
# The step the segment whose output is $1 resumed from (empty: it did not get there).
resumed_step() { [ -f "$1" ] || return 0; sed -n 's/^Resuming from .* (step \([0-9]*\),.*/\1/p' "$1"; }
# Steps of the complete train lines of metrics file $1 from line $2 on.
steps_from() { [ -f "$1" ] || return 0; tail -n +"$2" "$1" | grep -F '"split": "train"' | grep '}$' |
               sed -n 's/^{"step": \([0-9]*\),.*/\1/p' || true; }

start=$(date +%s.%N)
"$utrain" train "$tmp/soak.yml" --set output_dir="$tmp/ref" > "$tmp/ref.out" 2>&1
secs=$(echo "scale=2; ($(date +%s.%N) - $start) / 1" | bc)
ref=$tmp/ref/soak
echo "uninterrupted run: $steps steps in ${secs}s; kill times seeded with $seed"

run=$tmp/kill/soak metrics=$tmp/kill/soak/metrics.jsonl
exact=0 killed=0 lost_total=0 reached_end=0
printf '%5s %8s %9s %5s %s\n' kill reached resumed lost "resumed segment"
segment() {   # runs one segment in the background; sets pid and first (its first metrics line)
    first=$(( $( [ -f "$metrics" ] && wc -l < "$metrics" || echo 0) + 1 ))
    "$utrain" train "$tmp/soak.yml" --set output_dir="$tmp/kill" --set continue_training=true \
        > "$tmp/seg$1.out" 2>&1 &
    pid=$!
}
# Compares the losses the segment starting at metrics line $1 logged with the
# reference's; prints "exact" or the first step that differs.
check_segment() {
    local s want got
    for s in $(steps_from "$metrics" "$1"); do
        want=$(loss_at "$ref/metrics.jsonl" "$s") got=$(loss_at "$metrics" "$s" "$1")
        if [ "$want" != "$got" ]; then echo "differs at step $s ($got vs $want)"; return 1; fi
    done
    echo exact
}

for ((k = 1; k <= kills; k++)); do
    segment "$k"
    # a random moment: once the run has logged a random step of the next two
    # save intervals after its newest checkpoint, plus a random part of one
    # step's time (machine load makes wall-clock times alone unreliable)
    newest=$(ls "$run/checkpoints" 2> /dev/null | sed -n 's/^step_0*\([0-9][0-9]*\)\.safetensors$/\1/p' |
             sort -n | tail -n 1 || true)
    left=$((steps - ${newest:-0} - 1))
    [ "$left" -gt 0 ] || { echo "(no steps left to kill in)"; break; }
    [ "$left" -gt $((2 * every)) ] && left=$((2 * every))
    target=$(( ${newest:-0} + 1 + RANDOM % left ))
    while kill -0 "$pid" 2> /dev/null; do
        now=$(steps_from "$metrics" "$first" | tail -n 1)
        [ "${now:-0}" -ge "$target" ] && break
        sleep 0.01
    done
    sleep "$(echo "scale=4; $((RANDOM % 1000)) * $secs / $steps / 1000" | bc)"
    kill -KILL "$pid" 2> /dev/null || true
    rc=0; wait "$pid" 2> /dev/null || rc=$?
    if [ "$rc" -ne 137 ]; then reached_end=1; break; fi
    killed=$((killed + 1))
    reached=$(steps_from "$metrics" "$first" | tail -n 1)
    from=$(resumed_step "$tmp/seg$k.out")
    reached=${reached:-${from:-0}}
    # metrics lines may still sit in a buffer: a checkpoint proves its step too
    saved=$(ls "$run/checkpoints" 2> /dev/null | sed -n 's/^step_0*\([0-9][0-9]*\)\.safetensors$/\1/p' |
            sort -n | tail -n 1 || true)
    [ "${saved:-0}" -gt "$reached" ] && reached=$saved
    # the step the next segment resumes from (the newest checkpoint that loads;
    # the trainer skips a damaged one) is read from that segment's output below
    eval "reached_$k=$reached first_$k=$first"
done

# The last segment runs to the end.
segment final
wait "$pid"
if [ "$reached_end" = 1 ]; then echo "(the run finished before kill $((killed + 1)))"; fi

# Per kill: resumed-from comes from the output of the segment after it.
for ((k = 1; k <= killed; k++)); do
    next=$((k + 1)); [ "$k" -eq "$killed" ] && next=final
    from=$(resumed_step "$tmp/seg$next.out")
    from=${from:-0}
    eval "reached=\$reached_$k"
    if [ "$next" = final ]; then nfirst=$first; else eval "nfirst=\$first_$next"; fi
    verdict=$(check_segment "$nfirst") && exact=$((exact + 1))
    lost=$((reached - from)); lost_total=$((lost_total + lost))
    printf '%5d %8d %9d %5d %s\n' "$k" "$reached" "$from" "$lost" "$verdict"
done

same="differ"
if [ -f "$run/$final" ] && cmp -s "$ref/$final" "$run/$final"; then same="identical (cmp)"; fi
echo "kills: $killed, exact resumes: $exact of $killed, steps lost: $lost_total in all" \
     "(at most $every per kill expected), final checkpoint vs uninterrupted: $same"
[ "$exact" -eq "$killed" ] && [ "$same" != differ ]
