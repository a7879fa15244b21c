#!/usr/bin/env bash
# Regenerates the committed seed corpora of the fuzz targets: the binary
# ones with tests/fuzz/make_seeds.c (built against the fuzz build of the
# library), the configuration ones from configs/*.yml plus a few small YAML
# files that reach the loader's corners. Inputs that fuzzing adds to a
# corpus later are kept; only the seeds (named below) are rewritten.
# usage: tests/fuzz/make_seeds.sh  (from anywhere; uses build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/../.."
for t in checkpoint config idx safetensors tokens tsv vocab; do mkdir -p "tests/fuzz/$t/corpus"; done
make --no-print-directory BUILD=build-fuzz CC=clang OPT=-O1 \
  SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
  build-fuzz/tests/fuzz/make_seeds
build-fuzz/tests/fuzz/make_seeds

c=tests/fuzz/config/corpus
for f in configs/*.yml; do cp "$f" "$c/$(basename "$f" .yml)"; done
printf 'epochs: 2\nlr: 3e-4\nbatch_size: 8\ngradient_accumulation_steps: 4\nfp16: true\n' > "$c/aliases"
printf 'model: {name: mlp, sizes: [784, 128, 10]}\noptim: {name: sgd, momentum: 0.9, nesterov: true}\n' > "$c/flow"
printf 'optim:\n  betas: [0.9, 0.95]\n  schedule: cosine\n  warmup_steps: 10\ndist:\n  strategy: zero3\n  wrap: param\n' > "$c/lists"
printf 'train:\n  batch_size: 8\n  batch_size: 9\n' > "$c/duplicate"
printf 'train:\n  batch_sise: 8\n' > "$c/unknown_key"
printf 'base: &b {epochs: 3}\ntrain: *b\nexperiment_name: "quoted \\"name\\""\noutput_dir: ~\n' > "$c/anchors"
printf '%%YAML 1.1\n---\nseed: 7\nmode: test\n...\n' > "$c/document"
printf 'data:\n  name: tokens\n  train_path: "data/*.bin"\n  seq_len: 1024\ntrain: {max_steps: 5, save_strategy: steps, save_interval: 1}\n' > "$c/tokens"
echo "seeds written: $(find tests/fuzz/*/corpus -type f | wc -l) files"
