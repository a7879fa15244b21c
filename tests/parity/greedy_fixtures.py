"""transformers' GreedyLR, step by step, for tests/parity/test_optim.c.

Run by hand with transformers' source (a checkout's src/transformers, or an
unpacked wheel's transformers folder):
    TRANSFORMERS_SRC=/path/to/transformers python3 tests/parity/greedy_fixtures.py
Its optimization.py's StreamingAverage and GreedyLR classes are read and run
as they are (with a stand-in optimizer; neither torch nor transformers'
imports are needed). It rewrites tests/parity/fixtures/optim_greedy.txt,
three lines per case (the reader's `name count v1 v2 ...` layout):
  caseK_params 13  max abs factor patience threshold cooldown min_lr eps lr
                   warmup max_lr window reset_start   (window 0: smooth=False)
  caseK_metrics N  the metric of each evaluation
  caseK_lr N       the rate after each scheduler.step(metric), %.17g
"""
import ast
import math
import os
import typing

# (mode, threshold_mode, factor, patience, threshold, cooldown, min_lr, eps, lr,
#  warmup, max_lr, window, reset_start, metrics)
CASES = [
    # GreedyLR's defaults but patience 2: a falling loss raises the rate
    # every third improvement, then stalls and lowers it
    ("min", "abs", 0.95, 2, 1e-6, 0, 1e-3, 1e-8, 0.01, 0, 1.0, 0, 500,
     [3.0, 2.9, 2.8, 2.7, 2.6, 2.5, 2.4, 2.3, 2.3, 2.3, 2.3, 2.31, 2.4, 2.29, 2.28, 2.27, 2.5]),
    # an accuracy (mode max, relative threshold), warmup 2 after a rise,
    # cooldown 1 after a fall, down to the floor and a reset after 2 falls there
    ("max", "rel", 0.5, 1, 0.01, 1, 0.02, 1e-8, 0.1, 2, 1.0, 0, 2,
     [0.5, 0.6, 0.7, 0.71, 0.72, 0.8] + [0.8] * 22 + [0.9, 0.95, 1.0, 1.05]),
    # smoothing over a window of 3, patience 0: every evaluation decides
    ("min", "abs", 0.8, 0, 0.0, 0, 1e-4, 1e-8, 0.05, 0, 1.0, 3, 500,
     [1.0, 0.5, 2.0, 0.1, 0.1, 3.0, 0.2, 0.2, 0.2, 0.25, 0.1, 0.05, 0.01, 0.0, 5.0]),
    # NaN never improves; the rise stops at max_lr; eps keeps a small rise
    ("min", "rel", 0.9, 0, 0.0, 0, 1e-4, 1e-3, 0.01, 0, 0.012, 0, 500,
     [1.0, 0.9, float("nan"), 0.8, 0.7, 0.6, 0.5, float("nan"), float("nan"), 0.4]),
    # transformers' defaults in a TrainingArguments run: min_lr 1e-3 above
    # the rate 5e-5, so falls do nothing and count towards a reset (3 here)
    ("min", "abs", 0.95, 1, 1e-6, 0, 1e-3, 1e-8, 5e-5, 0, 1.0, 2, 3,
     [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.5]),
]


class Optimizer:
    def __init__(self, lr):
        self.param_groups = [{"lr": lr}]


def load_greedy(src):
    path = os.path.join(src, "optimization.py")
    tree = ast.parse(open(path).read(), path)
    keep = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in ("StreamingAverage", "GreedyLR")]
    assert len(keep) == 2, "StreamingAverage and GreedyLR not found in " + path
    ns = {"Optimizer": Optimizer, "Any": typing.Any}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns["GreedyLR"]


def run(GreedyLR, mode, tmode, factor, patience, threshold, cooldown, min_lr, eps, lr, warmup, max_lr, window,
        reset_start, metrics):
    opt = Optimizer(lr)
    s = GreedyLR(opt, mode=mode, factor=factor, patience=patience, threshold=threshold, threshold_mode=tmode,
                 cooldown=cooldown, warmup=warmup, min_lr=min_lr, max_lr=max_lr, eps=eps, smooth=window > 0,
                 window_size=window if window > 0 else 50, reset_start=reset_start)
    out = []
    for m in metrics:
        s.step(m)
        out.append(opt.param_groups[0]["lr"])
    return out


def fmt(v):
    return "nan" if math.isnan(v) else "%.17g" % v


def main():
    GreedyLR = load_greedy(os.environ["TRANSFORMERS_SRC"])
    here = os.path.dirname(os.path.abspath(__file__))
    lines = []
    for k, c in enumerate(CASES):
        mode, tmode, factor, patience, threshold, cooldown, min_lr, eps, lr, warmup, max_lr, window, reset, metrics = c
        params = [mode == "max", tmode == "abs", factor, patience, threshold, cooldown, min_lr, eps, lr, warmup,
                  max_lr, window, reset]
        lines.append("case%d_params %d %s" % (k, len(params), " ".join(fmt(float(v)) for v in params)))
        lines.append("case%d_metrics %d %s" % (k, len(metrics), " ".join(fmt(v) for v in metrics)))
        lines.append("case%d_lr %d %s" % (k, len(metrics), " ".join(fmt(v) for v in run(GreedyLR, *c))))
    with open(os.path.join(here, "fixtures", "optim_greedy.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
