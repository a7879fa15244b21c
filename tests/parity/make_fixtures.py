#!/usr/bin/env python3
"""Writes the PyTorch parity fixtures that tests/parity/test_models.c checks
utrain's built-in models against.

Run by hand (never by CI) where PyTorch is installed, from anywhere:
    python3 tests/parity/make_fixtures.py
It rewrites tests/parity/fixtures/{cnn,gpt2,mlp,bow}.safetensors and, through
optim_fixtures.py, the optimizer/schedule text fixtures (into DIR instead
with --out DIR); commit them.
Only json, numpy, torch and fixture_common.py (its own safetensors writer,
not the safetensors package) are used.

The checked-in files were made with torch 2.15.0 (CPU, one thread,
deterministic algorithms); with that version a run reproduces them byte for
byte (run with --out DIR and cmp DIR's files against tests/parity/fixtures/).
The batches come from the generator below, not torch's, so they do not
depend on the torch version; the results are torch's float32 arithmetic and
another version may change their last bits.

Each reference model below uses utrain's parameter names and registration
order. Initial parameters are not stored (the CNN's fc1 alone is 1.18M floats):
both sides compute them with the generator in init_param(), which
tests/parity/fixture_init.h reproduces bit for bit in C:

  for parameter number p (0-based registration index), element i (row-major):
    x = splitmix64(seed + p * 1000003 + i)          (uint64, wrapping)
    u = (x >> 40) / 2^24                             (exact in float32)
    v = 2u - 1                                       (float32, exact)
    linear/conv weight and bias: float32(1/sqrt(fan_in)) * v
        (fan_in = in features x kernel area, of the layer's weight; the
         scale is computed in double and rounded once to float32)
    embedding (wte, wpe):        float32(0.02) * v
    LayerNorm weight:            1 + float32(0.1) * v
    LayerNorm bias:              float32(0.1) * v
  every product and sum rounded to float32 (no fused multiply-add).

Batches use the same generator on streams p = 1000 + 8 * draw + k (k-th array
of batch draw number `draw`, see BatchStreams): integers lo + ((x >> 40) *
(hi - lo) >> 24), and for real inputs the float32 sum of 3 values v (roughly
normal, variance 1). Each fixture draws from its own seed, so a redrawn batch
of one model leaves the others' batches alone.

Each fixture holds:
  input, targets                 the batch
  logits                         the model output before the loss
                                 (for the CNN: the log_softmax output)
  loss                           scalar, shape (1,)
  grad.<param>                   d loss / d param, for every parameter
  adamw_losses                   (10,) losses of 10 AdamW steps on the same
                                 batch, each recorded before its step
  init.<param>                   (mlp only) the generated initial values, so
                                 the C generator can be checked bit for bit
and metadata: seed, config (JSON), params (names in registration order),
generator, optimizer, batch (which draw was kept),
float32_vs_float64_over_tolerance, near_tie_gap_over_margin, torch version.

Everything is computed in float32, in eval mode (dropout off). A batch is
redrawn when it would make the fixture test rounding, not the implementation:
  near-tie  a forward decision lies too close to flipping: a ReLU input too
            near 0, or in a ReLU + max-pool window (the CNN's conv2) the
            largest input too near the second largest or 0. "Too near" is
            closer than KINK_MARGIN = 10 times that layer's largest
            |float32 - float64| difference on the batch: another float32
            implementation (utrain's im2col + sgemm sums in another order)
            rounds differently by about that much, and a flipped max-pool
            choice sends a window's gradient to another input, moving the
            conv weights' gradients by ~1e-3 relative (10x the tolerance).
            It is checked first (a forward pass in float32 and float64).
            The CNN rejects most draws: a batch holds on average ~3 conv2
            windows (of 74k) and ~1 conv1 ReLU input under the margin, so
            about 1 draw in 40 passes (draw 38 with torch 2.15.0); the
            other models pass at draw 0.
  float64   float32 and float64 results differ by more than a tenth of
            test_models.c's tolerances.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from fixture_common import out_dir, write_safetensors

ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
ADAMW_STEPS = 10

# ---------------------------------------------------------------- generator

M64 = (1 << 64) - 1


def splitmix64_scalar(z):
    """Reference version on Python ints, used to check the numpy one."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def splitmix64(z):
    """Vectorised over a numpy uint64 array (numpy array arithmetic wraps)."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def uniform_pm1(seed, p, n):
    """float32 values 2u - 1 in [-1, 1) for elements 0..n-1 of parameter p."""
    base = np.uint64((seed + p * 1000003) & M64)
    x = splitmix64(base + np.arange(n, dtype=np.uint64))
    u = (x >> np.uint64(40)).astype(np.float32) / np.float32(1 << 24)
    return np.float32(2) * u - np.float32(1)


def uniform_int(seed, p, n, lo, hi):
    """int32 values lo + floor(u * (hi - lo)) in [lo, hi) from the same
    stream as uniform_pm1 (u = x >> 40 over 2^24, in exact integers)."""
    base = np.uint64((seed + p * 1000003) & M64)
    u = splitmix64(base + np.arange(n, dtype=np.uint64)) >> np.uint64(40)
    return (lo + ((u * np.uint64(hi - lo)) >> np.uint64(24)).astype(np.int64)).astype(np.int32)


class BatchStreams:
    """The generator's streams for batch draw number `draw` of a fixture:
    p = 1000 + 8 * draw + k for its k-th array, far from the parameters'
    p < 100 (so from element offsets p * 1000003 < 1e8)."""

    def __init__(self, seed, draw):
        self.seed, self.p, self.end = seed, 1000 + 8 * draw, 1008 + 8 * draw

    def _next(self):
        assert self.p < self.end, "a batch draw uses at most 8 streams"
        self.p += 1
        return self.p - 1

    def normal_like(self, *shape):
        """float32 in [-3, 3): the sum of 3 uniform_pm1 values, roughly
        normal with variance 1 (float32 additions, no library's sampler)."""
        n = int(np.prod(shape))
        u = [uniform_pm1(self.seed, self._next(), n) for _ in range(3)]
        return torch.from_numpy(((u[0] + u[1]) + u[2]).reshape(shape))

    def ints(self, lo, hi, *shape):
        return torch.from_numpy(uniform_int(self.seed, self._next(), int(np.prod(shape)), lo, hi).reshape(shape))


def init_param(seed, p, kind, shape, fan_in):
    n = int(np.prod(shape)) if len(shape) else 1
    v = uniform_pm1(seed, p, n)
    if kind == "linear":
        w = np.float32(1.0 / math.sqrt(fan_in)) * v
    elif kind == "embedding":
        w = np.float32(0.02) * v
    elif kind == "ln_weight":
        w = np.float32(1) + np.float32(0.1) * v
    elif kind == "ln_bias":
        w = np.float32(0.1) * v
    else:
        raise ValueError(kind)
    assert w.dtype == np.float32
    return w.reshape(shape)


def param_kind(model, name):
    """(kind, fan_in) for a parameter, from the module that owns it."""
    mod_name, _, leaf = name.rpartition(".")
    mod = model.get_submodule(mod_name)
    if isinstance(mod, nn.LayerNorm):
        return ("ln_weight" if leaf == "weight" else "ln_bias"), 0
    if isinstance(mod, nn.Embedding):
        return "embedding", 0
    if isinstance(mod, (nn.Linear, nn.Conv2d)):
        return "linear", int(np.prod(mod.weight.shape[1:]))
    raise TypeError(f"{name}: no init rule for {type(mod).__name__}")


def init_model(model, seed):
    with torch.no_grad():
        for p_idx, (name, p) in enumerate(model.named_parameters()):
            kind, fan_in = param_kind(model, name)
            p.copy_(torch.from_numpy(init_param(seed, p_idx, kind, tuple(p.shape), fan_in)))


# ---------------------------------------------------------------- kinks

# A batch is redrawn when a branch decision of the models' forward pass (which
# side of 0 a ReLU input is, which input of a max-pool window is largest) lies
# within KINK_MARGIN times the largest float32 rounding error of that layer on
# that batch (see kink_margin()): two float32 implementations summing in
# different orders could then decide differently and route gradients elsewhere.
KINK_MARGIN = 10
FLT_EPS = float(np.finfo(np.float32).eps)
_kinks = None   # a list while kink_margin() records a forward pass


def relu(x):
    """F.relu; its input is recorded under kink_margin()."""
    if _kinks is not None:
        _kinks.append(("relu", x.detach()))
    return F.relu(x)


def relu_max_pool2d(x, k):
    """F.max_pool2d(F.relu(x), k); x is recorded under kink_margin()."""
    if _kinks is not None:
        _kinks.append(("relu_max_pool", x.detach(), k))
    return F.max_pool2d(F.relu(x), k)


def kink_gaps(kind, x, k=None):
    """How far each decision is from flipping: a ReLU input's distance to 0;
    for a ReLU followed by a k x k max-pool, per window the gap between the
    largest and the second largest of its k*k inputs and 0 (the gradient goes
    to the window's largest input when that is above 0, nowhere otherwise)."""
    x = x.double()
    if kind == "relu":
        return x.abs().flatten()
    B, C, H, W = x.shape
    w = x[:, :, :H // k * k, :W // k * k].reshape(B, C, H // k, k, W // k, k)
    w = w.permute(0, 1, 2, 4, 3, 5).reshape(-1, k * k)
    w = torch.cat([w, torch.zeros(w.shape[0], 1, dtype=w.dtype)], 1)
    top2 = w.topk(2, dim=1).values
    return top2[:, 0] - top2[:, 1]


def record_kinks(make_model, seed, inputs, dtype):
    global _kinks
    model = make_model().to(dtype)
    model.eval()
    init_model(model, seed)
    _kinks = []
    try:
        with torch.no_grad():
            model(inputs.to(dtype) if inputs.is_floating_point() else inputs)
        return _kinks
    finally:
        _kinks = None


def kink_margin(make_model, seed, inputs):
    """The smallest gap (kink_gaps, in float64) over its margin: KINK_MARGIN
    times the layer's largest |float32 - float64| difference (at least
    FLT_EPS times its largest |value|). Below 1 the batch has a near-tie;
    inf for a model without ReLU or max-pool."""
    worst = math.inf
    sites32 = record_kinks(make_model, seed, inputs, torch.float32)
    sites64 = record_kinks(make_model, seed, inputs, torch.float64)
    for s32, s64 in zip(sites32, sites64):
        x32, x64 = s32[1].double(), s64[1]
        err = max((x32 - x64).abs().max().item(), FLT_EPS * x64.abs().max().item())
        worst = min(worst, kink_gaps(s64[0], x64, *s64[2:]).min().item() / (KINK_MARGIN * err))
    return worst


# ---------------------------------------------------------------- models

class CNN(nn.Module):
    """The PyTorch MNIST example network."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = relu(self.conv1(x))
        x = relu_max_pool2d(self.conv2(x), 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = relu(self.fc1(x))
        x = self.dropout2(x)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)

    def loss(self, out, targets):
        return F.nll_loss(out, targets.long())


class Attention(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLPBlock(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.attn = Attention(C, n_head)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.mlp = MLPBlock(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, vocab_size, block_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd, eps=1e-5)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx.long()) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()   # tied output projection

    def loss(self, logits, targets):
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


class MLP(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.n = len(sizes) - 1
        for i in range(self.n):
            setattr(self, f"fc{i}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x):
        for i in range(self.n):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n - 1:
                x = relu(x)
        return x

    def loss(self, out, targets):
        return F.cross_entropy(out, targets.long())


class BOW(nn.Module):
    """utrain's bag-of-embeddings text classifier: mean of the non-padding
    (id != 0) token embeddings, a ReLU hidden layer, a linear classifier."""

    def __init__(self, vocab_size, n_embd, hidden, num_classes):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, n_embd)
        self.fc = nn.Linear(n_embd, hidden)
        self.out = nn.Linear(hidden, num_classes)

    def forward(self, ids):
        mask = (ids != 0).to(self.emb.weight.dtype)
        w = mask / mask.sum(1, keepdim=True)
        x = (w.unsqueeze(1) @ self.emb(ids.long())).squeeze(1)
        return self.out(relu(self.fc(x)))

    def loss(self, out, targets):
        return F.cross_entropy(out, targets.long())


def padded_ids(g, batch, length, vocab):
    """Token ids in [1, vocab) with a random length >= 1 per row, zero-padded
    (g: a BatchStreams)."""
    ids = g.ints(1, vocab, batch, length)
    lens = g.ints(1, length + 1, batch)
    for r in range(batch):
        ids[r, lens[r]:] = 0
    return ids


# ---------------------------------------------------------------- writer

# ---------------------------------------------------------------- fixtures

def run_reference(make_model, seed, inputs, targets, dtype):
    """Output, loss, gradients and AdamW losses of the model in dtype."""
    model = make_model().to(dtype)
    model.eval()   # dropout off; utrain runs with training off
    init_model(model, seed)
    x = inputs.to(dtype) if inputs.is_floating_point() else inputs
    out = model(x)
    loss = model.loss(out, targets)
    loss.backward()
    res = {"logits": out.detach(), "loss": loss.detach().reshape(1),
           "grads": {n: p.grad.detach().clone() for n, p in model.named_parameters()}}

    # AdamW from the same initial values: weight decay on matrices only.
    model = make_model().to(dtype)
    model.eval()
    init_model(model, seed)
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": ADAMW["weight_decay"]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            foreach=False, fused=False)
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=False)
        loss = model.loss(model(x), targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    res["adamw_losses"] = torch.tensor(losses, dtype=dtype)
    return res


def rel_err(a, b):
    """max |a - b| / max |b|, the measure test_models.c uses."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max()).item()


def conditioning(r32, r64):
    """How far float32 is from float64 at this batch, as a fraction of the
    tolerance test_models.c allows (1e-5 for outputs and losses, 1e-4 for
    gradients). Above 0.1 the batch sits near a kink (a near-tie in a max-pool
    window, a ReLU input near 0) where float32 rounding, in PyTorch or utrain,
    can pick a different branch, so no float32 implementation could be held to
    those tolerances there."""
    out = max(rel_err(r32["logits"], r64["logits"]), rel_err(r32["loss"], r64["loss"]),
              rel_err(r32["adamw_losses"], r64["adamw_losses"]))
    grad = max(rel_err(r32["grads"][n], r64["grads"][n]) for n in r32["grads"])
    return max(out / 1e-5, grad / 1e-4)


def draw_checked(name, make_model, seed, draw_batch, attempts):
    """The first batch draw_batch(BatchStreams(seed, draw)) gives, draw = 0,
    1, ..., that has no near-tie (kink_margin() >= 1) and on which float32
    agrees with float64 to a tenth of the test tolerances (conditioning()):
    (draw, inputs, targets, float32 results, conditioning, kink margin)."""
    for draw in range(attempts):
        inputs, targets = draw_batch(BatchStreams(seed, draw))
        kink = kink_margin(make_model, seed, inputs)
        if kink < 1:
            print(f"{name}: batch {draw} has a near-tie at a ReLU or max-pool "
                  f"({kink:.2g} x the margin); drawing another")
            continue
        r32 = run_reference(make_model, seed, inputs, targets, torch.float32)
        r64 = run_reference(make_model, seed, inputs, targets, torch.float64)
        cond = conditioning(r32, r64)
        if cond <= 0.1:
            return draw, inputs, targets, r32, cond, kink
        print(f"{name}: batch {draw} is ill-conditioned in float32 "
              f"(float64 differs by {cond:.2g} x tolerance); drawing another")
    raise RuntimeError(f"{name}: no usable batch in {attempts} draws")


def make_fixture(out_root, name, make_model, config, seed, draw_batch, store_init=False, attempts=100):
    """draw_batch(g) gives (inputs, targets) from the BatchStreams g; the
    float32 results on the first usable batch (draw_checked()) are stored."""
    draw, inputs, targets, r32, cond, kink = draw_checked(name, make_model, seed, draw_batch, attempts)

    model = make_model()
    init_model(model, seed)
    names = [n for n, _ in model.named_parameters()]
    tensors = {"input": inputs, "targets": targets, "logits": r32["logits"], "loss": r32["loss"]}
    for n in names:
        tensors["grad." + n] = r32["grads"][n]
    if store_init:
        for n, p in model.named_parameters():
            tensors["init." + n] = p.detach()
    tensors["adamw_losses"] = r32["adamw_losses"]

    meta = {
        "model": name,
        "seed": str(seed),
        "config": json.dumps(config),
        "params": ",".join(names),
        "generator": "splitmix64(seed + p*1000003 + i) >> 40, see make_fixtures.py",
        "optimizer": json.dumps({"type": "adamw", "steps": ADAMW_STEPS, "decay": "ndim>=2",
                                 **{k: list(v) if isinstance(v, tuple) else v
                                    for k, v in ADAMW.items()}}),
        "batch": f"draw {draw} (BatchStreams, see make_fixtures.py)",
        "float32_vs_float64_over_tolerance": f"{cond:.3g}",
        "near_tie_gap_over_margin": f"{kink:.3g}",
        "torch": torch.__version__,
    }
    path = os.path.join(out_root, name + ".safetensors")
    write_safetensors(path, tensors, meta, meta_first=True)
    losses = r32["adamw_losses"]
    print(f"{path}: loss {r32['loss'].item():.6f}, adamw {losses[0]:.6f} -> {losses[-1]:.6f}, "
          f"float32 vs float64 {cond:.2g} x tolerance, smallest near-tie gap {kink:.2g} x the margin, "
          f"batch draw {draw}, {os.path.getsize(path)} bytes")


def main():
    # The generator's numpy version must match the plain-int definition.
    for seed, p, i in [(0, 0, 0), (1234, 3, 17), (2**63 + 5, 7, 2**20)]:
        x = splitmix64_scalar((seed + p * 1000003 + i) & M64)
        ref = np.float32(2) * np.float32((x >> 40) / 2**24) - np.float32(1)
        assert uniform_pm1(seed, p, i + 1)[i] == ref, (seed, p, i)
        assert uniform_int(seed, p, i + 1, 3, 103)[i] == 3 + ((x >> 40) * 100 >> 24), (seed, p, i)

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    out_root = out_dir()

    make_fixture(out_root, "cnn", CNN, {}, 1001,
                 lambda g: (g.normal_like(8, 1, 28, 28), g.ints(0, 10, 8)))

    cfg = dict(n_layer=2, n_head=4, n_embd=64, vocab_size=97, block_size=16)
    make_fixture(out_root, "gpt2", lambda: GPT2(**cfg), cfg, 2002,
                 lambda g: (g.ints(0, 97, 4, 16), g.ints(0, 97, 4, 16)))

    sizes = [20, 32, 16, 5]
    make_fixture(out_root, "mlp", lambda: MLP(sizes), {"sizes": ",".join(map(str, sizes))}, 3003,
                 lambda g: (g.normal_like(8, 20), g.ints(0, 5, 8)), store_init=True)

    bow = dict(vocab_size=50, n_embd=16, hidden=24, num_classes=3)
    make_fixture(out_root, "bow", lambda: BOW(**bow), bow, 4004,
                 lambda g: (padded_ids(g, 8, 12, 50), g.ints(0, 3, 8)))

    # optimizers, clipping and schedules (text fixtures, tests/parity/test_optim.c)
    import optim_fixtures
    optim_fixtures.make(out_root)


if __name__ == "__main__":
    main()
