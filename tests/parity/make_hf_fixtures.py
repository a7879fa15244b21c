#!/usr/bin/env python3
"""Writes the Hugging Face BERT parity fixtures that tests/parity/test_hf_bert.c
checks utrain's bert model and its model-directory import against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers
    /tmp/hfvenv/bin/python tests/parity/make_hf_fixtures.py
It rewrites, under tests/parity/fixtures/:
  hf_bert_tiny/        a small random BertForSequenceClassification as
                       save_pretrained writes it (config.json,
                       model.safetensors) plus a vocab.txt holding BERT's
                       special tokens and every word of data/sst2_sample, so
                       the end-to-end tests can fine-tune it on that data
  hf_bert_tiny_base/   its encoder alone (BertModel.save_pretrained: tensor
                       names without the "bert." prefix, no classifier), as
                       sentence-transformers ships MiniLM
  hf_bert_tiny_batch.safetensors
                       input (B, 3, T) int32: token ids, token type ids and
                       attention mask planes, with padding and a sentence
                       pair; labels (B) int32; logits (B, num_labels); loss
                       (1); grad.<name> for every parameter, named as in the
                       model's state_dict; adamw_losses (10): the losses of 10
                       fine-tuning steps on that batch with torch.optim.AdamW
                       (lr 1e-3, weight decay 0.5: large, so a parameter in
                       the wrong group shows) over Hugging Face Trainer's
                       parameter groups (no decay for biases and LayerNorm
                       weights), each recorded before its step; after.<name>:
                       every parameter after the 10 steps
Everything is float32 in eval mode (dropout off), eager attention.
"""
import json
import os
import struct

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures")


def write_safetensors(path, tensors, meta):
    """Minimal safetensors writer: F32 / I32 tensors in the given order."""
    header, blobs, off = {}, [], 0
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        dt = {np.float32: "F32", np.int32: "I32"}[arr.dtype.type]
        b = arr.tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def sst2_words():
    words = set()
    for split in ("train", "dev", "test"):
        with open(os.path.join(ROOT, "data", "sst2_sample", split + ".tsv")) as f:
            next(f)
            for line in f:
                words.update(line.split("\t")[0].split())
    return sorted(words)


def batch():
    """3 examples, T = 7: a full row, a padded row, a padded sentence pair."""
    ids = [[2, 11, 12, 13, 14, 15, 3], [2, 21, 22, 3, 0, 0, 0], [2, 31, 32, 3, 41, 3, 0]]
    types = [[0] * 7, [0] * 7, [0, 0, 0, 0, 1, 1, 0]]
    mask = [[1] * 7, [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]]
    x = np.array([[i, t, m] for i, t, m in zip(ids, types, mask)], dtype=np.int32)
    return x, np.array([1, 0, 1], dtype=np.int32)


def trainer_decay_names(model):
    """The names Hugging Face Trainer applies weight decay to."""
    try:
        from transformers.trainer_pt_utils import get_parameter_names
        return set(get_parameter_names(model, [torch.nn.LayerNorm], ["bias", "layernorm", "rmsnorm"]))
    except ImportError:
        return {n for n, p in model.named_parameters() if "bias" not in n and "LayerNorm" not in n}


def adamw_steps_kw(model, kw, y, steps=10):
    """10 AdamW steps of model(**kw, labels=y) over Trainer's decay groups:
    the loss before each step, and the names that decay."""
    decay = trainer_decay_names(model)
    groups = [{"params": [p for n, p in model.named_parameters() if n in decay], "weight_decay": 0.5},
              {"params": [p for n, p in model.named_parameters() if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(**kw, labels=torch.from_numpy(y).long())
        losses.append(out.loss.item())
        out.loss.backward()
        opt.step()
    return np.array(losses, dtype=np.float32), sorted(decay)


def adamw_steps(model, xt, y, steps=10):
    return adamw_steps_kw(model, dict(input_ids=xt[:, 0], token_type_ids=xt[:, 1], attention_mask=xt[:, 2]),
                          y, steps)


def main():
    torch.manual_seed(1234)
    words = sst2_words()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    assert len(vocab) <= 100, len(vocab)
    vocab += ["[unused%d]" % i for i in range(100 - len(vocab))]
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                     num_labels=2, hidden_act="gelu", layer_norm_eps=1e-12,
                     attn_implementation="eager")
    model = BertForSequenceClassification(cfg).float().eval()
    d = os.path.join(OUT, "hf_bert_tiny")
    model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    model.bert.save_pretrained(os.path.join(OUT, "hf_bert_tiny_base"), safe_serialization=True)

    x, y = batch()
    xt = torch.from_numpy(x).long()
    out = model(input_ids=xt[:, 0], token_type_ids=xt[:, 1], attention_mask=xt[:, 2],
                labels=torch.from_numpy(y).long())
    out.loss.backward()
    t = {"input": x, "labels": y, "logits": out.logits.detach().numpy(),
         "loss": out.loss.detach().numpy().reshape(1)}
    names = []
    for name, p in model.named_parameters():
        names.append(name)
        t["grad." + name] = p.grad.numpy()
    t["adamw_losses"], decay = adamw_steps(model, xt, y)
    for name, p in model.named_parameters():
        t["after." + name] = p.detach().numpy().copy()
    meta = {"params": json.dumps(names), "decay": json.dumps(decay), "torch": torch.__version__}
    write_safetensors(os.path.join(OUT, "hf_bert_tiny_batch.safetensors"), t, meta)
    print("loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
