#!/usr/bin/env python3
"""Writes the Hugging Face BERT parity fixtures that tests/parity/test_hf_bert.c
checks utrain's bert model and its model-directory import against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    python3 -m venv /tmp/hfvenv && /tmp/hfvenv/bin/pip install torch transformers
    /tmp/hfvenv/bin/python tests/parity/make_hf_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
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
import os

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification

from fixture_common import out_dir, save_pretrained, sst2_sentences, write_cls_batch


def batch():
    """3 examples, T = 7: a full row, a padded row, a padded sentence pair."""
    ids = [[2, 11, 12, 13, 14, 15, 3], [2, 21, 22, 3, 0, 0, 0], [2, 31, 32, 3, 41, 3, 0]]
    types = [[0] * 7, [0] * 7, [0, 0, 0, 0, 1, 1, 0]]
    mask = [[1] * 7, [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]]
    x = np.array([[i, t, m] for i, t, m in zip(ids, types, mask)], dtype=np.int32)
    return x, np.array([1, 0, 1], dtype=np.int32)


def kwargs(xt):
    return dict(input_ids=xt[:, 0], token_type_ids=xt[:, 1], attention_mask=xt[:, 2])


def main():
    out_root = out_dir()
    torch.manual_seed(1234)
    words = sorted({w for s in sst2_sentences() for w in s.split()})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    assert len(vocab) <= 100, len(vocab)
    vocab += ["[unused%d]" % i for i in range(100 - len(vocab))]
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                     num_labels=2, hidden_act="gelu", layer_norm_eps=1e-12,
                     attn_implementation="eager")
    model = BertForSequenceClassification(cfg).float().eval()
    d = save_pretrained(model, os.path.join(out_root, "hf_bert_tiny"))
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    save_pretrained(model.bert, os.path.join(out_root, "hf_bert_tiny_base"))

    x, y = batch()
    xt, yt = torch.from_numpy(x).long(), torch.from_numpy(y).long()
    out = model(**kwargs(xt), labels=yt)
    out.loss.backward()
    names, _ = write_cls_batch(os.path.join(out_root, "hf_bert_tiny_batch.safetensors"), model, x, y, out,
                               lambda: model(**kwargs(xt), labels=yt).loss)
    print("loss", out.loss.item(), "params", len(names))


if __name__ == "__main__":
    main()
