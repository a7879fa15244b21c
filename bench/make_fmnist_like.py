#!/usr/bin/env python3
"""Writes a stand-in for Fashion-MNIST: the four IDX .gz files of
/usr/share/datasets/fashion-mnist (60,000 training and 10,000 test images of
28 x 28 bytes, labels 0-9) with synthetic content, for timing the CNN where
the real set is not installed (the lent GPU machine: its 31 MB does not fit
the device call beside the build's packages).

Each class has a fixed random template; an image is its class's template
plus noise, so the network learns it, and one label in ten is then drawn
anew, so that no model gets past about 91% (the accuracies are of this set,
not Fashion-MNIST's; utrain's and PyTorch's should agree). The
epoch's work depends only on the shapes, which are the real set's.

    python3 bench/make_fmnist_like.py DIR [--seed S]
"""
import argparse
import gzip
import os

import numpy as np


def write_idx(path, arr):
    dims = arr.shape
    head = bytes([0, 0, 0x08, len(dims)]) + b"".join(int(d).to_bytes(4, "big") for d in dims)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(head)
        f.write(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    templates = rng.uniform(0, 200, size=(10, 28, 28)).astype(np.float32)
    for prefix, n in (("train", 60000), ("t10k", 10000)):
        labels = rng.integers(0, 10, size=n).astype(np.uint8)
        noise = rng.normal(0, 40, size=(n, 28, 28)).astype(np.float32)
        images = np.clip(templates[labels] + noise, 0, 255).astype(np.uint8)
        relabel = rng.random(n) < 0.1
        labels[relabel] = rng.integers(0, 10, size=int(relabel.sum())).astype(np.uint8)
        write_idx(os.path.join(a.dir, f"{prefix}-images-idx3-ubyte.gz"), images)
        write_idx(os.path.join(a.dir, f"{prefix}-labels-idx1-ubyte.gz"), labels)


if __name__ == "__main__":
    main()
