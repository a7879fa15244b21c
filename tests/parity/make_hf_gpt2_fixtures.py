#!/usr/bin/env python3
"""Writes the Hugging Face GPT-2 parity fixtures that tests/parity/test_hf_gpt2.c
checks utrain's gpt2 model and its model-directory import against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_gpt2_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
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
import sys

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from fixture_common import batch_tensors, gpt2_layout, gpt2_name, out_dir, perturb, print_logits_diff, \
    save_pretrained, write_safetensors


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
    return perturb(GPT2LMHeadModel(cfg).float())


def check_export(d):
    with open(os.path.join(d, "config.json")) as f:
        bert = json.load(f)["model_type"] == "bert"
    if bert:
        from transformers import BertForSequenceClassification as cls
        from make_hf_fixtures import batch as bert_batch, kwargs
        kw = kwargs(torch.from_numpy(bert_batch()[0]).long())
    else:
        cls, kw = GPT2LMHeadModel, dict(input_ids=torch.from_numpy(batch()[0]).long())
    print_logits_diff(cls, "hf_bert_tiny" if bert else "hf_gpt2_tiny", d, lambda m: m(**kw).logits)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        return check_export(sys.argv[2])
    out_root = out_dir()
    m = model()
    save_pretrained(m, os.path.join(out_root, "hf_gpt2_tiny"))
    save_pretrained(m.transformer, os.path.join(out_root, "hf_gpt2_tiny_base"))
    x, y = batch()
    xt = torch.from_numpy(x).long()
    out = m(input_ids=xt, labels=xt)
    out.loss.backward()
    t, names = batch_tensors(m, x, y, out, y_key="targets", rename=gpt2_name, layout=gpt2_layout)
    meta = {"params": json.dumps(names), "torch": torch.__version__}
    write_safetensors(os.path.join(out_root, "hf_gpt2_tiny_batch.safetensors"), t, meta)
    print("loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
