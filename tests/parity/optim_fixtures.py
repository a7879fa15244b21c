"""PyTorch reference values for tests/parity/test_optim.c.

Run by hand (needs torch):  python3 tests/parity/optim_fixtures.py
It rewrites tests/parity/fixtures/optim_*.txt. Each line of a fixture is one
array: `name count v1 v2 ...`, floats written with %.9g (round-trips float32 exactly).

The parameter set is three tensors in registration order: a 4x3 weight (with
weight decay), a bias of 3 (none, through its own param group) and a 5x2 weight
(with decay), i.e. 25 floats laid out flat as the C side does.
"""
import math
import os
import sys

import torch

SHAPES = [(4, 3), (3,), (5, 2)]
DECAY = [1, 0, 1]
STEPS = 10
SCHED = dict(lr=1e-2, min_lr=1e-3, warmup=3, total=10)


def warmup_cosine(step, lr, min_lr, warmup, total):
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, (step - warmup) / (total - warmup))
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * p))


def warmup_linear(step, lr, min_lr, warmup, total):
    if step < warmup:
        return lr * (step + 1) / warmup
    p = min(1.0, (step - warmup) / (total - warmup))
    return min_lr + (lr - min_lr) * (1.0 - p)


def warmup_constant(step, lr, warmup):
    return lr * (step + 1) / warmup if step < warmup else lr


class Writer:
    def __init__(self, path):
        self.lines = []
        self.path = path

    def put(self, name, values):
        if isinstance(values, torch.Tensor):
            values = values.detach().reshape(-1).tolist()
        elif not isinstance(values, (list, tuple)):
            values = [values]
        vals = " ".join("%.9g" % float(v) for v in values)
        self.lines.append("%s %d %s" % (name, len(values), vals))

    def close(self):
        with open(self.path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


def flat(params):
    return torch.cat([p.detach().reshape(-1) for p in params])


def make_params(gen):
    return [torch.randn(s, generator=gen).requires_grad_(True) for s in SHAPES]


def run_optimizer(path, name, build, hparams):
    """Steps an optimizer built by build(groups) for STEPS steps under the
    warmup+cosine LambdaLR, recording lr, gradients and parameters."""
    gen = torch.Generator().manual_seed(1234)
    params = make_params(gen)
    w = Writer(path)
    w.put("optimizer", [{"sgd": 0, "adamw": 1, "lion": 2}[name]])
    for k, v in hparams.items():
        w.put(k, [float(v)])
    w.put("sched", [SCHED["lr"], SCHED["min_lr"], SCHED["warmup"], SCHED["total"]])
    w.put("numel", [p.numel() for p in params])
    w.put("decay", DECAY)
    w.put("init", flat(params))
    wd = hparams.get("weight_decay", 0.0)
    groups = [
        {"params": [p for p, d in zip(params, DECAY) if d], "weight_decay": wd},
        {"params": [p for p, d in zip(params, DECAY) if not d], "weight_decay": 0.0},
    ]
    opt = build(groups)
    base = SCHED["lr"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: warmup_cosine(s, SCHED["lr"], SCHED["min_lr"], SCHED["warmup"],
                                SCHED["total"]) / base)
    lrs = []
    for step in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        w.put("grad%d" % step, flat(grads))
        opt.step()
        sched.step()
        w.put("param%d" % step, flat(params))
    w.put("lr", lrs)
    w.close()


# Adafactor's parameters: a matrix with decay, a vector, a 3-d tensor (two
# leading entries of 3 x 4 matrices) with decay, a 1 x 5 matrix, and a 3 x 5
# matrix that the C side stores transposed (5 x 3, as utrain stores GPT-2's
# Conv1D weights) and factors so: the update is the same.
AF_SHAPES = [(4, 3), (3,), (2, 3, 4), (1, 5), (3, 5)]
AF_DECAY = [1, 0, 1, 0, 1]


def make_adafactor(path, scale_parameter, beta1, wd, relative_step=False):
    """transformers' Adafactor (relative_step False, as the Trainer and
    FlagAI build it) for STEPS steps under the warmup+cosine LambdaLR; or
    with relative_step (its own rate, lr None, no scheduler; warmup_init's
    rates, 1e-6 t, would move the weights too little to check). The last parameter is written transposed (the C side's
    layout)."""
    from transformers.optimization import Adafactor
    gen = torch.Generator().manual_seed(4321)
    params = [torch.randn(s, generator=gen).requires_grad_(True) for s in AF_SHAPES]

    def c_flat(ts):
        return torch.cat([(t.t() if i == len(AF_SHAPES) - 1 else t).detach().reshape(-1)
                          for i, t in enumerate(ts)])
    w = Writer(path)
    w.put("scale_parameter", [1 if scale_parameter else 0])
    w.put("beta1", [beta1 if beta1 is not None else 0.0])
    w.put("weight_decay", [wd])
    w.put("relative_step", [1 if relative_step else 0])
    w.put("sched", [SCHED["lr"], SCHED["min_lr"], SCHED["warmup"], SCHED["total"]])
    w.put("init", c_flat(params))
    groups = [
        {"params": [p for p, d in zip(params, AF_DECAY) if d], "weight_decay": wd},
        {"params": [p for p, d in zip(params, AF_DECAY) if not d], "weight_decay": 0.0},
    ]
    opt = Adafactor(groups, lr=None if relative_step else SCHED["lr"], relative_step=relative_step,
                    warmup_init=False, scale_parameter=scale_parameter, beta1=beta1)
    base = SCHED["lr"]
    sched = None if relative_step else torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: warmup_cosine(s, SCHED["lr"], SCHED["min_lr"], SCHED["warmup"],
                                SCHED["total"]) / base)
    for step in range(STEPS):
        grads = [torch.randn(p.shape, generator=gen) * (0.1 if step % 3 else 1.0) for p in params]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        w.put("grad%d" % step, c_flat(grads))
        opt.step()
        if sched:
            sched.step()
        w.put("param%d" % step, c_flat(params))
    w.close()


def make_clip(path):
    gen = torch.Generator().manual_seed(99)
    w = Writer(path)
    for case, scale in (("big", 1.0), ("small", 0.01)):
        grads = [torch.randn(s, generator=gen) * scale for s in SHAPES]
        params = [torch.zeros(s, requires_grad=True) for s in SHAPES]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
        w.put(case + "_grad", flat(grads))
        w.put(case + "_norm", [norm.item()])
        w.put(case + "_clipped", flat([p.grad for p in params]))
    w.put("max_norm", [1.0])
    w.close()


def make_schedules(path, nsteps=30):
    lr, min_lr, warmup, total, step_size, gamma = 1e-2, 1e-3, 5, 25, 7, 0.5
    w = Writer(path)
    w.put("params", [lr, min_lr, warmup, total, step_size, gamma])
    lambdas = {
        "constant": lambda s: warmup_constant(s, lr, warmup) / lr,
        "cosine": lambda s: warmup_cosine(s, lr, min_lr, warmup, total) / lr,
        "linear": lambda s: warmup_linear(s, lr, min_lr, warmup, total) / lr,
    }
    for name in ("constant", "cosine", "linear", "step"):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=lr)
        if name == "step":
            sched = torch.optim.lr_scheduler.StepLR(opt, step_size=step_size, gamma=gamma)
        else:
            sched = torch.optim.lr_scheduler.LambdaLR(opt, lambdas[name])
        vals = []
        for _ in range(nsteps):
            vals.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        w.put(name, vals)
    w.close()


def rates(opt, sched, steps):
    """The rate each of `steps` optimizer steps runs at, the scheduler stepped
    after each as the trainers step it."""
    vals = []
    for _ in range(steps):
        vals.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return vals


# transformers' schedules with their lr_scheduler_kwargs: (name, warmup,
# kwargs). test_optim.c's hf_cases holds the same list as utrain schedules.
HF_LR, HF_TOTAL, HF_STEPS = 1e-2, 40, 44
HF_CASES = [
    ("cosine", 4, {"num_cycles": 1.5}),
    ("cosine_with_restarts", 4, {"num_cycles": 3}),
    ("cosine_with_min_lr", 4, {"min_lr_rate": 0.1}),
    ("cosine_with_min_lr", 0, {"min_lr": 1e-3, "num_cycles": 0.75}),
    ("polynomial", 4, {"power": 2.0, "lr_end": 1e-4}),
    ("inverse_sqrt", 4, {}),
    ("inverse_sqrt", 0, {"timescale": 7}),
    ("warmup_stable_decay", 4, {"num_decay_steps": 10, "min_lr_ratio": 0.05}),
    ("warmup_stable_decay", 4, {"num_decay_steps": 12, "decay_type": "linear"}),
    ("warmup_stable_decay", 2, {"num_decay_steps": 9, "decay_type": "1-sqrt", "min_lr_ratio": 0.1}),
]


def make_hf_schedules(path):
    """The rate of every step of each HF_CASES schedule, from transformers'
    get_scheduler as the Trainer calls it (needs transformers)."""
    from transformers import get_scheduler
    w = Writer(path)
    for i, (name, warmup, kwargs) in enumerate(HF_CASES):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=HF_LR)
        sched = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=HF_TOTAL,
                              scheduler_specific_kwargs=dict(kwargs))
        w.put("case%d" % i, rates(opt, sched, HF_STEPS))
    w.close()


# DeepSpeed's schedulers (its runtime/lr_schedules.py, read from a DeepSpeed
# source tree: DEEPSPEED_SRC=/path/to/DeepSpeed, e.g. the unpacked sdist that
# `pip download deepspeed --no-deps` fetches). (type, optimizer lr, params);
# test_optim.c's ds_cases holds the same list as utrain schedules.
DS_STEPS = 26
DS_CASES = [
    ("WarmupLR", 1e-2, dict(warmup_min_lr=1e-4, warmup_max_lr=1e-2, warmup_num_steps=6)),
    ("WarmupLR", 1e-2, dict(warmup_min_lr=0.0, warmup_max_lr=1e-2, warmup_num_steps=5, warmup_type="linear")),
    ("WarmupDecayLR", 1e-2, dict(total_num_steps=20, warmup_min_lr=1e-4, warmup_max_lr=1e-2, warmup_num_steps=5)),
    ("WarmupDecayLR", 1e-2, dict(total_num_steps=24, warmup_min_lr=0.0, warmup_max_lr=1e-2, warmup_num_steps=4,
                                 warmup_type="linear")),
    ("WarmupCosineLR", 1e-2, dict(total_num_steps=20, warmup_min_ratio=0.1, warmup_num_steps=5,
                                  cos_min_ratio=0.05)),
    ("WarmupCosineLR", 1e-2, dict(total_num_steps=20, warmup_num_steps=1, warmup_type="linear")),
]


def make_ds_schedules(path, ds_src):
    """The rate of every optimizer step under each DS_CASES scheduler, stepped
    after each optimizer step as DeepSpeed's engine steps it."""
    import types
    utils = types.ModuleType("deepspeed.utils")
    import logging
    utils.logger = logging.getLogger("deepspeed")
    sys.modules.setdefault("deepspeed", types.ModuleType("deepspeed"))
    sys.modules["deepspeed.utils"] = utils
    mod = types.ModuleType("lr_schedules")
    src = os.path.join(ds_src, "deepspeed", "runtime", "lr_schedules.py")
    exec(compile(open(src).read(), src, "exec"), mod.__dict__)
    w = Writer(path)
    for i, (name, lr, params) in enumerate(DS_CASES):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=lr)
        sched = getattr(mod, name)(opt, **params)
        w.put("case%d" % i, rates(opt, sched, DS_STEPS))
    w.close()


def make(out_dir):
    os.makedirs(out_dir, exist_ok=True)

    def j(name):
        return os.path.join(out_dir, name)

    wd = 1e-2
    run_optimizer(j("optim_adamw.txt"), "adamw",
                  lambda g: torch.optim.AdamW(g, lr=SCHED["lr"], betas=(0.9, 0.999), eps=1e-8,
                                              foreach=False),
                  {"weight_decay": wd, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8})
    run_optimizer(j("optim_sgd_nesterov.txt"), "sgd",
                  lambda g: torch.optim.SGD(g, lr=SCHED["lr"], momentum=0.9, nesterov=True,
                                            foreach=False),
                  {"weight_decay": wd, "momentum": 0.9, "dampening": 0.0, "nesterov": 1})
    run_optimizer(j("optim_sgd_momentum.txt"), "sgd",
                  lambda g: torch.optim.SGD(g, lr=SCHED["lr"], momentum=0.9, dampening=0.1,
                                            foreach=False),
                  {"weight_decay": wd, "momentum": 0.9, "dampening": 0.1, "nesterov": 0})
    run_optimizer(j("optim_sgd.txt"), "sgd",
                  lambda g: torch.optim.SGD(g, lr=SCHED["lr"], foreach=False),
                  {"weight_decay": 0.0, "momentum": 0.0, "dampening": 0.0, "nesterov": 0})
    # lion-pytorch (pip install lion-pytorch): the Lion FlagAI builds, with
    # the update bitsandbytes' 32-bit Lion (Hugging Face's lion_32bit) makes
    from lion_pytorch import Lion
    run_optimizer(j("optim_lion.txt"), "lion",
                  lambda g: Lion(g, lr=SCHED["lr"], betas=(0.9, 0.99)),
                  {"weight_decay": wd, "beta1": 0.9, "beta2": 0.99})
    # transformers' Adafactor as the Trainer builds it (optim: adafactor:
    # scale_parameter False), as FlagAI does (scale_parameter True, no
    # weight decay), and with a first moment
    make_adafactor(j("optim_adafactor_hf.txt"), False, None, wd)
    make_adafactor(j("optim_adafactor_flagai.txt"), True, None, 0.0)
    make_adafactor(j("optim_adafactor_beta1.txt"), True, 0.9, wd)
    # Adafactor's own relative step, no learning rate (transformers' default)
    make_adafactor(j("optim_adafactor_relative.txt"), True, None, 0.0, relative_step=True)
    make_clip(j("optim_clip.txt"))
    make_schedules(j("optim_schedules.txt"))
    make_hf_schedules(j("optim_hf_schedules.txt"))
    if os.environ.get("DEEPSPEED_SRC"):
        make_ds_schedules(j("optim_ds_schedules.txt"), os.environ["DEEPSPEED_SRC"])
    else:
        print("DEEPSPEED_SRC not set: optim_ds_schedules.txt left as it is")


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    make(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "fixtures"))
