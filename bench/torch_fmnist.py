#!/usr/bin/env python3
"""Fashion-MNIST CNN, one epoch, in PyTorch: the reference for utrain's
configs/fmnist_cnn.yml (src/models/cnn.c, the classic PyTorch MNIST example).

    python3 bench/torch_fmnist.py [--threads N] [--seed S] [--data DIR] [--device cpu|cuda] [--json]

Network: conv1 1->32 3x3, relu, conv2 32->64 3x3, relu, max_pool 2,
dropout 0.25, flatten, fc1 9216->128, relu, dropout 0.5, fc2 128->10,
log_softmax, nll_loss. Data as utrain's idx_images dataset: x/255 normalised
with mean 0.2860, std 0.3530; train on the first 55,000 training images (the
last 5,000 are utrain's dev split and are not used here), shuffled batches of
64 from a seeded permutation, the short last batch (24 images) kept.
AdamW lr 1e-3, weight_decay 0.01 (torch defaults otherwise), one epoch.

What is timed: the epoch's training loop only -- for each of the 860 batches,
indexing the batch out of the pre-normalised in-memory tensor, forward, loss,
backward, optimizer step, zero_grad. Not timed: reading and normalising the
IDX files, building the model, and the test evaluation afterwards (t10k,
10,000 images, eval mode, no grad), which gives the test accuracy.
torchvision is not needed: the IDX .gz files are read with gzip + numpy.
--device cuda keeps the model, the data and the permutation on the GPU,
with TF32 off for cuDNN and the matrix products (PyTorch's default lets
cuDNN use TF32; utrain's float32 does not).
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530
TRAIN_N, BATCH = 55000, 64


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, prefix):
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz"))
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - MEAN) / STD
    return x.unsqueeze(1).contiguous(), torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch default)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda":
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)

    xtr, ytr = load(a.data, "train")
    xtr, ytr = xtr[:TRAIN_N].contiguous().to(dev), ytr[:TRAIN_N].contiguous().to(dev)
    xte, yte = load(a.data, "t10k")
    xte, yte = xte.to(dev), yte.to(dev)
    model = Net().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(a.seed)
    perm = torch.randperm(TRAIN_N, generator=g).to(dev)

    model.train()
    steps, loss_sum, correct = 0, 0.0, 0
    t0 = time.perf_counter()
    for i in range(0, TRAIN_N, BATCH):
        idx = perm[i:i + BATCH]
        xb, yb = xtr[idx], ytr[idx]
        out = model(xb)
        loss = F.nll_loss(out, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        steps += 1
        loss_sum += loss.item() * len(idx)
        correct += (out.argmax(1) == yb).sum().item()
    epoch_s = time.perf_counter() - t0

    model.eval()
    test_correct = 0
    with torch.no_grad():
        for i in range(0, len(xte), 1000):
            test_correct += (model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
    res = {
        "device": a.device,
        "threads": torch.get_num_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset"),
        "steps": steps,
        "epoch_s": round(epoch_s, 4),
        "samples_per_s": round(TRAIN_N / epoch_s, 2),
        "train_loss": round(loss_sum / TRAIN_N, 6),
        "train_accuracy": round(correct / TRAIN_N, 6),
        "test_accuracy": test_correct / len(xte),
        "torch": torch.__version__,
    }
    if a.json:
        print(json.dumps(res))
    else:
        print(f"PyTorch {res['torch']}, threads {res['threads']}, OMP_WAIT_POLICY {res['omp_wait_policy']}")
        print(f"epoch (training loop only, {steps} steps): {epoch_s:.2f} s, {res['samples_per_s']:.0f} samples/s")
        print(f"train loss {res['train_loss']:.4f}, train accuracy {res['train_accuracy']:.4f}")
        print(f"test accuracy (t10k): {res['test_accuracy']:.4f}")


if __name__ == "__main__":
    main()
