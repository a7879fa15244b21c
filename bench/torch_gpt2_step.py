#!/usr/bin/env python3
"""GPT-2 124M training-step benchmark in PyTorch (the reference for bench/gpt2_step.c).

Same model as utrain's "gpt2": learned positions, pre-LN blocks, fused qkv
Linear, causal attention via F.scaled_dot_product_attention(is_causal=True),
GELU (tanh), lm_head tied to the token embedding. Batch 4 x sequence 64 of
random tokens with next-token targets from a fixed seed, AdamW (lr 3e-4,
weight_decay 0.1, no decay for parameters with fewer than 2 dimensions).
Timing: 2 warm-up steps, then the median of N steps of forward, loss,
backward, optimizer.step, zero_grad(set_to_none=True). --amp runs forward
and loss under torch.autocast("cpu", dtype=torch.bfloat16) (utrain's
train.precision: bf16): fp32 weights and optimizer, bf16 matrix products.

    torch_gpt2_step.py [--steps N] [--threads N] [--amp] [--json]
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from torch_step import print_summary, timed_steps

B, T = 4, 64


class Block(nn.Module):
    def __init__(self, C, n_head, proj_std):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)
        for lin in (self.c_attn, self.c_fc):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)
        for lin in (self.attn_proj, self.mlp_proj):
            nn.init.normal_(lin.weight, std=proj_std)
            nn.init.zeros_(lin.bias)

    def attn(self, x):
        Bb, Tt, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // self.n_head
        q = q.view(Bb, Tt, self.n_head, hs).transpose(1, 2)
        k = k.view(Bb, Tt, self.n_head, hs).transpose(1, 2)
        v = v.view(Bb, Tt, self.n_head, hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.attn_proj(y.transpose(1, 2).contiguous().view(Bb, Tt, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer=12, n_head=12, C=768, V=50257, block_size=1024):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(block_size, C)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)
        proj_std = 0.02 / math.sqrt(2 * n_layer)
        self.h = nn.ModuleList([Block(C, n_head, proj_std) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied lm_head


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--amp", action="store_true", help="bf16 autocast for forward and loss")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1:
        ap.error("--steps must be >= 1")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    model = GPT2()
    nparams = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=3e-4)
    g = torch.Generator().manual_seed(42)
    stream = torch.randint(0, 50257, (B, T + 1), generator=g)
    x, y = stream[:, :T].contiguous(), stream[:, 1:].contiguous()

    def loss_fn():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.amp):
            logits = model(x)
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), y.view(-1))

    t = timed_steps("torch_gpt2_step", loss_fn, opt, a.steps)
    if t is None:
        return 1
    res = {"impl": "torch", "torch": torch.__version__, "precision": "bf16" if a.amp else "fp32",
           "threads": torch.get_num_threads(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""), "batch": B, "seq": T,
           "steps": a.steps, "params": nparams, "median_s": t["median_s"], "min_s": t["min_s"],
           "tokens_per_s": B * T / t["median_s"], **t}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {torch.__version__} gpt2 124M step: {nparams} parameters, batch {B} x seq {T}, "
              f"AdamW, threads {res['threads']}, OMP_WAIT_POLICY={res['omp_wait_policy'] or 'unset'}, "
              f"{'bf16 autocast' if a.amp else 'fp32'}")
        print_summary(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
