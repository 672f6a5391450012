#!/usr/bin/python3
"""Step time of the ZeroHook alone (worker/hook:hook_benchmark) on each
transport, for one or more builds of it side by side, against the torch seed
peer, on a shared machine.

Every configuration runs once per round, all configurations interleaved, for
several rounds; the table gives each configuration's median over the rounds
(each run's own figure is already the median of its steps) and its ratio to
the seed's median at the same size. Interleaving matters on a machine other
people's builds share: a burst of load then slows one round of everything
rather than one configuration.

    bazel build //worker/hook:hook_benchmark
    cp bazel-bin/worker/hook/hook_benchmark /tmp/hook_new    # and a baseline
    /usr/bin/python3 bench/step/transport_ab.py \\
        --bin base=/tmp/hook_base --bin new=/tmp/hook_new \\
        --params 16M,64M --buckets 8,25 --transports tcp,shm --rounds 5

`tcp` is loopback TCP only (--shared_memory=false, the transport the torch
peers use and the only one between hosts); `shm` lets same-host ranks use
shared-memory rings. Prints `$ command` for every run, then a Markdown table.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

PARAMS = {"16M": 16 << 20, "64M": 64 << 20}


def run(cmd, timeout):
    print("$", cmd, flush=True)
    try:
        out = subprocess.run(shlex.split(cmd), capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        print("  timed out", file=sys.stderr)
        return None
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)["step_time_ms_median"]
    print("  failed:", out.stderr[-2000:], file=sys.stderr)
    return None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", action="append", required=True,
                   help="NAME=PATH of a hook_benchmark build (repeatable)")
    p.add_argument("--params", default="16M", help="16M and/or 64M")
    p.add_argument("--buckets", default="25", help="bucket caps in MiB")
    p.add_argument("--transports", default="tcp,shm")
    p.add_argument("--mode", default="reduce_broadcast")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no_seed", action="store_true",
                   help="skip the torch seed peer")
    p.add_argument("--timeout", type=int, default=600)
    a = p.parse_args()
    bins = []
    for spec in a.bin:
        name, sep, path = spec.partition("=")
        if not sep or not os.access(path, os.X_OK):
            p.error(f"--bin {spec}: want NAME=PATH of an executable")
        bins.append((name, path))
    for size in a.params.split(","):
        if size not in PARAMS:
            p.error(f"--params {size}: want one of {sorted(PARAMS)}")
    here = os.path.dirname(os.path.abspath(__file__))
    peers = os.path.join(here, "..", "peers", "torch_peers.py")
    results = {}
    print("load average at start:", os.getloadavg(), flush=True)
    for rnd in range(a.rounds):
        for size in a.params.split(","):
            for bucket in a.buckets.split(","):
                runs = []
                for transport in a.transports.split(","):
                    shm = "true" if transport == "shm" else "false"
                    for name, path in bins:
                        runs.append(((size, bucket, name, transport),
                                     f"{path} --world=2 --params={PARAMS[size]}"
                                     f" --bucket_mb={bucket} --mode={a.mode}"
                                     f" --shared_memory={shm}"
                                     f" --steps={a.steps}"))
                if not a.no_seed:
                    runs.append(((size, bucket, "torch seed", "tcp"),
                                 f"/usr/bin/python3 {os.path.normpath(peers)} "
                                 f"seed --world 2 --params {size} --bucket_mb"
                                 f" {bucket} --steps {a.steps}"))
                for key, cmd in runs:
                    ms = run(cmd, a.timeout)
                    if ms is not None:
                        results.setdefault(key, []).append(ms)
        print(f"round {rnd + 1}/{a.rounds} done; load average",
              os.getloadavg(), flush=True)
    print()
    print(f"| params | bucket | build | transport | median ms/step "
          f"({a.mode}) | runs | vs seed |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(results):
        size, bucket, name, transport = key
        runs = results[key]
        median = statistics.median(runs)
        seed = results.get((size, bucket, "torch seed", "tcp"))
        ratio = (f"{median / statistics.median(seed):.2f}"
                 if seed and name != "torch seed" else "-")
        print(f"| {size} | {bucket} MB | {name} | {transport} | {median:.1f} |"
              f" {len(runs)} | {ratio} |")


if __name__ == "__main__":
    main()
