#!/usr/bin/env python3
"""BERT-base-sized training-step benchmark in transformers + PyTorch (the reference for bench/bert_step.c).

BertForSequenceClassification(BertConfig()) with random weights (12 layers,
hidden 768, 12 heads, intermediate 3072, vocab 30522, exact GELU, dropout 0.1
on: model.train()), num_labels 2; batch 32 x 128 random tokens (token types 0,
attention mask all ones) with random 0/1 labels from a fixed seed; AdamW
(lr 5e-5, weight decay 0.01 except biases and LayerNorm weights, as the
Hugging Face Trainer groups them). --bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (fp32 weights, optimizer and
backward as autocast leaves them). Timing: 2 warm-up steps, then the median
of N steps of forward, loss, backward, optimizer.step, zero_grad(set_to_none=True).
--device cuda runs it on the GPU (each phase timed to the device's end of
it; autocast on "cuda"; TF32 off unless --tf32, which turns it on for the
matrix products as torch.backends.cuda.matmul.allow_tf32 does), and reports
torch.cuda.max_memory_allocated.

--mlm: BertForMaskedLM(BertConfig()) instead (the decoder tied to the word
embedding), labels a random token at 15% of the positions and -100 elsewhere
(the model's own loss: the head's logits for every position, as run_mlm
trains).

    torch_bert_step.py [--steps N] [--threads N] [--batch B] [--seq T] [--bf16] [--tf32] [--mlm] [--device cpu|cuda] [--json]
"""
import argparse
import contextlib
import json
import sys

import torch
import torch.nn.functional as F
from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification

from torch_step import print_summary, timed_steps


def decay_groups(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--mlm", action="store_true")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if a.steps < 1 or a.batch < 1 or not 1 <= a.seq <= 512:
        ap.error("--steps and --batch must be >= 1, --seq in [1, 512]")
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    if a.mlm:
        model = BertForMaskedLM(BertConfig(attn_implementation="sdpa")).to(dev)
    else:
        model = BertForSequenceClassification(BertConfig(num_labels=2, attn_implementation="sdpa")).to(dev)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(decay_groups(model), lr=5e-5)
    g = torch.Generator().manual_seed(42)
    ids = torch.randint(0, 30522, (a.batch, a.seq), generator=g).to(dev)
    types = torch.zeros_like(ids)
    mask = torch.ones_like(ids)
    y = torch.randint(0, 2, (a.batch,), generator=g).to(dev)
    if a.mlm:
        chosen = torch.rand((a.batch, a.seq), generator=g) < 0.15
        y = torch.where(chosen, torch.randint(0, 30522, (a.batch, a.seq), generator=g), -100).to(dev)

    def autocast():
        if a.bf16:
            return torch.autocast(a.device, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def loss_fn():
        with autocast():
            if a.mlm:
                return model(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=y).loss.float()
            logits = model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits
            return F.cross_entropy(logits.float(), y)

    t = timed_steps("torch_bert_step", loss_fn, opt, a.steps, sync=torch.cuda.synchronize if cuda else None)
    if t is None:
        return 1
    prec = "bf16" if a.bf16 else "tf32" if a.tf32 and cuda else "fp32"
    if cuda:
        t["max_memory_allocated"] = torch.cuda.max_memory_allocated()
    res = {"impl": "torch", "torch": torch.__version__, "device": a.device, "precision": prec,
           "threads": torch.get_num_threads(), "batch": a.batch, "seq": a.seq, "steps": a.steps,
           "params": nparams, "median_s": t["median_s"], "min_s": t["min_s"],
           "tokens_per_s": a.batch * a.seq / t["median_s"], **t}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {torch.__version__} bert-base {'masked-LM' if a.mlm else 'classification'} step "
              f"({res['precision']}): {nparams} parameters, "
              f"batch {a.batch} x seq {a.seq}, AdamW, threads {res['threads']}")
        print_summary(res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
