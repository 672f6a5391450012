#!/usr/bin/python3
"""PyTorch 1.13's CPU Adam, measured the way optimizer_bench measures pshard's.

GB/s of state touched = 28 bytes per element (read p, g, exp_avg, exp_avg_sq;
write p, exp_avg, exp_avg_sq) x elements / step time, against a tensor copy
(dst.copy_(src), 8 bytes per element) measured in the same process with the
same thread count. Runs with one thread, torch's default and one per core, each with
foreach=False (1.13's default) and foreach=True; times are the best of the runs.

    /usr/bin/python3 bench/optimizer/torch_adam.py [--numel 16777216] [--json]
"""
import argparse
import json
import os
import sys
import time

import torch


def best_time(fn, min_time, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    while time.perf_counter() - start < min_time or len(times) < 3:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    # Best of the runs, as STREAM reports: the machine's capability, least
    # disturbed by other processes.
    return min(times)


def measure(numel, threads, foreach, min_time):
    torch.set_num_threads(threads)
    src = torch.full((numel,), 1.0)
    dst = torch.empty(numel)
    copy_s = best_time(lambda: dst.copy_(src), min_time)

    p = torch.nn.Parameter(torch.full((numel,), 1.0))
    p.grad = torch.full((numel,), 0.01)
    opt = torch.optim.Adam([p], lr=1e-3, foreach=foreach)
    adam_s = best_time(opt.step, min_time)
    copy_gbs = 8 * numel / copy_s / 1e9
    adam_gbs = 28 * numel / adam_s / 1e9
    return {
        "threads": threads,
        "foreach": foreach,
        "numel": numel,
        "copy_ms": copy_s * 1e3,
        "copy_GBps": copy_gbs,
        "adam_ms": adam_s * 1e3,
        "adam_GBps": adam_gbs,
        "ratio": adam_gbs / copy_gbs,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--numel", type=int, default=1 << 24)
    parser.add_argument("--min_time", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    rows = []
    for threads in sorted({1, default_threads, os.cpu_count() or 1}):
        for foreach in (False, True):
            rows.append(measure(args.numel, threads, foreach, args.min_time))
    if args.json:
        json.dump({"torch": torch.__version__, "rows": rows}, sys.stdout, indent=1)
        print()
        return
    print("torch %s CPU Adam, %d elements" % (torch.__version__, args.numel))
    print("%-8s %-8s %10s %10s %10s %10s %7s" % (
        "threads", "foreach", "copy ms", "copy GB/s", "adam ms", "adam GB/s", "ratio"))
    for r in rows:
        print("%-8d %-8s %10.2f %10.2f %10.2f %10.2f %6.0f%%" % (
            r["threads"], r["foreach"], r["copy_ms"], r["copy_GBps"],
            r["adam_ms"], r["adam_GBps"], 100 * r["ratio"]))


if __name__ == "__main__":
    main()
