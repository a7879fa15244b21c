"""What the fixture scripts of tests/parity share.

  FIX, ROOT          the checked-in fixtures (read as inputs) and the repository
  out_dir()          where a run writes: --out DIR (taken out of sys.argv, so
                     each script's own arguments read as before), else FIX;
                     regenerate into a temporary directory and cmp the files
                     against FIX before committing anything
  write_safetensors  F32 / I32 tensors (numpy arrays or torch tensors), in order
  read_safetensors   the same files back as numpy arrays, with the metadata
  sst2_sentences     the first column of data/sst2_sample/{train,dev,test}.tsv
  perturb            every parameter of a tiny Hugging Face model moved off
                     its initial value (no zero bias, no unit LayerNorm)
  save_pretrained    save_pretrained in safetensors, into a directory
  trainer_decay_names, adamw_steps
                     AdamW (lr 1e-3, weight decay 0.5) over Hugging Face
                     Trainer's decay groups, the loss before each step
  batch_tensors, after_tensors
                     a batch file's input, labels, logits, loss, grad.<name>
                     and after.<name> tensors
  write_cls_batch    a classifier's batch file: those, the AdamW losses and
                     the metadata
  gpt2_name, gpt2_layout
                     a transformers GPT-2 parameter under utrain's name (no
                     "transformer.") and layout (Conv1D weights (out, in))
  print_logits_diff  a utrain export against the fixture model it came from

Only json, os, struct, sys and numpy at import; torch where a helper needs it.
"""
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIX = os.path.join(HERE, "fixtures")

ST_DTYPES = {np.float32: "F32", np.int32: "I32"}


def out_dir():
    """DIR of `--out DIR` (removed from sys.argv, made if missing), else FIX."""
    d = FIX
    if "--out" in sys.argv:
        i = sys.argv.index("--out")
        if i + 1 >= len(sys.argv):
            sys.exit("--out needs a directory")
        d = sys.argv[i + 1]
        del sys.argv[i:i + 2]
    os.makedirs(d, exist_ok=True)
    return d


def write_safetensors(path, tensors, meta, meta_first=False):
    """tensors: name -> float32 / int32 numpy array or torch tensor, stored in
    this order; meta: str -> str, the header's first entry with meta_first
    (make_fixtures.py's files) else its last. The data starts 8-byte aligned;
    the file is written beside path and then moved over it."""
    header = {"__metadata__": meta} if meta_first else {}
    blobs, off = [], 0
    for name, arr in tensors.items():
        if hasattr(arr, "detach"):
            arr = arr.detach().cpu().contiguous().numpy()
        arr = np.ascontiguousarray(arr)
        b = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": ST_DTYPES[arr.dtype.type], "shape": list(arr.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if not meta_first:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_safetensors(path):
    """name -> numpy array (F32 and I32 only, copied), and the metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    types = {v: k for k, v in ST_DTYPES.items()}
    out = {}
    for name, h in header.items():
        a, b = h["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=types[h["dtype"]]).reshape(h["shape"]).copy()
    return out, meta


def sst2_sentences():
    out = []
    for split in ("train", "dev", "test"):
        with open(os.path.join(ROOT, "data", "sst2_sample", split + ".tsv")) as f:
            next(f)
            out += [line.split("\t")[0] for line in f]
    return out


def perturb(m, seed=None):
    """m with 0.05 N(0, 1) added to every parameter (torch's generator,
    seeded first when seed is given), in eval mode."""
    import torch
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def save_pretrained(m, d):
    m.save_pretrained(d, safe_serialization=True)
    return d


def trainer_decay_names(model):
    """The names Hugging Face Trainer applies weight decay to."""
    import torch
    try:
        from transformers.trainer_pt_utils import get_parameter_names
        return set(get_parameter_names(model, [torch.nn.LayerNorm], ["bias", "layernorm", "rmsnorm"]))
    except ImportError:
        return {n for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n}


def adamw_steps(model, loss_fn, steps=10):
    """steps AdamW steps (lr 1e-3, weight decay 0.5 over Trainer's groups) of
    loss_fn() (model's loss on the batch): the float32 losses, each before its
    step, and the decaying names (sorted)."""
    import torch
    decay = trainer_decay_names(model)
    groups = [{"params": [p for n, p in model.named_parameters() if n in decay], "weight_decay": 0.5},
              {"params": [p for n, p in model.named_parameters() if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        losses.append(loss.item())
        loss.backward()
        opt.step()
    return np.array(losses, dtype=np.float32), sorted(decay)


def _same_name(n):
    return n


def _same_layout(n, a):
    return a


CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")


def gpt2_name(n):
    return n[len("transformer."):] if n.startswith("transformer.") else n


def gpt2_layout(n, a):
    return a.T if n.endswith(CONV1D) else a


def batch_tensors(model, x, y, out, y_key="labels", rename=_same_name, layout=_same_layout):
    """After out.loss.backward(): input, y_key, logits, loss and grad.<name>
    (rename(name), layout(name, array)) of every parameter; with the names."""
    t = {"input": x, y_key: y, "logits": out.logits.detach().numpy(), "loss": out.loss.detach().numpy().reshape(1)}
    names = []
    for name, p in model.named_parameters():
        names.append(rename(name))
        t["grad." + rename(name)] = layout(name, p.grad.numpy())
    return t, names


def after_tensors(t, model, rename=_same_name, layout=_same_layout):
    """after.<name>: every parameter as it is now, added to t."""
    for name, p in model.named_parameters():
        t["after." + rename(name)] = layout(name, p.detach().numpy().copy())


def write_cls_batch(path, model, x, y, out, loss_fn, rename=_same_name, layout=_same_layout):
    """After out.loss.backward(): path holds batch_tensors, adamw_losses (10
    adamw_steps of loss_fn) and after_tensors, with the parameter and decaying
    names and the torch version as metadata. The names and decaying names."""
    import torch
    t, names = batch_tensors(model, x, y, out, rename=rename, layout=layout)
    t["adamw_losses"], decay = adamw_steps(model, loss_fn)
    after_tensors(t, model, rename=rename, layout=layout)
    meta = {"params": json.dumps(names), "decay": json.dumps(sorted(rename(n) for n in decay)),
            "torch": torch.__version__}
    write_safetensors(path, t, meta)
    return names, decay


def print_logits_diff(cls, name, d, logits):
    """cls.from_pretrained of FIX/name and of d: the largest difference of
    logits(model) between them."""
    import torch
    ref = cls.from_pretrained(os.path.join(FIX, name)).eval()
    got = cls.from_pretrained(d).eval()
    with torch.no_grad():
        a, b = logits(ref), logits(got)
    print("max |logits difference|", (a - b).abs().max().item(), "of max |logit|", a.abs().max().item())


def seq2seq_generations(m, x, cases, base, pad, eos):
    """generate's new tokens (after the decoder start) for each (name, options)
    case over base, from the sources of x's planes 0 (ids) and 1 (mask):
    gen.<name> (B, max_new) int32, padded as generate pads (beam search
    writes `pad_token_id or eos_token_id`: the end-of-sequence id where pad
    is 0), and the options as JSON metadata."""
    import torch
    xt = torch.from_numpy(x).long()
    out, meta = {}, {}
    for name, opts in cases:
        o = dict(base, **opts)
        with torch.no_grad():
            seq = m.generate(input_ids=xt[:, 0], attention_mask=xt[:, 1], **o)
        new = seq[:, 1:].numpy().astype(np.int32)
        fill = eos if o["num_beams"] > 1 and pad == 0 else pad
        g = np.full((x.shape[0], o["max_new_tokens"]), fill, dtype=np.int32)
        g[:, :new.shape[1]] = new
        out["gen." + name] = g
        meta["gen." + name] = json.dumps(o)
        print(name, g.tolist())
    return out, meta
