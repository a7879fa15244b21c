"""PyTorch's optimizer steps over GPT-2 124M's parameters, the counterpart of
bench/optim_step.c: the same shapes (transformers' layout: Conv1D weights
are (in, out)), weight decay on the matrices, random values and gradients,
the median time of --steps steps after 2 warm-up steps, a JSON line each:

  adamw            torch.optim.AdamW as the Trainer's adamw_torch builds it
                   (torch's default implementation on the CPU)
  adamw_fused      torch.optim.AdamW(fused=True) (adamw_torch_fused)
  lion             lion-pytorch's Lion (FlagAI's; bitsandbytes' 32-bit Lion
                   is the same update)
  adafactor        transformers' Adafactor as the Trainer builds it
                   (scale_parameter=False, relative_step=False)
  adafactor_beta1  the same with beta1 0.9 and scale_parameter=True
  sgd_momentum     torch.optim.SGD(momentum=0.9)

  python3 bench/torch_optim_step.py [--steps N] [--threads N] [--device cpu|cuda]
--device cuda: the parameters on the GPU, each step timed to its end
(torch.cuda.synchronize); an optimizer whose package is missing is skipped
(said on stderr). Needs torch (and transformers, lion-pytorch for theirs).
"""
import argparse
import json
import sys
import time

import torch


def gpt2_params(device):
    d, v, n, L = 768, 50257, 1024, 12
    shapes = [(v, d), (n, d)]
    for _ in range(L):
        shapes += [(d,), (d,), (d, 3 * d), (3 * d,), (d, d), (d,), (d,), (d,), (d, 4 * d), (4 * d,), (4 * d, d), (d,)]
    shapes += [(d,), (d,)]
    gen = torch.Generator().manual_seed(0)
    ps = [torch.nn.Parameter((torch.randn(s, generator=gen) * 0.02).to(device)) for s in shapes]
    for p in ps:
        p.grad = (torch.randn(p.shape, generator=gen) * 0.01).to(device)
    return ps


def groups(ps, wd):
    return [{"params": [p for p in ps if p.ndim >= 2], "weight_decay": wd},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    try:
        from lion_pytorch import Lion
    except ImportError:
        Lion = None
    try:
        from transformers.optimization import Adafactor
    except ImportError:
        Adafactor = None
    ps = gpt2_params(a.device)
    numel = sum(p.numel() for p in ps)
    lr, wd = 1e-4, 0.01
    builds = {
        "adamw": lambda g: torch.optim.AdamW(g, lr=lr),
        "adamw_fused": lambda g: torch.optim.AdamW(g, lr=lr, fused=True),
        "lion": lambda g: Lion(g, lr=lr, betas=(0.9, 0.99)),
        "adafactor": lambda g: Adafactor(g, lr=lr, scale_parameter=False, relative_step=False),
        "adafactor_beta1": lambda g: Adafactor(g, lr=lr, beta1=0.9, scale_parameter=True, relative_step=False),
        "sgd_momentum": lambda g: torch.optim.SGD(g, lr=lr, momentum=0.9),
    }
    for name, build in builds.items():
        if (name == "lion" and Lion is None) or (name.startswith("adafactor") and Adafactor is None):
            print(f"torch_optim_step: {name} skipped (its package is not installed)", file=sys.stderr)
            continue
        opt = build(groups(ps, wd))
        for _ in range(2):
            opt.step()
        sync()
        ts = []
        for _ in range(a.steps):
            t0 = time.perf_counter()
            opt.step()
            sync()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        med = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
        state = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values()
                    if torch.is_tensor(t) and t.ndim > 0)
        print(json.dumps({"optimizer": name, "device": a.device, "params": numel, "threads": a.threads, "step_ms": round(1e3 * med, 3),
                          "state_mib": round(state / 2**20, 1)}), flush=True)
        del opt


if __name__ == "__main__":
    main()
