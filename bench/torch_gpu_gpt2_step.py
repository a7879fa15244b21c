#!/usr/bin/env python3
"""GPT-2 124M training step in PyTorch on a GPU: the reference for
bench/gpu_gpt2_step.c (same graph as bench/torch_gpt2_step.py's GPT2, same
shapes). fp32 by default with TF32 off (exact float32 products, as utrain's
default); --tf32 allows TF32 products; --amp runs forward and loss under
torch.autocast("cuda", dtype=torch.bfloat16); --compile wraps the model in
torch.compile. AdamW (lr 3e-4, weight decay 0.1 on every parameter, fused
when torch offers it). Timing: 2 warm-up steps (more with --compile), then
the median over N steps, each ending with torch.cuda.synchronize().

    torch_gpu_gpt2_step.py [--batch B] [--seq T] [--layers L] [--steps N] [--tf32] [--amp] [--compile] [--json]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from torch_gpt2_step import GPT2  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--amp", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    model = GPT2(n_layer=a.layers).to(dev)
    nparams = sum(p.numel() for p in model.parameters())
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    fwd = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(42)
    stream = torch.randint(0, 50257, (a.batch, a.seq + 1), generator=g)
    x, y = stream[:, :a.seq].contiguous().to(dev), stream[:, 1:].contiguous().to(dev)
    warm = 5 if a.compile else 2
    times, first, last = [], None, None
    torch.cuda.reset_peak_memory_stats()
    for s in range(warm + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.amp):
            logits = fwd(x)
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), y.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        last = loss.item()
        torch.cuda.synchronize()
        if first is None:
            first = last
        if s >= warm:
            times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    tok = a.batch * a.seq
    flops = 6 * (nparams - 1024 * 768) * tok + 12 * a.layers * a.seq * 768 * tok
    prec = "bf16" if a.amp else ("tf32" if a.tf32 else "fp32")
    res = {"impl": "torch" + ("-compile" if a.compile else ""), "torch": torch.__version__,
           "device": torch.cuda.get_device_name(), "precision": prec, "batch": a.batch, "seq": a.seq,
           "layers": a.layers, "params": nparams, "steps": a.steps, "median_s": med,
           "tokens_per_s": tok / med, "tflops": flops / med * 1e-12,
           "peak_bytes": torch.cuda.max_memory_allocated(), "loss_first": first, "loss_last": last}
    if a.json:
        print(json.dumps(res))
    else:
        print(f"{res['impl']} {torch.__version__} gpt2 step on {res['device']} ({prec}): batch {a.batch} x seq "
              f"{a.seq}, {a.layers} layers\n  step median {1e3 * med:.1f} ms, {tok / med:.0f} tokens/s, "
              f"{res['tflops']:.1f} TFLOP/s, peak memory {res['peak_bytes'] / 2**30:.2f} GiB, "
              f"loss {first:.4f} -> {last:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
