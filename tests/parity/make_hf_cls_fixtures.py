#!/usr/bin/env python3
"""Writes the RoBERTa and GPT-2 sequence-classification parity fixtures that
tests/parity/test_hf_roberta.c and test_hf_gpt2_cls.c check utrain's bert
(RoBERTa variant) and gpt2 (task sequence_classification) models against.

Run by hand (never by CI) in a virtual environment with torch, transformers
and tokenizers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_cls_fixtures.py
It rewrites, under tests/parity/fixtures/:
  hf_roberta_tiny/     a small random RobertaForSequenceClassification as
                       save_pretrained writes it, with tiny_roberta's
                       tokenizer.json (byte-level BPE trained on
                       data/sst2_sample, RobertaProcessing)
  hf_roberta_tiny_batch.safetensors
  hf_gpt2_cls_tiny/    a small random GPT2ForSequenceClassification
                       (pad_token_id: <|endoftext|>) with a GPT-2 style
                       byte-level BPE tokenizer trained on data/sst2_sample,
                       saved as vocab.json + merges.txt
  hf_gpt2_cls_tiny_batch.safetensors
Every parameter is moved off its initial value (no zero bias, no unit
LayerNorm) so a wrong layout or offset shows. Each batch file holds: input
(B, 3, T) int32 (token ids, token type ids, attention mask, right-padded);
labels (B); logits (B, num_labels); loss (1); grad.<name> for every parameter
under utrain's name and layout (GPT-2's Conv1D gradients transposed to
(out, in), "transformer." dropped); adamw_losses (10) of 10 steps of
torch.optim.AdamW (lr 1e-3, weight decay 0.5) over Hugging Face Trainer's
groups, each before its step; after.<name>: the parameters after them.
Everything float32 in eval mode, eager attention.
With --check-export DIR it loads DIR (written by `utrain export --format hf`
from a run of one of these models) with from_pretrained and prints the
largest difference of its logits from the fixture's on the fixture's batch.
"""
import json
import os
import shutil
import sys

import numpy as np
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (GPT2Config, GPT2ForSequenceClassification, RobertaConfig,
                          RobertaForSequenceClassification)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "fixtures")
sys.path.insert(0, HERE)
from make_hf_fixtures import trainer_decay_names, write_safetensors  # noqa: E402

CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")


def sst2_sentences():
    out = []
    for split in ("train", "dev", "test"):
        with open(os.path.join(ROOT, "data", "sst2_sample", split + ".tsv")) as f:
            next(f)
            out += [line.split("\t")[0] for line in f]
    return out


def perturb(m):
    torch.manual_seed(1234)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m.eval()


def roberta():
    cfg = RobertaConfig(vocab_size=538, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=66, type_vocab_size=1,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=2,
                        hidden_act="gelu", layer_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(99)
    m = perturb(RobertaForSequenceClassification(cfg).float())
    d = os.path.join(OUT, "hf_roberta_tiny")
    m.save_pretrained(d, safe_serialization=True)
    shutil.copy(os.path.join(OUT, "tiny_roberta", "tokenizer.json"), d)
    # <s> a b c d e </s>; a padded row; a padded pair <s> A </s> </s> B </s>
    ids = [[0, 11, 12, 13, 14, 15, 2], [0, 21, 22, 2, 1, 1, 1], [0, 31, 32, 2, 2, 41, 2], [0, 51, 2, 1, 1, 1, 1]]
    mask = [[int(i != 1) for i in r] for r in ids]
    x = np.array([[i, [0] * 7, k] for i, k in zip(ids, mask)], dtype=np.int32)
    return m, x, np.array([1, 0, 1, 0], dtype=np.int32), lambda n: n


def gpt2_tokenizer(d):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=299, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(sst2_sentences(), trainer)
    vocab = tok.get_vocab()
    vocab["<|endoftext|>"] = len(vocab)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(dict(sorted(vocab.items(), key=lambda kv: kv[1])), f, ensure_ascii=False)
    merges = json.loads(tok.to_str())["model"]["merges"]
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
        for mg in merges:
            f.write((" ".join(mg) if isinstance(mg, list) else mg) + "\n")
    return tok, len(vocab)


def gpt2_cls():
    d = os.path.join(OUT, "hf_gpt2_cls_tiny")
    os.makedirs(d, exist_ok=True)
    tok, V = gpt2_tokenizer(d)
    eot = V - 1
    cfg = GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=2, num_labels=2,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new", pad_token_id=eot,
                     bos_token_id=eot, eos_token_id=eot, attn_implementation="eager")
    torch.manual_seed(98)
    m = perturb(GPT2ForSequenceClassification(cfg).float())
    m.save_pretrained(d, safe_serialization=True)
    rows = [tok.encode(s).ids[:k] for s, k in zip(sst2_sentences()[:4], (9, 4, 7, 2))]
    T = max(len(r) for r in rows)
    ids = [r + [eot] * (T - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (T - len(r)) for r in rows]
    assert any(0 in k for k in mask)
    x = np.array([[i, [0] * T, k] for i, k in zip(ids, mask)], dtype=np.int32)

    def rename(n):
        return n[len("transformer."):] if n.startswith("transformer.") else n
    return m, x, np.array([1, 0, 0, 1], dtype=np.int32), rename


def call(m, xt, y=None):
    kw = dict(input_ids=xt[:, 0], attention_mask=xt[:, 2])
    if isinstance(m, RobertaForSequenceClassification):
        kw["token_type_ids"] = xt[:, 1]
    return m(**kw, labels=None if y is None else torch.from_numpy(y).long())


def layout(name, g):
    return g.T if name.endswith(CONV1D) else g


def write_batch(m, x, y, rename, path):
    xt = torch.from_numpy(x).long()
    out = call(m, xt, y)
    out.loss.backward()
    t = {"input": x, "labels": y, "logits": out.logits.detach().numpy(),
         "loss": out.loss.detach().numpy().reshape(1)}
    names = []
    for name, p in m.named_parameters():
        names.append(rename(name))
        t["grad." + rename(name)] = layout(name, p.grad.numpy())
    decay = trainer_decay_names(m)
    groups = [{"params": [p for n, p in m.named_parameters() if n in decay], "weight_decay": 0.5},
              {"params": [p for n, p in m.named_parameters() if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = call(m, xt, y).loss
        losses.append(loss.item())
        loss.backward()
        opt.step()
    t["adamw_losses"] = np.array(losses, dtype=np.float32)
    for name, p in m.named_parameters():
        t["after." + rename(name)] = layout(name, p.detach().numpy().copy())
    meta = {"params": json.dumps(names), "decay": json.dumps(sorted(rename(n) for n in decay)),
            "torch": torch.__version__}
    write_safetensors(path, t, meta)
    print(os.path.basename(path), "loss", out.loss.item(), "params", len(names))


def check_export(d):
    with open(os.path.join(d, "config.json")) as f:
        rob = json.load(f)["model_type"] == "roberta"
    cls = RobertaForSequenceClassification if rob else GPT2ForSequenceClassification
    name = "hf_roberta_tiny" if rob else "hf_gpt2_cls_tiny"
    xt = torch.from_numpy(_batch_input(name)).long()
    ref = cls.from_pretrained(os.path.join(OUT, name)).eval()
    got = cls.from_pretrained(d).eval()
    with torch.no_grad():
        a, b = call(ref, xt).logits, call(got, xt).logits
    print("max |logits difference|", (a - b).abs().max().item(), "of max |logit|", a.abs().max().item())


def _batch_input(name):
    from safetensors.numpy import load_file
    return load_file(os.path.join(OUT, name + "_batch.safetensors"))["input"]


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        return check_export(sys.argv[2])
    m, x, y, rename = roberta()
    write_batch(m, x, y, rename, os.path.join(OUT, "hf_roberta_tiny_batch.safetensors"))
    m, x, y, rename = gpt2_cls()
    write_batch(m, x, y, rename, os.path.join(OUT, "hf_gpt2_cls_tiny_batch.safetensors"))


if __name__ == "__main__":
    main()
