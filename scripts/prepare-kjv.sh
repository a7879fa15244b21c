#!/usr/bin/env bash
# Writes token shards of the King James Bible for configs/gpt2_kjv.yml (byte
# level) or configs/gpt2_kjv_bpe.yml (GPT-2's BPE):
#   OUT/train.bin  Genesis .. Philemon
#   OUT/dev.bin    Hebrews .. Jude
#   OUT/test.bin   Revelation
# Text from Debian's bible-kjv (`bible`), one verse per line without its
# reference. Usage: scripts/prepare-kjv.sh [OUT_DIR] [UTRAIN] [TOKENIZER]
# TOKENIZER: byte (the default) or a pretrained tokenizer directory, e.g.
#   scripts/prepare-kjv.sh data/kjv_bpe build/utrain data/pretrained/gpt2-bpe
set -euo pipefail
out=${1:-data/kjv}
utrain=${2:-build/utrain}
tok=${3:-byte}
command -v bible >/dev/null || { echo "prepare-kjv: 'bible' not found (apt-get install bible-kjv)" >&2; exit 1; }
[ -x "$utrain" ] || { echo "prepare-kjv: $utrain not built (make)" >&2; exit 1; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip() { sed -e 's/^[^ ]* //'; }
bible -f "gen1:1-phm1:25" | strip > "$tmp/train.txt"
bible -f "heb1:1-jude1:25" | strip > "$tmp/dev.txt"
bible -f "rev1:1-rev22:21" | strip > "$tmp/test.txt"
for s in train dev test; do
    [ -s "$tmp/$s.txt" ] || { echo "prepare-kjv: no text for $s" >&2; exit 1; }
    "$utrain" tokenize --tokenizer "$tok" "$tmp/$s.txt" "$out/$s.bin"
done
echo "prepare-kjv: wrote $out/{train,dev,test}.bin ($(wc -c < "$tmp/train.txt") / $(wc -c < "$tmp/dev.txt") / $(wc -c < "$tmp/test.txt") bytes of text)"
