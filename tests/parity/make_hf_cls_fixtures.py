#!/usr/bin/env python3
"""Writes the RoBERTa and GPT-2 sequence-classification parity fixtures that
tests/parity/test_hf_roberta.c and test_hf_gpt2_cls.c check utrain's bert
(RoBERTa variant) and gpt2 (task sequence_classification) models against.

Run by hand (never by CI) in a virtual environment with torch, transformers
and tokenizers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_cls_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
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

from fixture_common import FIX, gpt2_layout, gpt2_name, out_dir, perturb, print_logits_diff, read_safetensors, \
    save_pretrained, sst2_sentences, write_cls_batch


def roberta(out_root):
    cfg = RobertaConfig(vocab_size=538, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=66, type_vocab_size=1,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=2,
                        hidden_act="gelu", layer_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(99)
    m = perturb(RobertaForSequenceClassification(cfg).float(), seed=1234)
    d = save_pretrained(m, os.path.join(out_root, "hf_roberta_tiny"))
    shutil.copy(os.path.join(FIX, "tiny_roberta", "tokenizer.json"), d)
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


def gpt2_cls(out_root):
    d = os.path.join(out_root, "hf_gpt2_cls_tiny")
    os.makedirs(d, exist_ok=True)
    tok, V = gpt2_tokenizer(d)
    eot = V - 1
    cfg = GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=2, num_labels=2,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new", pad_token_id=eot,
                     bos_token_id=eot, eos_token_id=eot, attn_implementation="eager")
    torch.manual_seed(98)
    m = perturb(GPT2ForSequenceClassification(cfg).float(), seed=1234)
    save_pretrained(m, d)
    rows = [tok.encode(s).ids[:k] for s, k in zip(sst2_sentences()[:4], (9, 4, 7, 2))]
    T = max(len(r) for r in rows)
    ids = [r + [eot] * (T - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (T - len(r)) for r in rows]
    assert any(0 in k for k in mask)
    x = np.array([[i, [0] * T, k] for i, k in zip(ids, mask)], dtype=np.int32)
    return m, x, np.array([1, 0, 0, 1], dtype=np.int32), gpt2_name


def call(m, xt, y=None):
    kw = dict(input_ids=xt[:, 0], attention_mask=xt[:, 2])
    if isinstance(m, RobertaForSequenceClassification):
        kw["token_type_ids"] = xt[:, 1]
    return m(**kw, labels=None if y is None else torch.from_numpy(y).long())


def write_batch(m, x, y, rename, path):
    xt = torch.from_numpy(x).long()
    out = call(m, xt, y)
    out.loss.backward()
    names, _ = write_cls_batch(path, m, x, y, out, lambda: call(m, xt, y).loss, rename=rename, layout=gpt2_layout)
    print(os.path.basename(path), "loss", out.loss.item(), "params", len(names))


def check_export(d):
    with open(os.path.join(d, "config.json")) as f:
        rob = json.load(f)["model_type"] == "roberta"
    cls = RobertaForSequenceClassification if rob else GPT2ForSequenceClassification
    name = "hf_roberta_tiny" if rob else "hf_gpt2_cls_tiny"
    xt = torch.from_numpy(read_safetensors(os.path.join(FIX, name + "_batch.safetensors"))[0]["input"]).long()
    print_logits_diff(cls, name, d, lambda m: call(m, xt).logits)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        return check_export(sys.argv[2])
    out_root = out_dir()
    m, x, y, rename = roberta(out_root)
    write_batch(m, x, y, rename, os.path.join(out_root, "hf_roberta_tiny_batch.safetensors"))
    m, x, y, rename = gpt2_cls(out_root)
    write_batch(m, x, y, rename, os.path.join(out_root, "hf_gpt2_cls_tiny_batch.safetensors"))


if __name__ == "__main__":
    main()
