#!/usr/bin/env bash
# Installs what utrain needs to build, test and run its examples, with apt-get.
# Idempotent and quiet when everything is already there.
set -euo pipefail

# clang, its runtime libraries (libFuzzer, sanitizers) and its OpenMP: the
# fuzz targets and their replay in `make test` (tests/fuzz/)
pkgs=(build-essential pkg-config libopenblas-openmp-dev libyaml-dev zlib1g-dev
      openmpi-bin libopenmpi-dev iproute2 dataset-fashion-mnist bible-kjv-text bible-kjv
      clang libclang-rt-dev libomp-dev bc)

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
