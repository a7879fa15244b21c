#!/usr/bin/env python3
"""Sequence-to-sequence benchmark in transformers + PyTorch (the reference for bench/seq2seq_step.c).

T5ForConditionalGeneration (T5 v1.0 small: d_model 512, 6 + 6 layers, 8
heads of 64, d_ff 2048, ReLU, vocab 32128) or BartForConditionalGeneration
(BART-base sizes) with random weights, dropout 0.1 on while training.
Training: batch B of random sources of S tokens and targets of T tokens
(labels, no padding), AdamW (lr 1e-4, weight decay 0.01), forward + loss +
backward + step + zero_grad, median of N steps after 2 warm-up ones.
Generation: generate() on the same sources, K new tokens each
(min_new_tokens = max_new_tokens = K), greedy or beam search, the KV cache
on; median of N after one warm-up; tokens/s = B * K / time.

    torch_seq2seq.py --model t5|bart [--steps N] [--threads N] [--batch B] [--src S] [--tgt T]
                     [--new K] [--beams N] [--json]
"""
import argparse
import json
import statistics
import time

import torch
from transformers import BartConfig, BartForConditionalGeneration, T5Config, T5ForConditionalGeneration


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["t5", "bart"], default="t5")
    for k, d in (("steps", 5), ("threads", 0), ("batch", 8), ("src", 128), ("tgt", 32), ("new", 32), ("beams", 1)):
        ap.add_argument("--" + k, type=int, default=d)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    if a.model == "t5":
        m = T5ForConditionalGeneration(T5Config(feed_forward_proj="relu", decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                                                  attn_implementation="eager"))
    else:
        m = BartForConditionalGeneration(BartConfig(attn_implementation="sdpa"))
    V = m.config.vocab_size
    g = torch.Generator().manual_seed(42)
    src = torch.randint(3, V, (a.batch, a.src), generator=g)
    tgt = torch.randint(3, V, (a.batch, a.tgt), generator=g)
    mask = torch.ones_like(src)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.01)
    m.train()
    times, first, last = [], None, None
    for s in range(2 + a.steps):
        t0 = time.perf_counter()
        loss = m(input_ids=src, attention_mask=mask, labels=tgt).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = loss.item()
        first = last if first is None else first
        if s >= 2:
            times.append(time.perf_counter() - t0)
    m.eval()
    gen = []
    with torch.no_grad():
        for s in range(1 + a.steps):
            t0 = time.perf_counter()
            m.generate(input_ids=src, attention_mask=mask, max_new_tokens=a.new, min_new_tokens=a.new,
                       num_beams=a.beams, do_sample=False, early_stopping=False, no_repeat_ngram_size=0,
                       forced_bos_token_id=None, forced_eos_token_id=None)
            if s >= 1:
                gen.append(time.perf_counter() - t0)
    sm, gm = statistics.median(times), statistics.median(gen)
    r = {"impl": "torch", "model": a.model, "threads": torch.get_num_threads(), "batch": a.batch, "src": a.src,
         "tgt": a.tgt, "new": a.new, "beams": a.beams, "params": sum(p.numel() for p in m.parameters()),
         "step_s": sm, "gen_s": gm, "gen_tokens_per_s": a.batch * a.new / gm, "loss_first": first,
         "loss_last": last, "torch": torch.__version__}
    if a.json:
        print(json.dumps(r))
    else:
        print(f"torch {a.model}: step {sm * 1e3:.1f} ms, generation {gm * 1e3:.1f} ms "
              f"({r['gen_tokens_per_s']:.1f} tokens/s, {a.beams} beams); loss {first:.4f} -> {last:.4f}")


if __name__ == "__main__":
    main()
