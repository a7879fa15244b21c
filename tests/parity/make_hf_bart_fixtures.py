#!/usr/bin/env python3
"""Writes the Hugging Face BART parity fixtures that tests/parity/test_hf_bart.c
checks utrain's bart model and its model-directory import against.

Run by hand (never by CI) in a virtual environment with torch and
transformers, from anywhere:
    /tmp/hfvenv/bin/python tests/parity/make_hf_bart_fixtures.py
    /tmp/hfvenv/bin/python tests/parity/make_hf_bart_fixtures.py --check-export OUT_DIR
It rewrites, under tests/parity/fixtures/ (or DIR with --out DIR):
  hf_bart_tiny/        a small random BartForSequenceClassification (d_model
                       32, 2 encoder + 2 decoder layers, 4 heads, ffn 64,
                       max_position_embeddings 64, scale_embedding true,
                       every parameter moved off its initial value) as
                       save_pretrained writes it, with a BART tokenizer
                       (transformers' BartTokenizer over the byte-level BPE
                       vocabulary and merges of tests/parity/fixtures/tiny_roberta,
                       trained on data/sst2_sample: <s> 0, <pad> 1, </s> 2,
                       <unk> 3, <mask> 537, add_prefix_space false,
                       RobertaProcessing) saved by its save_pretrained
                       (tokenizer.json, tokenizer_config.json), so the
                       end-to-end tests can fine-tune it on that data
  hf_bart_tok_files/   the same tokenizer as the older vocab.json + merges.txt
  hf_bart_tok_ids.txt  sentence TAB pair (or nothing) TAB the ids transformers'
                       tokenizer gives, for every sentence of data/sst2_sample
                       and pairs of consecutive train sentences
  (the bare BartModel layout, names without "model." and no head, is written
  from hf_bart_tiny by the test itself, keeping the fixtures under 1 MB)
  hf_bart_tiny_batch.safetensors
                       input (B, 3, T) int32 planes as utrain's tsv_text gives
                       them (token ids, token type ids, attention mask) with
                       padding; labels (B); logits (B, 2); loss (1);
                       grad.<name> for every parameter of the state_dict;
                       adamw_losses (10) and after.<name> as in
                       make_hf_fixtures.py (AdamW lr 1e-3, weight decay 0.5
                       over Hugging Face Trainer's groups)
Everything is float32 in eval mode (dropout off), eager attention.
--check-export loads a utrain export (`utrain export RUN --format hf OUT`)
with from_pretrained and prints the largest difference of its logits from
the fixture model's on the fixture batch.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import BartConfig, BartForSequenceClassification

from fixture_common import FIX, out_dir, perturb, print_logits_diff, save_pretrained, sst2_sentences, write_cls_batch


def batch():
    """3 rows, T = 7, one </s> each: a full row and two right-padded ones."""
    ids = [[0, 264, 448, 356, 261, 300, 2], [0, 50, 60, 2, 1, 1, 1], [0, 70, 2, 1, 1, 1, 1]]
    mask = [[int(i != 1) for i in row] for row in ids]
    x = np.array([[i, [0] * 7, m] for i, m in zip(ids, mask)], dtype=np.int32)
    return x, np.array([1, 0, 1], dtype=np.int32)


def model():
    torch.manual_seed(4321)
    cfg = BartConfig(vocab_size=538, d_model=32, encoder_layers=2, decoder_layers=2,
                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                     decoder_ffn_dim=64, max_position_embeddings=64, num_labels=2,
                     scale_embedding=True, activation_function="gelu", attn_implementation="eager")
    return perturb(BartForSequenceClassification(cfg).float())


def bart_tokenizer(d, out_root):
    """BartTokenizer on tiny_roberta's vocabulary and merges, saved into d;
    the legacy files into out_root/hf_bart_tok_files; the expected ids."""
    from transformers import BartTokenizer
    with open(os.path.join(FIX, "tiny_roberta", "tokenizer.json")) as f:
        model = json.load(f)["model"]
    vocab = dict(model["vocab"], **{"<mask>": len(model["vocab"])})
    merges = [tuple(m) for m in model["merges"]]
    tok = BartTokenizer(vocab=vocab, merges=merges)
    tok.save_pretrained(d)
    files = os.path.join(out_root, "hf_bart_tok_files")
    os.makedirs(files, exist_ok=True)
    with open(os.path.join(files, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(files, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(" ".join(m) + "\n" for m in merges))
    sents = sst2_sentences()
    rows = [(s, "") for s in sents] + [(sents[i], sents[i + 1]) for i in range(0, 40, 2)]
    with open(os.path.join(out_root, "hf_bart_tok_ids.txt"), "w", encoding="utf-8") as f:
        for a, b in rows:
            ids = tok(a, b)["input_ids"] if b else tok(a)["input_ids"]
            f.write("%s\t%s\t%s\n" % (a, b, " ".join(map(str, ids))))


def label_config(d):
    """save_pretrained leaves out id2label when it has PretrainedConfig's 2
    default labels, but BartConfig's own default is 3, so from_pretrained
    would build a 3-label head: write the 2 labels down."""
    path = os.path.join(d, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["id2label"] = {"0": "LABEL_0", "1": "LABEL_1"}
    cfg["label2id"] = {"LABEL_0": 0, "LABEL_1": 1}
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def kwargs(x):
    xt = torch.from_numpy(x).long()
    return dict(input_ids=xt[:, 0], attention_mask=xt[:, 2])


def check_export(d):
    x, _ = batch()
    print_logits_diff(BartForSequenceClassification, "hf_bart_tiny", d, lambda m: m(**kwargs(x)).logits)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--check-export":
        return check_export(sys.argv[2])
    out_root = out_dir()
    m = model()
    d = save_pretrained(m, os.path.join(out_root, "hf_bart_tiny"))
    bart_tokenizer(d, out_root)
    label_config(d)
    x, y = batch()
    yt = torch.from_numpy(y).long()
    out = m(**kwargs(x), labels=yt)
    out.loss.backward()
    names, decay = write_cls_batch(os.path.join(out_root, "hf_bart_tiny_batch.safetensors"), m, x, y, out,
                                   lambda: m(**kwargs(x), labels=yt).loss)
    print("loss", out.loss.item(), "params", len(names), "decay", len(decay))


if __name__ == "__main__":
    main()
