"""PyTorch's side of bench/run_allreduce.sh: torch.distributed all_reduce on
the Gloo backend (CPU tensors), the sizes and method of bench/comm_allreduce.c:
two warm-up calls, then timed calls after a barrier, a call's time the
slowest rank's, the median per size. Started with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (init_method env://).

    python bench/torch_allreduce.py [--reps R] [--json FILE]
"""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json")
    a = ap.parse_args()
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    res = {"backend": "gloo", "ranks": size, "torch": torch.__version__}
    if rank == 0:
        print(f"gloo (PyTorch {torch.__version__}), {size} ranks: all-reduce of float32, median of timed calls")
    for nbytes in (4 << 10, 256 << 10, 4 << 20, 64 << 20):
        n = nbytes // 4
        reps = (a.reps + 3) // 4 if nbytes >= (4 << 20) else a.reps
        base = (torch.arange(n) & 7).float()
        times = []
        for it in range(-2, reps):
            buf = base + (rank + 1)
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            dt = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if it >= 0:
                times.append(dt.item())
            want = base * size + size * (size + 1) // 2
            assert torch.equal(buf, want), "wrong sums"
        med = statistics.median(times)
        if rank == 0:
            print(f"  {nbytes:9d} bytes: {med * 1e3:9.3f} ms  {nbytes / med / 1e9:7.2f} GB/s (bytes / time)")
        res[f"s_{nbytes}"] = med
    if rank == 0 and a.json:
        with open(a.json, "w") as f:
            f.write(json.dumps(res) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
