#!/usr/bin/env python3
"""Writes the token-classification parity fixtures that
tests/parity/test_hf_token.c checks utrain's bert and roberta (model.task
token_classification) and its tagged_text reader against.

Run by hand (never by CI) in a virtual environment with torch, transformers,
tokenizers and seqeval, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_token_fixtures.py
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
  ner_sample.jsonl     four sentences of words with NER tags (run_ner's
                       {"tokens": [...], "ner_tags": [...]} lines), words
                       with punctuation inside and words the tokenizers
                       split into several pieces
  hf_bert_tok_tiny/    a small random BertForTokenClassification as
                       save_pretrained writes it, its id2label in an order
                       that is not sorted (O, B-PER, I-PER, B-LOC, I-LOC), with
                       hf_bert_tiny's vocab.txt
  hf_bert_tok_tiny_batch.safetensors
  hf_roberta_tok_tiny/ a small random RobertaForTokenClassification with
                       tiny_roberta's tokenizer.json
  hf_roberta_tok_tiny_batch.safetensors
  seqeval_cases.tsv    random tag sequences (IOB2, IOB1, IOBES and stray
                       tags) with seqeval's counts of their entities
Each batch file holds input (B, 3, T) int32 as run_ner's
tokenize_and_align_labels makes it (the fast tokenizer with
is_split_into_words, add_prefix_space for RoBERTa, right padding), labels
(B, T) (-100 at special tokens, padding and a word's later pieces), and
label_all (B, T) (label_all_tokens: every piece, B- as I-); logits (B, T,
K), loss, grad.<name> for every parameter, adamw_losses and after.<name> as
make_hf_cls_fixtures.py writes them. Everything float32, eval mode, eager.
"""
import json
import os
import random
import shutil

import numpy as np
import torch
from transformers import (BertConfig, BertForTokenClassification, BertTokenizerFast, RobertaConfig,
                          RobertaForTokenClassification, RobertaTokenizerFast)

from fixture_common import FIX, out_dir, perturb, save_pretrained, write_cls_batch

LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
SENTENCES = [
    (["the", "film", "was", "good."], ["O", "B-LOC", "O", "O"]),
    (["a", "clever", "story", "of", "hope", "and", "love", "!"], ["O", "O", "B-PER", "I-PER", "O", "O", "B-LOC", "O"]),
    (["moving"], ["B-PER"]),
    (["its", "charming,", "truly", "delightful", "soundtrack"], ["O", "B-LOC", "I-LOC", "O", "B-PER"]),
]


def align(tok, label_all):
    """run_ner's tokenize_and_align_labels: input planes and labels, padded"""
    enc = tok([w for w, _ in SENTENCES], is_split_into_words=True, truncation=True, max_length=64)
    rows, labels = [], []
    b_to_i = [LABELS.index(l.replace("B-", "I-")) if l.replace("B-", "I-") in LABELS else i
              for i, l in enumerate(LABELS)]
    for i, (_, tags) in enumerate(SENTENCES):
        ids = enc["input_ids"][i]
        word_ids = enc.word_ids(batch_index=i)
        lab, prev = [], None
        for w in word_ids:
            if w is None:
                lab.append(-100)
            elif w != prev:
                lab.append(LABELS.index(tags[w]))
            else:
                lab.append(b_to_i[LABELS.index(tags[w])] if label_all else -100)
            prev = w
        rows.append(ids)
        labels.append(lab)
    T = max(len(r) for r in rows)
    pad = tok.pad_token_id
    x = np.array([[r + [pad] * (T - len(r)), [0] * T, [1] * len(r) + [0] * (T - len(r))] for r in rows],
                 dtype=np.int32)
    y = np.array([l + [-100] * (T - len(l)) for l in labels], dtype=np.int32)
    return x, y


def write_batch(m, tok, path, roberta):
    x, y = align(tok, False)
    _, y_all = align(tok, True)
    xt = torch.from_numpy(x).long()

    def call():
        kw = dict(input_ids=xt[:, 0], attention_mask=xt[:, 2])
        if not roberta:
            kw["token_type_ids"] = xt[:, 1]
        return m(**kw, labels=torch.from_numpy(y).long())

    out = call()
    out.loss.backward()
    names, _ = write_cls_batch(path, m, x, y, out, lambda: call().loss)
    # label_all beside the others (write_cls_batch wrote the file; add to it)
    from fixture_common import read_safetensors, write_safetensors
    t, meta = read_safetensors(path)
    t["label_all"] = y_all
    write_safetensors(path, t, meta)
    print(os.path.basename(path), "loss", out.loss.item(), "params", len(names), "T", x.shape[2])


def bert(out_root):
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=37, max_position_embeddings=64, type_vocab_size=2, num_labels=5,
                     id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)},
                     hidden_act="gelu", layer_norm_eps=1e-12, attn_implementation="eager")
    torch.manual_seed(97)
    m = perturb(BertForTokenClassification(cfg).float(), seed=4321)
    d = save_pretrained(m, os.path.join(out_root, "hf_bert_tok_tiny"))
    shutil.copy(os.path.join(FIX, "hf_bert_tiny", "vocab.txt"), d)
    tok = BertTokenizerFast(os.path.join(d, "vocab.txt"))
    write_batch(m, tok, os.path.join(out_root, "hf_bert_tok_tiny_batch.safetensors"), False)


def roberta(out_root):
    cfg = RobertaConfig(vocab_size=538, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, max_position_embeddings=66, type_vocab_size=1,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, num_labels=5,
                        id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)},
                        hidden_act="gelu", layer_norm_eps=1e-5, attn_implementation="eager")
    torch.manual_seed(96)
    m = perturb(RobertaForTokenClassification(cfg).float(), seed=4322)
    d = save_pretrained(m, os.path.join(out_root, "hf_roberta_tok_tiny"))
    shutil.copy(os.path.join(FIX, "tiny_roberta", "tokenizer.json"), d)
    tok = RobertaTokenizerFast(tokenizer_file=os.path.join(d, "tokenizer.json"), add_prefix_space=True)
    write_batch(m, tok, os.path.join(out_root, "hf_roberta_tok_tiny_batch.safetensors"), True)


def seqeval_cases(out_root):
    """random sequences over tags of every scheme, with seqeval's counts"""
    from seqeval.metrics.sequence_labeling import get_entities
    rng = random.Random(7)
    tags = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "I-MISC", "B-MISC", "X",
            "B", "I-", "PER", "B-LOC-X", "."]
    with open(os.path.join(out_root, "seqeval_cases.tsv"), "w") as f:
        f.write("# gold<TAB>predicted<TAB>gold entities<TAB>predicted<TAB>both (seqeval's default mode)\n")
        for _ in range(400):
            n = rng.randint(0, 9)
            pool = tags[:3] + tags[5:7] if rng.random() < 0.4 else tags
            g = [rng.choice(pool) for _ in range(n)]
            p = [t if rng.random() < 0.6 else rng.choice(pool) for t in g]
            eg, ep = set(get_entities(g)), set(get_entities(p))
            f.write("%s\t%s\t%d\t%d\t%d\n" % (" ".join(g), " ".join(p), len(eg), len(ep), len(eg & ep)))


def main():
    out_root = out_dir()
    with open(os.path.join(out_root, "ner_sample.jsonl"), "w") as f:
        for w, t in SENTENCES:
            f.write(json.dumps({"tokens": w, "ner_tags": t}) + "\n")
    bert(out_root)
    roberta(out_root)
    seqeval_cases(out_root)


if __name__ == "__main__":
    main()
