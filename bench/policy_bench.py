#!/usr/bin/env python3
"""Assignment policies and the broadcast overlap, measured (issue 19):

  - the comm + optimizer path alone (worker/hook's hook_benchmark, ranks as
    threads, Gloo): BALANCED against SHARDED at 16M and 64M parameters, in
    interleaved rounds, each round's median step time, the owned-bytes
    imbalance and the ratio;
  - whole jobs through `pshardctl local` and job_probe: the demo's model
    (examples/mlp_adam_2workers.json) under BALANCED and SHARDED, and the
    end-to-end mlp (512-1024-1024-512) with and without
    overlap_param_broadcast.

    bazel build //cli:pshardctl //server:pshard-coordinator \\
        //worker:pshard-worker //bench/step:job_probe //worker/hook:hook_benchmark
    bench/policy_bench.py [--rounds 3] [--out DIR]

Prints a Markdown table per part (also written to DIR/results.md). Runs
alternate between the two sides of each comparison, so a machine that gets
busier during the run disturbs both alike; read the ratios.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_benchmarks as rb  # noqa: E402  (the shared runner and probes)

MiB = 1 << 20


def hook_rows(runner, bins, rounds):
    rows = []
    for world, params, bucket in ((2, 16 * MiB, 25), (2, 64 * MiB, 25),
                                  (3, 16 * MiB, 25)):
        medians = {"balanced": [], "sharded": []}
        last = {}
        for r in range(rounds):
            for policy in ("balanced", "sharded"):
                name = "hook-%dw-%dM-%s-%d" % (world, params // MiB, policy, r)
                cmd = [bins["hook_benchmark"], "--world=%d" % world,
                       "--params=%d" % params, "--bucket_mb=%g" % bucket,
                       "--policy=%s" % policy, "--steps=10"]
                res = rb.run_step_timer(runner, name, cmd, 600)
                if not res.get("ok"):
                    continue
                medians[policy].append(res["step_time_ms_median"])
                last[policy] = res
        if not medians["balanced"] or not medians["sharded"]:
            continue
        b, s = statistics.median(medians["balanced"]), statistics.median(medians["sharded"])
        rows.append({
            "world": world, "params": params, "bucket_mb": bucket,
            "balanced_ms": b, "sharded_ms": s, "ratio": s / b,
            "balanced_rounds": medians["balanced"], "sharded_rounds": medians["sharded"],
            "balanced_imbalance": last["balanced"]["imbalance"],
            "sharded_imbalance": last["sharded"]["imbalance"],
            "command": last["sharded"]["command"],
        })
    return rows


def demo_spec(name, policy, overlap, steps):
    with open(os.path.join(rb.ROOT, "examples", "mlp_adam_2workers.json")) as f:
        spec = json.load(f)
    spec.update({"name": name, "assignment_policy": policy, "steps": steps,
                 "progress_every": 1, "overlap_param_broadcast": overlap})
    return spec


def mlp_spec(name, policy, overlap, steps):
    spec = rb.mlp_spec(name, 2, [512, 1024, 1024, 512], 128, 2, steps)
    spec.update({"assignment_policy": policy, "overlap_param_broadcast": overlap})
    return spec


def job_rows(runner, bins, rounds):
    warmup, steps = 5, 40
    configs = [
        ("demo", demo_spec, "BALANCED", False),
        ("demo", demo_spec, "SHARDED", False),
        ("mlp", mlp_spec, "BALANCED", False),
        ("mlp", mlp_spec, "BALANCED", True),
        ("mlp", mlp_spec, "SHARDED", False),
        ("mlp", mlp_spec, "SHARDED", True),
    ]
    times = {c: [] for c in configs}
    imbalance, commands = {}, {}
    for r in range(rounds):
        for c in configs:
            model, make, policy, overlap = c
            name = "%s-%s%s-%d" % (model, policy.lower(), "-overlap" if overlap else "", r)
            res = rb.run_pshard(runner, bins, name, make(name, policy, overlap, warmup + steps),
                                2, warmup, 300)
            if res.get("ok") and res["step_time_s"]:
                times[c].append(res["step_time_s"] * 1e3)
                a = res.get("assignment") or {}
                imbalance[c] = a.get("imbalance")
                commands[c] = res["command"]
    rows = []
    for c in configs:
        if times[c]:
            rows.append({"model": c[0], "policy": c[2], "overlap": c[3],
                         "median_ms": statistics.median(times[c]), "rounds": times[c],
                         "imbalance": imbalance.get(c), "command": commands[c]})
    return rows


def markdown(hook, jobs):
    out = ["**The comm + optimizer path alone (hook_benchmark, Adam, reduce+bcast, "
           "25 MB buckets, median of each round's median over 10 steps)**", "",
           "| workers | params | BALANCED ms/step (imbalance) | SHARDED ms/step (imbalance) "
           "| SHARDED / BALANCED | rounds (B; S) |", "|---|---|---|---|---|---|"]
    for r in hook:
        out.append("| %d | %dM | %.1f (%.3f) | %.1f (%.4f) | %.2f | %s; %s |" % (
            r["world"], r["params"] // MiB, r["balanced_ms"], r["balanced_imbalance"],
            r["sharded_ms"], r["sharded_imbalance"], r["ratio"],
            ", ".join("%.1f" % t for t in r["balanced_rounds"]),
            ", ".join("%.1f" % t for t in r["sharded_rounds"])))
    out += ["", "**Whole jobs, 2 workers (pshardctl local + job_probe, median step "
            "over 40 steps after 5 warm-up, median over rounds)**", "",
            "| model | policy | overlap_param_broadcast | median ms/step | imbalance | rounds |",
            "|---|---|---|---|---|---|"]
    for r in jobs:
        out.append("| %s | %s | %s | %.2f | %s | %s |" % (
            r["model"], r["policy"], "on" if r["overlap"] else "off", r["median_ms"],
            "%.4f" % r["imbalance"] if r["imbalance"] is not None else "-",
            ", ".join("%.2f" % t for t in r["rounds"])))
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default="")
    parser.add_argument("--only", default="hook,jobs")
    args = parser.parse_args()
    bins = {"pshardctl": rb.find_binary("cli/pshardctl"),
            "job_probe": rb.find_binary("bench/step/job_probe"),
            "hook_benchmark": rb.find_binary("worker/hook/hook_benchmark")}
    out_dir = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="pshard-policy-")
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "commands.log"), "w") as log:
        runner = rb.Runner(out_dir, log)
        hook = hook_rows(runner, bins, args.rounds) if "hook" in args.only else []
        jobs = job_rows(runner, bins, args.rounds) if "jobs" in args.only else []
        md = markdown(hook, jobs)
        rb.write(os.path.join(out_dir, "results.md"), md)
        rb.write(os.path.join(out_dir, "results.json"),
                 json.dumps({"hook": hook, "jobs": jobs,
                             "load_end": "%.2f %.2f %.2f" % os.getloadavg()}, indent=1))
        runner.echo("\n" + md)
        if runner.failures:
            runner.echo("failures:\n  " + "\n  ".join(runner.failures))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
