#!/usr/bin/env python3
"""Writes the Hugging Face BART sequence-to-sequence fixtures that
tests/parity/test_hf_bart_gen.c checks utrain's bart (model.task: seq2seq)
and its generation against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_bart_gen_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
  hf_bart_gen_tiny/    a small random BartForConditionalGeneration (d_model
                       16, 2 + 2 layers, 2 heads, ffn 32, 32 positions,
                       hf_bart_tiny's vocabulary of 538; every
                       parameter moved off its initial value and a random
                       final_logits_bias, with end of sequence favoured so
                       generations end at different lengths) as
                       save_pretrained writes it, with hf_bart_tiny's
                       tokenizer files
  hf_bart_gen_batch.safetensors
                       input (B, 4, L) int32 planes as utrain's seq2seq_text
                       gives them (source ids, source mask, target ids,
                       target mask), labels (B, T) (-100 past each target),
                       logits (B, T, V), loss, grad.<name>, adamw_losses and
                       after.<name> as make_hf_fixtures.py writes them; and
                       for each generation case gen.<case> (B, max_new)
                       int32: the tokens transformers' generate gives after
                       the decoder start, padded with pad_token_id 1, with
                       the case's options in the metadata (JSON)
Everything is float32 in eval mode (dropout off), eager attention.
"""
import json
import os
import shutil

import numpy as np
import torch
from transformers import BartConfig, BartForConditionalGeneration

from fixture_common import seq2seq_generations, FIX, out_dir, perturb, save_pretrained, write_safetensors, batch_tensors, adamw_steps, after_tensors

PAD = 1
MAX_NEW = 12

# (name, generate options); every case sets what it relies on, so the
# model's generation_config adds nothing
BASE = dict(do_sample=False, num_beams=1, length_penalty=1.0, early_stopping=False, no_repeat_ngram_size=0,
            min_new_tokens=0, forced_bos_token_id=None, forced_eos_token_id=None, max_new_tokens=MAX_NEW)
CASES = [
    ("greedy", {}),
    ("beam4", dict(num_beams=4)),
    ("beam3_early_lp2_ngram2_min4", dict(num_beams=3, early_stopping=True, length_penalty=2.0,
                                         no_repeat_ngram_size=2, min_new_tokens=4)),
    ("beam4_never_lp05", dict(num_beams=4, early_stopping="never", length_penalty=0.5)),
    ("greedy_forced_ngram3_min3", dict(forced_bos_token_id=0, forced_eos_token_id=2, no_repeat_ngram_size=3,
                                       min_new_tokens=3)),
    ("beam2_forced", dict(num_beams=2, forced_bos_token_id=0, max_new_tokens=8)),
]


def model():
    torch.manual_seed(2468)
    cfg = BartConfig(vocab_size=538, d_model=16, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                     decoder_ffn_dim=32, max_position_embeddings=32, scale_embedding=True,
                     activation_function="gelu", attn_implementation="eager")
    m = perturb(BartForConditionalGeneration(cfg).float())
    with torch.no_grad():  # larger weights: generations that depend on the source
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
        b = 0.5 * torch.randn(1, 538)
        b[0, 2] += 4.0  # </s>: generations end, at different lengths
        m.final_logits_bias.copy_(b)
    return m


def batch():
    """3 pairs: sources of 9, 5 and 3 tokens, targets of 4, 7 and 2, right-padded to L = 9."""
    src = [[0, 264, 448, 356, 261, 300, 50, 60, 2], [0, 50, 60, 70, 2], [0, 70, 2]]
    tgt = [[0, 90, 91, 2], [0, 264, 300, 301, 302, 303, 2], [0, 2]]
    L = 9
    x = np.full((3, 4, L), PAD, dtype=np.int32)
    for b, (s, t) in enumerate(zip(src, tgt)):
        x[b, 0, :] = PAD
        x[b, 0, :len(s)] = s
        x[b, 1, :] = 0
        x[b, 1, :len(s)] = 1
        x[b, 2, :] = PAD
        x[b, 2, :len(t)] = t
        x[b, 3, :] = 0
        x[b, 3, :len(t)] = 1
    T = max(len(t) for t in tgt)
    y = np.full((3, T), -100, dtype=np.int32)
    for b, t in enumerate(tgt):
        y[b, :len(t)] = t
    return x, y


def kwargs(x, y):
    xt = torch.from_numpy(x).long()
    return dict(input_ids=xt[:, 0], attention_mask=xt[:, 1], labels=torch.from_numpy(y).long())


def generations(m, x):
    return seq2seq_generations(m, x, CASES, BASE, PAD, 2)


def main():
    out_root = out_dir()
    m = model()
    d = save_pretrained(m, os.path.join(out_root, "hf_bart_gen_tiny"))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(FIX, "hf_bart_tiny", f), d)
    x, y = batch()
    gens, gmeta = generations(m, x)
    out = m(**kwargs(x, y))
    out.loss.backward()
    t, names = batch_tensors(m, x, y, out)
    t["adamw_losses"], decay = adamw_steps(m, lambda: m(**kwargs(x, y)).loss)
    after_tensors(t, m)
    t.update(gens)
    meta = {"params": json.dumps(names), "decay": json.dumps(sorted(decay)), "torch": torch.__version__}
    meta.update(gmeta)
    write_safetensors(os.path.join(out_root, "hf_bart_gen_batch.safetensors"), t, meta)
    print("loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
