#!/usr/bin/python3
"""Runs optimizer_bench and torch_adam.py and prints one table with ratios.

    bazel build -c opt //bench/optimizer:optimizer_bench
    /usr/bin/python3 bench/optimizer/report.py [--bench bazel-bin/bench/optimizer/optimizer_bench]

For each size: GB/s of state touched by every kernel (best of the
repetitions, as STREAM reports) and its ratio to memcpy measured in the same
run; then torch 1.13's CPU Adam against its own tensor copy.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run_bench(binary, repetitions, min_time, size_filter):
    cmd = [binary, "--benchmark_format=json",
           "--benchmark_repetitions=%d" % repetitions,
           "--benchmark_min_time=%g" % min_time,
           # Interleave the repetitions of all benchmarks, so that load from
           # other processes hits the kernels and the baselines alike.
           "--benchmark_enable_random_interleaving=true"]
    if size_filter:
        cmd.append("--benchmark_filter=%s" % size_filter)
    print("$ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    best = {}  # (name, size, threads) -> best GB/s
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        m = re.match(r"BM_(\w+)/(\d+)(?:/(\d+))?/real_time", b["name"])
        if not m:
            continue
        key = (m.group(1), int(m.group(2)), int(m.group(3) or 1))
        best[key] = max(best.get(key, 0.0), b["GB/s"] / 1.0)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bench", default="bazel-bin/bench/optimizer/optimizer_bench")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--min_time", type=float, default=0.5)
    parser.add_argument("--filter", default="", help="benchmark_filter, e.g. /16777216")
    parser.add_argument("--no_torch", action="store_true")
    args = parser.parse_args()

    best = run_bench(args.bench, args.repetitions, args.min_time, args.filter)
    sizes = sorted({k[1] for k in best})
    for size in sizes:
        base = best.get(("Memcpy", size, 1))
        print("\n%d elements (%.0f MiB per array)" % (size, size * 4 / 2**20))
        print("%-36s %8s %10s" % ("benchmark", "GB/s", "vs memcpy"))
        for (name, s, threads), gbs in sorted(best.items(), key=lambda kv: kv[0]):
            if s != size:
                continue
            label = name if threads == 1 else "%s (%d threads)" % (name, threads)
            ratio = "%9.0f%%" % (100 * gbs / base) if base else ""
            print("%-36s %8.2f %s" % (label, gbs, ratio))

    if not args.no_torch:
        cmd = [sys.executable, os.path.join(HERE, "torch_adam.py"), "--json"]
        print("$ " + " ".join(cmd), file=sys.stderr)
        rows = json.loads(subprocess.run(cmd, check=True, capture_output=True,
                                         text=True).stdout)
        print("\ntorch %s CPU Adam, %d elements" % (rows["torch"], rows["rows"][0]["numel"]))
        print("%-8s %-8s %10s %10s %9s" % ("threads", "foreach", "copy GB/s", "adam GB/s", "vs copy"))
        for r in rows["rows"]:
            print("%-8d %-8s %10.2f %10.2f %8.0f%%" % (
                r["threads"], r["foreach"], r["copy_GBps"], r["adam_GBps"], 100 * r["ratio"]))


if __name__ == "__main__":
    main()
