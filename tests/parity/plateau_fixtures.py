"""torch's ReduceLROnPlateau, step by step, for tests/parity/test_optim.c.

Run by hand in an environment with torch:
    python3 tests/parity/plateau_fixtures.py
It rewrites tests/parity/fixtures/optim_plateau.txt, three lines per case
(the reader's `name count v1 v2 ...` layout):
  caseK_params 9  max abs factor patience threshold cooldown min_lr eps lr
  caseK_metrics N the metric of each evaluation
  caseK_lr N      the rate after each scheduler.step(metric), %.17g
"""
import math
import os

import torch

# (mode, threshold_mode, factor, patience, threshold, cooldown, min_lr, eps, lr, metrics)
CASES = [
    # torch's defaults but patience 2: a falling loss that stalls, twice
    ("min", "rel", 0.1, 2, 1e-4, 0, 0.0, 1e-8, 1e-3,
     [2.0, 1.5, 1.2, 1.19995, 1.21, 1.2, 1.1, 1.1, 1.1, 1.1, 1.05, 1.0499, 1.0499, 1.06, 1.2]),
    # an accuracy (mode max), absolute threshold, cooldown 2
    ("max", "abs", 0.5, 1, 0.01, 2, 0.0, 1e-8, 0.1,
     [0.5, 0.6, 0.605, 0.61, 0.609, 0.62, 0.8, 0.8, 0.79, 0.81, 0.805, 0.5, 0.5, 0.5, 0.5, 0.5]),
    # patience 0: every bad evaluation lowers the rate, down to the floor min_lr
    ("min", "rel", 0.3, 0, 0.0, 0, 0.02, 1e-8, 1.0,
     [5.0, 5.0, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0]),
    # eps: a fall smaller than 0.05 is not made (to the floor 0.97 from 1), one of 0.5 is
    ("min", "abs", 0.5, 0, 0.0, 1, 0.97, 0.05, 1.0, [1.0, 1.0, 1.0, 1.0]),
    ("min", "abs", 0.5, 0, 0.0, 1, 0.0, 0.05, 1.0, [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    # NaN metrics never improve; negative metrics with a relative threshold
    ("min", "rel", 0.5, 1, 0.1, 0, 0.0, 1e-8, 0.4,
     [-1.0, float("nan"), -1.05, -1.2, float("nan"), float("nan"), -2.0, -1.9, -1.9]),
    ("max", "rel", 0.25, 1, 0.1, 1, 1e-4, 1e-8, 0.02,
     [-3.0, -2.9, -2.5, -2.5, float("nan"), -2.5, 2.0, 2.1, 2.1, 2.0, 1.0, 3.0, 3.2, 3.2, 3.2]),
]


def run(mode, tmode, factor, patience, threshold, cooldown, min_lr, eps, lr, metrics):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    s = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode=mode, factor=factor, patience=patience,
                                                   threshold=threshold, threshold_mode=tmode,
                                                   cooldown=cooldown, min_lr=min_lr, eps=eps)
    out = []
    for m in metrics:
        s.step(m)
        out.append(opt.param_groups[0]["lr"])
    return out


def fmt(v):
    return "nan" if math.isnan(v) else "%.17g" % v


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    lines = []
    for k, c in enumerate(CASES):
        mode, tmode, factor, patience, threshold, cooldown, min_lr, eps, lr, metrics = c
        params = [mode == "max", tmode == "abs", factor, patience, threshold, cooldown, min_lr, eps, lr]
        lines.append("case%d_params %d %s" % (k, len(params), " ".join(fmt(float(v)) for v in params)))
        lines.append("case%d_metrics %d %s" % (k, len(metrics), " ".join(fmt(v) for v in metrics)))
        lines.append("case%d_lr %d %s" % (k, len(metrics), " ".join(fmt(v) for v in run(*c))))
    with open(os.path.join(here, "fixtures", "optim_plateau.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
