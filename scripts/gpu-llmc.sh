#!/usr/bin/env bash
# Prepares llm.c (github.com/karpathy/llm.c), the GPT-2 trainer in CUDA that
# the GPU benchmarks compare with, for scripts/gpu-check.sh's `llmc` step on
# a lent GPU machine (which reaches no network): copies the sources it needs
# to build train_gpt2cu into .llmc/ (git-ignored; carry it with the call).
# llm.c is built there beside utrain as a benchmark anchor, never part of it.
#
#   scripts/gpu-llmc.sh [LLMC_REPO]
#
# LLMC_REPO: a git directory of llm.c; default /work/.mirror/karpathy+llm.c/repo,
# where the session's search tool puts it (fetch github:karpathy/llm.c).
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:-/work/.mirror/karpathy+llm.c/repo}
[ -d "$src" ] || { echo "gpu-llmc: no llm.c repository at $src (fetch github:karpathy/llm.c first)" >&2; exit 1; }
rm -rf .llmc
mkdir -p .llmc
git --git-dir="$src" rev-parse HEAD >/dev/null 2>&1 || src="$src/.git"
git --git-dir="$src" archive HEAD train_gpt2.cu llmc | tar -x -C .llmc
git --git-dir="$src" rev-parse HEAD >.llmc/COMMIT
echo "gpu-llmc: llm.c $(cut -c1-12 .llmc/COMMIT), $(du -sh .llmc | cut -f1), in .llmc"
