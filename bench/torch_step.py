"""The timed training loop of the PyTorch step benchmarks (torch_gpt2_step.py,
torch_bert_step.py): warm-up steps, then per step forward + loss, backward,
optimizer.step + zero_grad(set_to_none=True), each phase timed with
time.perf_counter; and the text summary they print."""
import math
import statistics
import sys
import time

WARMUP = 2


def timed_steps(name, loss_fn, opt, steps, warmup=WARMUP, sync=None):
    """warmup + steps steps of loss_fn() (forward and loss, under whatever
    autocast it enters), backward and opt; the medians over the timed steps
    (median_s, min_s, fwd_s, bwd_s, opt_s) and the first and last losses, or
    None (with a message) when the last loss is not finite. sync (a GPU's
    torch.cuda.synchronize) is called before each time is taken, so that
    each phase ends when the device has done it."""
    times, fwd, bwd, optt = [], [], [], []
    first = last = None

    def now():
        if sync is not None:
            sync()
        return time.perf_counter()

    for s in range(warmup + steps):
        t0 = now()
        loss = loss_fn()
        t1 = now()
        loss.backward()
        t2 = now()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t3 = now()
        last = loss.item()
        if first is None:
            first = last
        if s >= warmup:
            times.append(t3 - t0)
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            optt.append(t3 - t2)
    if not math.isfinite(last):
        print(f"{name}: loss is not finite ({last})", file=sys.stderr)
        return None
    return {"median_s": statistics.median(times), "min_s": min(times), "fwd_s": statistics.median(fwd),
            "bwd_s": statistics.median(bwd), "opt_s": statistics.median(optt), "loss_first": first,
            "loss_last": last}


def print_summary(res):
    """The lines under a benchmark's title: step, phases, losses."""
    print(f"  step median {1e3 * res['median_s']:8.1f} ms   min {1e3 * res['min_s']:8.1f} ms   "
          f"{res['tokens_per_s']:.0f} tokens/s")
    print(f"  forward+loss {1e3 * res['fwd_s']:6.1f} ms   backward {1e3 * res['bwd_s']:6.1f} ms   "
          f"optim+zero {1e3 * res['opt_s']:6.1f} ms (medians)")
    print(f"  loss {res['loss_first']:.4f} -> {res['loss_last']:.4f}")
