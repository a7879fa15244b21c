#!/usr/bin/env python3
"""MiniLM sentiment fine-tuning in transformers + PyTorch (the reference for configs/rt_minilm.yml).

The recipe of `utrain train configs/rt_minilm.yml` + `utrain test`, written as
an explicit loop that does what the Hugging Face Trainer does with these
arguments (the Trainer itself is not used, so that the clock covers the
training steps only and the thread count is ours):

  model       AutoModelForSequenceClassification.from_pretrained(DIR, num_labels=2)
              after torch.manual_seed(--seed, default 42) (the new classifier's init), as
              Trainer's set_seed + model_init
  data        the TSV files (sentence<TAB>label, one header line), tokenized by
              AutoTokenizer.from_pretrained(DIR) with truncation to max_length
              64; each batch padded to its longest row (DataCollatorWithPadding)
  sampler     a new random permutation of the training set every epoch from a
              generator seeded with --seed (Trainer's RandomSampler); the last
              batch is kept (dataloader_drop_last False)
  optimizer   torch.optim.AdamW lr 5e-5, betas (0.9, 0.999), eps 1e-8, weight
              decay 0.01 on every parameter except biases and LayerNorm weights
              (Trainer.get_decay_parameter_names)
  schedule    linear decay from 5e-5 to 0 over epochs x steps per epoch, no
              warmup (get_linear_schedule_with_warmup), stepped after each step
  epochs      2, batch 32, dropout on (model.train()), fp32
  evaluation  dev accuracy after each epoch; the best epoch's weights
              (load_best_model_at_end on accuracy) give the dev and test
              accuracies at the end

Times: each epoch's training loop (batches already tokenized, as utrain's
loader also tokenizes once up front), measured with time.perf_counter; the
evaluations are timed apart.

    torch_minilm.py [--model DIR] [--data DIR] [--threads N] [--epochs N]
                    [--max-steps N] [--no-test] [--device cpu|cuda] [--json]

--device cuda runs on the GPU (batches moved there as they are made; the
epoch's clock stops after the device has finished).

--max-steps N stops after N steps (a timing probe); --no-test leaves out every
evaluation (the accuracies are then null).
"""
import argparse
import copy
import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

BATCH, MAX_LEN, LR, WD = 32, 64, 5e-5, 0.01


def read_tsv(path):
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        next(f)  # header
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            text, label = line.rsplit("\t", 1)
            texts.append(text)
            labels.append(int(label))
    return texts, labels


def encode(tok, path):
    texts, labels = read_tsv(path)
    enc = tok(texts, truncation=True, max_length=MAX_LEN)
    return [(enc["input_ids"][i], enc["token_type_ids"][i], labels[i]) for i in range(len(texts))]


DEVICE = torch.device("cpu")


def collate(rows, pad_id):
    T = max(len(r[0]) for r in rows)
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)
    types = torch.zeros((len(rows), T), dtype=torch.long)
    mask = torch.zeros((len(rows), T), dtype=torch.long)
    for i, (a, b, _) in enumerate(rows):
        ids[i, : len(a)] = torch.tensor(a)
        types[i, : len(b)] = torch.tensor(b)
        mask[i, : len(a)] = 1
    y = torch.tensor([r[2] for r in rows])
    x = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    return {k: v.to(DEVICE) for k, v in x.items()}, y.to(DEVICE)


def decay_groups(model):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Trainer: no decay for biases and for every LayerNorm's parameters
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}]


@torch.no_grad()
def accuracy(model, rows, pad_id):
    model.eval()
    right = 0
    for i in range(0, len(rows), BATCH):
        x, y = collate(rows[i : i + BATCH], pad_id)
        right += (model(**x).logits.argmax(-1) == y).sum().item()
    model.train()
    return right / len(rows)


def train(model, train_rows, dev_rows, pad_id, a):
    opt = torch.optim.AdamW(decay_groups(model), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    per_epoch = (len(train_rows) + BATCH - 1) // BATCH
    total = a.epochs * per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, (total - s) / total))
    gen = torch.Generator().manual_seed(a.seed)
    res = {"epoch_s": [], "eval_s": [], "dev_accuracy": [], "loss_last": None, "steps": 0}
    best, best_state = -1.0, None
    model.train()
    for _ in range(a.epochs):
        order = torch.randperm(len(train_rows), generator=gen).tolist()
        t0 = time.perf_counter()
        for s in range(per_epoch):
            if a.max_steps and res["steps"] >= a.max_steps:
                break
            x, y = collate([train_rows[j] for j in order[s * BATCH : (s + 1) * BATCH]], pad_id)
            loss = torch.nn.functional.cross_entropy(model(**x).logits, y)
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            res["steps"] += 1
            res["loss_last"] = loss.item()
        if DEVICE.type == "cuda":
            torch.cuda.synchronize()
        res["epoch_s"].append(time.perf_counter() - t0)
        if a.no_test:
            continue
        t1 = time.perf_counter()
        acc = accuracy(model, dev_rows, pad_id)
        res["eval_s"].append(time.perf_counter() - t1)
        res["dev_accuracy"].append(acc)
        if acc > best:
            best, best_state = acc, copy.deepcopy(model.state_dict())
    if best_state is not None:
        model.load_state_dict(best_state)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="data/pretrained/all-MiniLM-L6-v2")
    ap.add_argument("--data", default="data/rt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--max-steps", type=int, default=0)
    ap.add_argument("--no-test", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--seed", type=int, default=42, help="the run's seed (utrain's seed: key)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    global DEVICE
    DEVICE = torch.device(a.device)
    if a.threads < 1 or a.epochs < 1 or a.max_steps < 0:
        ap.error("--threads and --epochs must be >= 1, --max-steps >= 0")
    torch.set_num_threads(a.threads)
    tok = AutoTokenizer.from_pretrained(a.model)
    rows = {s: encode(tok, f"{a.data}/{s}.tsv") for s in ("train", "dev", "test")}
    torch.manual_seed(a.seed)
    model = AutoModelForSequenceClassification.from_pretrained(a.model, num_labels=2).to(DEVICE)
    res = train(model, rows["train"], rows["dev"], tok.pad_token_id, a)
    res.update(impl="torch", torch=torch.__version__, threads=torch.get_num_threads(),
               epochs=a.epochs, seed=a.seed, epoch_s_median=statistics.median(res["epoch_s"]),
               dev_best=None if a.no_test else accuracy(model, rows["dev"], tok.pad_token_id),
               test_accuracy=None if a.no_test else accuracy(model, rows["test"], tok.pad_token_id))
    if a.json:
        print(json.dumps(res))
    else:
        print(f"torch {torch.__version__} MiniLM on Rotten Tomatoes, threads {res['threads']}, "
              f"{res['steps']} steps")
        for e, t in enumerate(res["epoch_s"]):
            acc = res["dev_accuracy"][e] if e < len(res["dev_accuracy"]) else None
            print(f"  epoch {e + 1}: train {t:7.1f} s" + (f"   dev accuracy {acc:.4f}" if acc is not None else ""))
        if not a.no_test:
            print(f"  best dev accuracy {res['dev_best']:.4f}   test accuracy {res['test_accuracy']:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
