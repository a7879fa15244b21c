#!/usr/bin/env bash
# Fetches, on a machine with Debian's package archive, the .deb files that
# scripts/gpu-check.sh unpacks on a GPU machine that has no package registry:
# the headers and shared libraries utrain builds and links against (OpenBLAS,
# oneDNN, libyaml, cJSON, utf8proc, OpenMPI and what they load at run time).
# The CUDA toolkit (nvcc, cudart, cuBLASLt) is the GPU machine's own.
# Output: .gpu-debs/ in the repository root (git-ignored), about 40 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu-debs
pkgs=(libopenblas-openmp-dev libopenblas0-openmp libopenblas-dev libdnnl-dev libdnnl2
      libyaml-dev libyaml-0-2 libcjson-dev libcjson1 libutf8proc-dev libutf8proc2
      libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libevent-core-2.1-7
      libevent-pthreads-2.1-7 libfabric1 libhwloc15 libibverbs1 ibverbs-providers librdmacm1
      libmunge2 libnl-3-200 libnl-route-3-200 libnuma1 libpmix2 libpsm-infinipath1 libpsm2-2
      libucx0 libgfortran5 libquadmath0 ocl-icd-libopencl1 libltdl7 libxnvctrl0 libxsmm-dev)
mkdir -p "$out"
rm -f "$out"/*.deb
# apt-get download writes into the current folder; as root it warns that the
# _apt user cannot write there, which is harmless
(cd "$out" && apt-get download "${pkgs[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
n=$(ls "$out"/*.deb | wc -l)
[ "$n" -eq "${#pkgs[@]}" ] || { echo "gpu-debs: fetched $n of ${#pkgs[@]} packages into $out" >&2; exit 1; }
echo "gpu-debs: $n packages, $(du -sh "$out" | cut -f1), in $out"
