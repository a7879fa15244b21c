"""FlagAI's learning-rate schedule for tests/parity/test_optim.c.

Run by hand: FLAGAI_SRC=/path/to/FlagAI python3 tests/parity/flagai_fixtures.py
(a FlagAI source tree; its flagai/schedulers.py is read and run as it is). It
rewrites tests/parity/fixtures/optim_flagai_schedules.txt, one line per case:
`caseK count v1 v2 ...`, the rate each optimizer step runs at, %.9g.

FlagAI's Trainer builds AnnealingLR(optimizer, start_lr=lr,
warmup_iter=int(warm_up * epochs * len(train_dataloader)), decay_style='cosine',
num_iters=epochs * len(train_dataloader)) (decay_style='linear' before FlagAI
1.7) and calls lr_scheduler.step() after
every micro-batch, while the optimizer steps at the last micro-batch of each
gradient-accumulation window. AnnealingLR needs nothing of torch but a base
class and torch.distributed.is_initialized(), so a stand-in module runs it
without torch.
"""
import os
import sys
import types

# (lr, warm_up, iterations = epochs * len(train_dataloader), accumulation,
# decay_style); test_optim.c's test_flagai_schedule_parity holds the same list
CASES = [
    (1e-2, 0.1, 40, 1, "cosine"),
    (1e-2, 0.25, 48, 3, "cosine"),
    (3e-3, 0.01, 30, 1, "cosine"),  # int(0.3) = 0 warmup iterations: decay from the start
    (1e-2, 0.5, 20, 2, "linear"),
    (1e-2, 0.1, 40, 1, "linear"),
    (2e-3, 1.0, 24, 2, "cosine"),  # warm_up 1.0: the whole run warms up
]


def load_annealing(src):
    torch = types.ModuleType("torch")
    torch.optim = types.ModuleType("torch.optim")
    torch.optim.lr_scheduler = types.ModuleType("torch.optim.lr_scheduler")
    torch.optim.lr_scheduler._LRScheduler = object
    torch.distributed = types.ModuleType("torch.distributed")
    torch.distributed.is_initialized = lambda: False
    sys.modules.update({"torch": torch, "torch.optim": torch.optim,
                        "torch.optim.lr_scheduler": torch.optim.lr_scheduler,
                        "torch.distributed": torch.distributed})
    mod = types.ModuleType("flagai_schedulers")
    path = os.path.join(src, "flagai", "schedulers.py")
    exec(compile(open(path).read(), path, "exec"), mod.__dict__)
    return mod.AnnealingLR


class Optimizer:
    def __init__(self, lr):
        self.param_groups = [{"lr": lr}]


def rates(AnnealingLR, lr, warm_up, iters, accum, style):
    opt = Optimizer(lr)
    sched = AnnealingLR(opt, start_lr=lr, warmup_iter=int(warm_up * iters), decay_style=style,
                        num_iters=iters)
    out = []
    for m in range(iters):
        if (m + 1) % accum == 0:  # the optimizer's step, at the window's last micro-batch
            out.append(opt.param_groups[0]["lr"])
        sched.step()
    return out


def main():
    src = os.environ.get("FLAGAI_SRC")
    if not src:
        sys.exit("set FLAGAI_SRC to a FlagAI source tree")
    AnnealingLR = load_annealing(src)
    here = os.path.dirname(os.path.abspath(__file__))
    lines = []
    for k, case in enumerate(CASES):
        vals = rates(AnnealingLR, *case)
        lines.append("case%d %d %s" % (k, len(vals), " ".join("%.9g" % v for v in vals)))
    with open(os.path.join(here, "fixtures", "optim_flagai_schedules.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
