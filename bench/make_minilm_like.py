#!/usr/bin/env python3
"""A MiniLM-shaped model with random weights, for timing where the pretrained file cannot go.

    make_minilm_like.py SRC OUT

SRC is a model directory of the all-MiniLM-L6-v2 kind (config.json and the
tokenizer's files; its model.safetensors is not needed). OUT, which must not
exist yet, gets the same files and a model.safetensors of the same tensors,
names and shapes, initialised at random (transformers' BertModel init, seed 0)
instead of pretrained. A fine-tuning run on it does the same work, step for
step, as on the pretrained model, so its times are the pretrained run's; its
accuracies are not (scripts/gpu-check.sh's minilm step: the 87 MB pretrained
file does not fit in a device call).
"""
import os
import shutil
import sys

import torch
from transformers import BertConfig, BertModel


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, out = sys.argv[1], sys.argv[2]
    if not os.path.isfile(os.path.join(src, "config.json")):
        print(f"make_minilm_like: {src}/config.json is missing", file=sys.stderr)
        return 1
    if os.path.exists(out):
        print(f"make_minilm_like: {out} exists; name a new directory (nothing there is overwritten)",
              file=sys.stderr)
        return 1
    os.makedirs(out)
    for f in os.listdir(src):
        if f != "model.safetensors" and os.path.isfile(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), out)
    torch.manual_seed(0)
    model = BertModel(BertConfig.from_pretrained(src))
    model.save_pretrained(out, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"make_minilm_like: {out}: {n} random parameters in MiniLM's shapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
