#!/usr/bin/python3
"""How much compute this machine's cores add up to: single-threaded sgemm
(torch.mm, 1024x1024, one torch thread) in 1 process, then in one process
per core at once, GFLOP/s each and in total. On a machine whose cores are
hyperthreads of one physical core (or share its vector units), the total
stays flat, and so does any compute-bound data-parallel throughput run on it.
A scalar loop is measured the same way for contrast.

    /usr/bin/python3 bench/step/compute_scaling.py [--seconds 2] [--json]
"""
import argparse
import json
import multiprocessing as mp
import os
import sys
import time


def sgemm(seconds, queue):
    import torch
    torch.set_num_threads(1)
    a = torch.randn(1024, 1024)
    b = torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        a @ b
        n += 1
    queue.put(n * 2 * 1024 ** 3 / (time.perf_counter() - start) / 1e9)


def scalar(seconds, queue):
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        n += 1
    queue.put(n / (time.perf_counter() - start) / 1e6)


def run(fn, procs, seconds):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    workers = [ctx.Process(target=fn, args=(seconds, queue)) for _ in range(procs)]
    for w in workers:
        w.start()
    rates = [queue.get(timeout=60 + seconds) for _ in workers]
    for w in workers:
        w.join(timeout=30)
    return sum(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    result = {"cores": cores}
    for name, fn in (("sgemm_GFLOPs", sgemm), ("scalar_Mloops", scalar)):
        one = run(fn, 1, args.seconds)
        all_cores = run(fn, cores, args.seconds)
        result[name] = {"one_process": one, "all_cores_total": all_cores,
                        "scaling": all_cores / one}
    if args.json:
        print(json.dumps(result))
    else:
        for name in ("sgemm_GFLOPs", "scalar_Mloops"):
            r = result[name]
            print("%s: 1 process %.1f, %d processes %.1f in total (%.2fx)" % (
                name, r["one_process"], cores, r["all_cores_total"], r["scaling"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
