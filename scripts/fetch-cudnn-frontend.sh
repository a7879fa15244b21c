#!/usr/bin/env bash
# Fetches the headers of NVIDIA's cuDNN frontend (the C++ graph API over
# cuDNN's backend, header only) from its PyPI wheel, nvidia-cudnn-frontend
# (files only: nothing is imported), into .deps/cudnn-frontend/include/.
# src/backend/cuda/cudnn_attn.cpp builds cuDNN's fused attention with it;
# without them the build leaves that out and attention runs utrain's own
# kernels (docs/gpu.md). Needed only where the CUDA backend is built (nvcc).
# Quiet when the headers are there. Needs pip (python3-pip) and unzip.
# Usage: scripts/fetch-cudnn-frontend.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=1.23.0
dest=$root/.deps/cudnn-frontend
cache=${UTRAIN_CACHE:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/utrain/wheels}

[ -s "$dest/include/cudnn_frontend.h" ] && [ "$(cat "$dest/VERSION" 2>/dev/null)" = "$version" ] && exit 0

fail() {
    echo "fetch-cudnn-frontend: $*" >&2
    echo "fetch-cudnn-frontend: the build goes on without cuDNN's fused attention; run" \
         "scripts/fetch-cudnn-frontend.sh again once PyPI is reachable (or put the wheel in $cache)" >&2
    exit 1
}
command -v unzip >/dev/null || fail "unzip not found (apt-get install unzip)"
whl=$(ls "$cache"/nvidia_cudnn_frontend-"$version"-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$whl" ]; then
    python3 -m pip --version >/dev/null 2>&1 || fail "pip not found (apt-get install python3-pip)"
    mkdir -p "$cache"
    # the headers are the same in every platform's wheel; any one will do
    python3 -m pip download --no-deps --quiet --disable-pip-version-check -d "$cache" \
        "nvidia-cudnn-frontend==$version" >&2 || fail "pip download nvidia-cudnn-frontend==$version failed"
    whl=$(ls "$cache"/nvidia_cudnn_frontend-"$version"-*.whl 2>/dev/null | head -n 1 || true)
    [ -n "$whl" ] || fail "pip download left no nvidia-cudnn-frontend wheel in $cache"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
unzip -q -o "$whl" 'include/*' -d "$tmp" || fail "$whl: cannot unpack include/"
[ -s "$tmp/include/cudnn_frontend.h" ] || fail "$whl holds no include/cudnn_frontend.h"
rm -rf "$dest"
mkdir -p "$dest"
mv "$tmp/include" "$dest/include"
echo "$version" > "$dest/VERSION"
echo "fetch-cudnn-frontend: cuDNN frontend $version headers in $dest" >&2
