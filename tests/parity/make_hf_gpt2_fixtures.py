#!/usr/bin/env python3
"""Writes the Hugging Face GPT-2 parity fixtures that tests/parity/test_hf_gpt2.c
checks utrain's gpt2 model and its model-directory import against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_gpt2_fixtures.py
It rewrites, under tests/parity/fixtures/:
  hf_gpt2_tiny/        a small random GPT2LMHeadModel as save_pretrained
                       writes it (tensor names with "transformer.", Conv1D
                       weights (in, out), the tied lm_head left out); every
                       parameter, biases and LayerNorm included, is moved off
                       its initial value so that no tensor is symmetric or
                       constant and a transposed square c_proj shows
  hf_gpt2_tiny_base/   its body alone (GPT2Model.save_pretrained: names
                       without "transformer.")
  hf_gpt2_tiny_batch.safetensors
                       input (B, T) int32 token ids; targets (B, T) int32:
                       the next token, -1 at the last position (what
                       transformers' labels=input_ids shifts to); logits
                       (B, T, vocab); loss (1); grad.<name> for every
                       parameter under utrain's name and layout ((out, in):
                       Conv1D gradients transposed)
Everything is float32 in eval mode (dropout off), eager attention.
With --check-export DIR it instead loads DIR (written by `utrain export
--format hf` from a run of hf_gpt2_tiny or hf_bert_tiny, as its config.json
says) with transformers' from_pretrained and prints the largest difference of
its logits from the fixture's on the fixture's batch.
"""
import json
import os
import struct
import sys

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures")
CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")


def write_safetensors(path, tensors, meta):
    """Minimal safetensors writer: F32 / I32 tensors in the given order."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def batch():
    g = np.random.default_rng(7)
    x = g.integers(0, 100, size=(3, 9)).astype(np.int32)
    y = np.full_like(x, -1)
    y[:, :-1] = x[:, 1:]
    return x, y


def model():
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=100, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new",
                     attn_implementation="eager")
    m = GPT2LMHeadModel(cfg).float()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def check_export(d):
    with open(os.path.join(d, "config.json")) as f:
        bert = json.load(f)["model_type"] == "bert"
    if bert:
        from transformers import BertForSequenceClassification as cls
        sys.path.insert(0, HERE)
        from make_hf_fixtures import batch as bert_batch
        xt = torch.from_numpy(bert_batch()[0]).long()
        kw = dict(input_ids=xt[:, 0], token_type_ids=xt[:, 1], attention_mask=xt[:, 2])
    else:
        cls, xt = GPT2LMHeadModel, torch.from_numpy(batch()[0]).long()
        kw = dict(input_ids=xt)
    ref = cls.from_pretrained(os.path.join(OUT, "hf_bert_tiny" if bert else "hf_gpt2_tiny")).eval()
    got = cls.from_pretrained(d).eval()
    with torch.no_grad():
        a, b = ref(**kw).logits, got(**kw).logits
    print("max |logits difference|", (a - b).abs().max().item(), "of max |logit|", a.abs().max().item())


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        return check_export(sys.argv[2])
    m = model()
    m.save_pretrained(os.path.join(OUT, "hf_gpt2_tiny"), safe_serialization=True)
    m.transformer.save_pretrained(os.path.join(OUT, "hf_gpt2_tiny_base"), safe_serialization=True)
    x, y = batch()
    xt = torch.from_numpy(x).long()
    out = m(input_ids=xt, labels=xt)
    out.loss.backward()
    t = {"input": x, "targets": y, "logits": out.logits.detach().numpy(),
         "loss": out.loss.detach().numpy().reshape(1)}
    names = []
    for name, p in m.named_parameters():
        name = name[len("transformer."):] if name.startswith("transformer.") else name
        g = p.grad.numpy()
        if name.endswith(CONV1D):
            g = g.T
        names.append(name)
        t["grad." + name] = g
    meta = {"params": json.dumps(names), "torch": torch.__version__}
    write_safetensors(os.path.join(OUT, "hf_gpt2_tiny_batch.safetensors"), t, meta)
    print("loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
