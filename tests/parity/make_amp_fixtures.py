#!/usr/bin/env python3
"""Writes tests/parity/fixtures/amp.safetensors: what PyTorch's CPU autocast
gives for the tiny GPT-2 and the CNN of make_fixtures.py, which
tests/parity/test_amp_parity.c checks utrain's bf16 and fp16 runs against.

Run by hand (never by CI) where PyTorch is installed, after make_fixtures.py
(the batches are read from its gpt2 and cnn fixtures: from DIR with
--out DIR when they are there, else the checked-in ones), from anywhere:
    python3 tests/parity/make_amp_fixtures.py [--out DIR]
and commit the file (written into DIR with --out). Only json, numpy, torch
and fixture_common.py are used.
The checked-in file was made with torch 2.15.0, which reproduces it byte for
byte from the checked-in gpt2 and cnn fixtures.

Same models, same initial parameters (the shared generator) and the same
batch as tests/parity/fixtures/{gpt2,cnn}.safetensors; the float32 results
are in those files. For each model and each dtype D in bfloat16, float16:

  <model>.<D>.logits        the model output under torch.autocast("cpu",
                            dtype=D) (the GPT-2's logits, the CNN's
                            log-probabilities), converted to float32 (exact)
  <model>.<D>.loss          (1,) the loss, computed inside autocast as a
                            training loop does (cross_entropy and nll_loss
                            run in float32 there)
  gpt2.<D>.fused_attention.logits, .loss
                            the GPT-2 under autocast with each attention
                            (scores, mask, softmax, the product with v) as one
                            float32 computation on the 16-bit q, k, v whose
                            output is rounded to D: what utrain's fused
                            attention op does (docs/engine.md); PyTorch's
                            op-by-op attention rounds the scores and the
                            probabilities to D as well
  cnn.<D>.fp32_log_softmax.logits, .loss
                            the CNN under autocast with its log_softmax on the
                            float32 upcast of fc2's 16-bit output, as utrain
                            (and CUDA autocast) computes it; PyTorch's CPU
                            autocast leaves log_softmax on the 16-bit input
                            and returns 16 bits
  <model>.<D>.adamw_losses  (10,) losses of 10 AdamW steps on that batch, each
                            recorded before its step: float32 parameters (the
                            master weights), forward and loss under autocast,
                            backward and torch.optim.AdamW outside it, as
                            PyTorch's mixed-precision recipe does; no loss
                            scaling (fp16 included: GradScaler's scale is a
                            power of two, and utrain's scaler has its own tests)

Model in eval mode (dropout off), one thread, deterministic algorithms.
"""
import json
import math
import os

import torch
import torch.nn.functional as F

import make_fixtures as mf
from fixture_common import FIX, out_dir, read_safetensors, write_safetensors

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class FusedAttention(mf.Attention):
    """The same parameters; the attention core in float32, output rounded."""

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        dt = q.dtype
        q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2).float() for t in (q, k, v))
        with torch.autocast("cpu", enabled=False):
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            att = torch.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
            y = (att @ v).to(dt)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


def fused_gpt2(cfg):
    model = mf.GPT2(**cfg)
    for block in model.h:
        block.attn.__class__ = FusedAttention
    return model


class CNNFloatLogSoftmax(mf.CNN):
    """The same network; log_softmax on fc2's output upcast to float32."""

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = torch.flatten(F.max_pool2d(x, 2), 1)
        x = self.fc2(F.relu(self.fc1(x)))
        return F.log_softmax(x.float(), dim=1)


def forward_only(make_model, seed, x, targets, dtype):
    model = fresh(make_model, seed)
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        out = model(x)
        loss = model.loss(out, targets)
    return {"logits": out.float(), "loss": loss.float().reshape(1)}


def fresh(make_model, seed):
    model = make_model()
    model.eval()
    mf.init_model(model, seed)
    return model


def run_autocast(make_model, seed, x, targets, dtype):
    res = forward_only(make_model, seed, x, targets, dtype)

    model = fresh(make_model, seed)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": mf.ADAMW["weight_decay"]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=mf.ADAMW["lr"], betas=mf.ADAMW["betas"], eps=mf.ADAMW["eps"],
                            foreach=False, fused=False)
    losses = []
    for _ in range(mf.ADAMW_STEPS):
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=dtype):
            loss = model.loss(model(x), targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    res["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    return res


def batch_file(out_root, name):
    """DIR/<name>.safetensors when make_fixtures.py --out DIR wrote it there,
    else the checked-in one."""
    path = os.path.join(out_root, name + ".safetensors")
    return path if os.path.exists(path) else os.path.join(FIX, name + ".safetensors")


def main():
    out_root = out_dir()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    gpt2_cfg = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=97, block_size=16)
    models = {"gpt2": lambda: mf.GPT2(**gpt2_cfg), "cnn": mf.CNN}
    tensors, meta = {}, {"torch": torch.__version__, "steps": str(mf.ADAMW_STEPS),
                         "optimizer": json.dumps({k: list(v) if isinstance(v, tuple) else v
                                                  for k, v in mf.ADAMW.items()})}
    for name, make_model in models.items():
        ref, ref_meta = read_safetensors(batch_file(out_root, name))
        ref = {k: torch.from_numpy(v) for k, v in ref.items()}
        seed = int(ref_meta["seed"])
        x, targets = ref["input"], ref["targets"]
        for dn, dt in DTYPES.items():
            r = run_autocast(make_model, seed, x, targets, dt)
            for k, v in r.items():
                tensors[f"{name}.{dn}.{k}"] = v
            e32 = mf.rel_err(r["logits"], ref["logits"])
            print(f"{name} {dn}: loss {r['loss'].item():.6f} (fp32 {ref['loss'].item():.6f}), "
                  f"logits vs fp32 {e32:.3g}, adamw {r['adamw_losses'][0]:.5f} -> "
                  f"{r['adamw_losses'][-1]:.5f} (fp32 {ref['adamw_losses'][-1].item():.5f})")
            variant, make_variant = (("fused_attention", lambda: fused_gpt2(gpt2_cfg)) if name == "gpt2"
                                     else ("fp32_log_softmax", CNNFloatLogSoftmax))
            r = forward_only(make_variant, seed, x, targets, dt)
            for k, v in r.items():
                tensors[f"{name}.{dn}.{variant}.{k}"] = v
    path = os.path.join(out_root, "amp.safetensors")
    write_safetensors(path, tensors, meta, meta_first=True)
    print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
