#!/usr/bin/env python3
"""Writes the masked-language-model parity fixtures that
tests/parity/test_hf_mlm.c checks utrain's bert and roberta (model.task
masked_lm) against.

Run by hand (never by CI) in a virtual environment with torch,
transformers and tokenizers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_mlm_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
  hf_bert_mlm_tiny/    a small random BertForMaskedLM as save_pretrained
                       writes it (the decoder tied to the word embedding),
                       with hf_bert_tiny's vocab.txt
  hf_bert_mlm_tiny_batch.safetensors
  hf_roberta_mlm_tiny/ a small random RobertaForMaskedLM with tiny_roberta's
                       tokenizer.json
  hf_roberta_mlm_tiny_batch.safetensors
Each batch file holds input (B, 3, T) int32 (ids with some tokens
replaced by the mask token or another token, as DataCollatorForLanguageModeling
leaves them; token type ids; attention mask, the last row padded), labels
(B, T) (the original ids at the chosen positions, -100 elsewhere), logits
(B, T, V) of every position, loss, grad.<name> for every parameter,
adamw_losses and after.<name> as make_hf_cls_fixtures.py writes them.
Everything float32, eval mode, eager.
"""
import os
import shutil

import numpy as np
import torch
from transformers import (BertConfig, BertForMaskedLM, BertTokenizerFast, RobertaConfig, RobertaForMaskedLM,
                          RobertaTokenizerFast)

from fixture_common import FIX, out_dir, perturb, save_pretrained, write_cls_batch

TEXTS = ["the film was good and the story of hope was clever",
         "a moving, truly delightful soundtrack",
         "its charming"]


def masked_batch(tok, vocab):
    """the texts encoded with special tokens, right-padded; every third
    non-special position chosen: the first of each three chosen replaced by
    the mask token, the second by a fixed other id, the third left"""
    enc = tok(TEXTS, truncation=True, max_length=64, return_special_tokens_mask=True)
    T = max(len(r) for r in enc["input_ids"])
    pad = tok.pad_token_id
    x = np.zeros((len(TEXTS), 3, T), dtype=np.int32)
    y = np.full((len(TEXTS), T), -100, dtype=np.int32)
    k = 0
    for b, (ids, special) in enumerate(zip(enc["input_ids"], enc["special_tokens_mask"])):
        n = len(ids)
        x[b, 0] = ids + [pad] * (T - n)
        x[b, 2, :n] = 1
        for t in range(n):
            if special[t] or t % 3 != 1:
                continue
            y[b, t] = ids[t]
            if k % 3 == 0:
                x[b, 0, t] = tok.mask_token_id
            elif k % 3 == 1:
                x[b, 0, t] = (ids[t] * 7 + 11) % vocab
            k += 1
    return x, y


def write_batch(m, tok, path, roberta, vocab):
    x, y = masked_batch(tok, vocab)
    xt = torch.from_numpy(x).long()

    def call():
        kw = dict(input_ids=xt[:, 0], attention_mask=xt[:, 2])
        if not roberta:
            kw["token_type_ids"] = xt[:, 1]
        return m(**kw, labels=torch.from_numpy(y).long())

    out = call()
    out.loss.backward()
    names, _ = write_cls_batch(path, m, x, y, out, lambda: call().loss)
    print(os.path.basename(path), "loss", out.loss.item(), "params", len(names), "T", x.shape[2],
          "labeled", int((y != -100).sum()))


def bert(out_root):
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64, type_vocab_size=2,
                     hidden_act="gelu", layer_norm_eps=1e-12, attn_implementation="eager")
    torch.manual_seed(95)
    m = perturb(BertForMaskedLM(cfg).float(), seed=4323)
    d = save_pretrained(m, os.path.join(out_root, "hf_bert_mlm_tiny"))
    shutil.copy(os.path.join(FIX, "hf_bert_tiny", "vocab.txt"), d)
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"))
    write_batch(m, tok, os.path.join(out_root, "hf_bert_mlm_tiny_batch.safetensors"), False, 100)


def roberta(out_root):
    cfg = RobertaConfig(vocab_size=538, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=66, type_vocab_size=1,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2,
                        hidden_act="gelu", layer_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(94)
    m = perturb(RobertaForMaskedLM(cfg).float(), seed=4324)
    d = save_pretrained(m, os.path.join(out_root, "hf_roberta_mlm_tiny"))
    shutil.copy(os.path.join(FIX, "tiny_roberta", "tokenizer.json"), d)
    tok = RobertaTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"))
    write_batch(m, tok, os.path.join(out_root, "hf_roberta_mlm_tiny_batch.safetensors"), True, 538)


def main():
    out_root = out_dir()
    bert(out_root)
    roberta(out_root)


if __name__ == "__main__":
    main()
