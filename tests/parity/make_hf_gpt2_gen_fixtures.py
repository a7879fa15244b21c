#!/usr/bin/env python3
"""Writes tests/parity/fixtures/hf_gpt2_tiny_gen.safetensors: what
transformers' generate gives with the GPT-2 fixture model
(tests/parity/fixtures/hf_gpt2_tiny, GPT2LMHeadModel) from three prompts of
different lengths, which tests/parity/test_hf_gpt2.c checks ut_generate
against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_gpt2_gen_fixtures.py
The file holds input (B, 4, L) int32 as the seq2seq planes (prompt ids and
mask, right-padded; planes 2 and 3 unused) and gen.<case> (B, max_new): the
new tokens generate gives (prompts left-padded with id 0 and masked, as
transformers wants for a decoder-only model), with each case's options in
the metadata. The model's end-of-sequence id 50256 lies outside its
vocabulary of 100, so every generation runs to max_new_tokens.
"""
import json
import os

import numpy as np
import torch
from transformers import GPT2LMHeadModel

from fixture_common import FIX, out_dir, write_safetensors

BASE = dict(do_sample=False, num_beams=1, length_penalty=1.0, early_stopping=False, no_repeat_ngram_size=0,
            min_new_tokens=0, max_new_tokens=12, pad_token_id=0)
CASES = [
    ("greedy", {}),
    ("beam4", dict(num_beams=4)),
    ("beam3_early_lp2_ngram2_min4", dict(num_beams=3, early_stopping=True, length_penalty=2.0,
                                         no_repeat_ngram_size=2, min_new_tokens=4)),
    ("greedy_ngram3_min3", dict(no_repeat_ngram_size=3, min_new_tokens=3)),
]


def main():
    m = GPT2LMHeadModel.from_pretrained(os.path.join(FIX, "hf_gpt2_tiny")).eval()
    prompts = [[5, 17, 33, 2, 41, 9, 60], [70, 3, 3], [12]]
    L = max(len(p) for p in prompts)
    x = np.zeros((3, 4, L), dtype=np.int32)
    left = np.zeros((3, L), dtype=np.int64)
    lmask = np.zeros((3, L), dtype=np.int64)
    for b, p in enumerate(prompts):
        x[b, 0, :len(p)], x[b, 1, :len(p)] = p, 1
        left[b, L - len(p):], lmask[b, L - len(p):] = p, 1
    t, meta = {"input": x}, {"torch": torch.__version__}
    for name, opts in CASES:
        o = dict(BASE, **opts)
        with torch.no_grad():
            seq = m.generate(input_ids=torch.from_numpy(left), attention_mask=torch.from_numpy(lmask), **o)
        g = seq[:, L:].numpy().astype(np.int32)
        t["gen." + name] = g
        meta["gen." + name] = json.dumps(o)
        print(name, g.tolist())
    write_safetensors(os.path.join(out_dir(), "hf_gpt2_tiny_gen.safetensors"), t, meta)


if __name__ == "__main__":
    main()
