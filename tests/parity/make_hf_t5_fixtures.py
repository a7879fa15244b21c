#!/usr/bin/env python3
"""Writes the Hugging Face T5 fixtures that tests/parity/test_hf_t5.c checks
utrain's t5 model and its generation against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_t5_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR), for each
of two small random T5ForConditionalGeneration models,
  hf_t5_tiny        the original T5 layout: ReLU feed-forward, head tied to
                    the shared embedding (states scaled by d_model^-0.5)
  hf_t5_tiny_gated  T5 v1.1 / flan-t5: gated-GELU feed-forward, its own
                    lm_head
(vocabulary 96, d_model 16, d_kv 8, 2 heads, d_ff 32, 8 relative-position
buckets up to distance 20 so that the logarithmic buckets are used; every
parameter moved off its initial value) as save_pretrained writes them, and
  <name>_batch.safetensors
                    input (B, 4, L) int32 planes as utrain's seq2seq_text
                    gives them (source ids, source mask, target ids, target
                    mask) with sources of 30 tokens (beyond the exact
                    buckets), labels (B, T) (-100 past each target), logits,
                    loss, grad.<name>, adamw_losses and after.<name> as
                    make_hf_fixtures.py writes them; gen.<case> (B, max_new)
                    int32: the tokens generate gives after the decoder start
                    token, padded as generate pads them (beam search with
                    the end-of-sequence id, as pad is 0), options in the
                    metadata; buckets.bi (40, 40) and buckets.uni (40, 40):
                    transformers' relative-position buckets
Everything is float32 in eval mode (dropout off).
"""
import json
import os

import numpy as np
import torch
from transformers import T5Config, T5ForConditionalGeneration

from fixture_common import seq2seq_generations, out_dir, perturb, save_pretrained, write_safetensors, batch_tensors, adamw_steps, after_tensors

PAD, EOS, V = 0, 1, 96
BASE = dict(do_sample=False, num_beams=1, length_penalty=1.0, early_stopping=False, no_repeat_ngram_size=0,
            min_new_tokens=0, forced_bos_token_id=None, forced_eos_token_id=None, max_new_tokens=12)
CASES = [
    ("greedy", {}),
    ("beam4", dict(num_beams=4)),
    ("beam3_early_lp2_ngram2_min4", dict(num_beams=3, early_stopping=True, length_penalty=2.0,
                                         no_repeat_ngram_size=2, min_new_tokens=4)),
    ("greedy_ngram3_min3", dict(no_repeat_ngram_size=3, min_new_tokens=3, forced_eos_token_id=EOS)),
]


def model(gated, seed):
    torch.manual_seed(seed)
    cfg = T5Config(vocab_size=V, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2,
                   num_heads=2, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                   feed_forward_proj="gated-gelu" if gated else "relu", tie_word_embeddings=not gated,
                   pad_token_id=PAD, eos_token_id=EOS, decoder_start_token_id=PAD, dropout_rate=0.1)
    m = perturb(T5ForConditionalGeneration(cfg).float())
    with torch.no_grad():  # larger weights: generations that depend on the source, some ending early
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
        head = m.lm_head.weight if gated else m.shared.weight
        head[EOS] += 0.6 * head[EOS].sign()
    return m.eval()


def batch():
    """3 pairs: sources of 30, 12 and 4 tokens, targets of 5, 8 and 2, right-padded to L = 30."""
    g = np.random.default_rng(7)
    lens = [(30, 5), (12, 8), (4, 2)]
    L = 30
    x = np.zeros((3, 4, L), dtype=np.int32)
    T = max(t for _, t in lens)
    y = np.full((3, T), -100, dtype=np.int32)
    for b, (s, t) in enumerate(lens):
        src = list(g.integers(2, V, s - 1)) + [EOS]
        tgt = list(g.integers(2, V, t - 1)) + [EOS]
        x[b, 0, :s], x[b, 1, :s] = src, 1
        x[b, 2, :t], x[b, 3, :t] = tgt, 1
        y[b, :t] = tgt
    return x, y


def kwargs(x, y):
    xt = torch.from_numpy(x).long()
    return dict(input_ids=xt[:, 0], attention_mask=xt[:, 1], labels=torch.from_numpy(y).long())


def buckets(m):
    from transformers.models.t5.modeling_t5 import T5Attention
    ctx = torch.arange(40)[:, None]
    mem = torch.arange(40)[None, :]
    out = {}
    for name, bi in (("bi", True), ("uni", False)):
        out["buckets." + name] = T5Attention._relative_position_bucket(
            mem - ctx, bidirectional=bi, num_buckets=8, max_distance=20).numpy().astype(np.int32)
    return out


def generations(m, x):
    return seq2seq_generations(m, x, CASES, BASE, PAD, EOS)


def main():
    root = out_dir()
    for name, gated, seed in (("hf_t5_tiny", False, 1357), ("hf_t5_tiny_gated", True, 2468)):
        m = model(gated, seed)
        save_pretrained(m, os.path.join(root, name))
        x, y = batch()
        gens, gmeta = generations(m, x)
        out = m(**kwargs(x, y))
        out.loss.backward()
        t, names = batch_tensors(m, x, y, out)
        t["adamw_losses"], decay = adamw_steps(m, lambda: m(**kwargs(x, y)).loss)
        after_tensors(t, m)
        t.update(gens)
        t.update(buckets(m))
        meta = {"params": json.dumps(names), "decay": json.dumps(sorted(decay)), "torch": torch.__version__}
        meta.update(gmeta)
        write_safetensors(os.path.join(root, name + "_batch.safetensors"), t, meta)
        print(name, "loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
