#!/usr/bin/env bash
# Prepares scripts/gpu-check.sh's `minilm` step for a lent GPU machine
# (which reaches no network): copies all-MiniLM-L6-v2's config and tokenizer
# files and the Rotten Tomatoes TSV files into .gpu-minilm/ (git-ignored,
# about 1.3 MB; carry it with the call). The pretrained weights (87 MB) do
# not fit in a call; the step gives the model random weights of the same
# shapes there (bench/make_minilm_like.py), which take the same time to
# train.
#
#   scripts/gpu-minilm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
m=data/pretrained/all-MiniLM-L6-v2
for f in "$m/config.json" "$m/vocab.txt" "$m/tokenizer.json" data/rt/train.tsv data/rt/dev.tsv data/rt/test.tsv; do
    [ -f "$f" ] || { echo "gpu-minilm: $f is missing: run scripts/fetch-pretrained.sh" >&2; exit 1; }
done
rm -rf .gpu-minilm
mkdir -p .gpu-minilm/model .gpu-minilm/rt
for f in "$m"/*; do
    [ "$(basename "$f")" = model.safetensors ] || cp "$f" .gpu-minilm/model/
done
cp data/rt/train.tsv data/rt/dev.tsv data/rt/test.tsv .gpu-minilm/rt/
echo "gpu-minilm: $(du -sh .gpu-minilm | cut -f1) in .gpu-minilm"
