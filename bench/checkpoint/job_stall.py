#!/usr/bin/python3
"""The stall checkpoints add to a real job: the same `synthetic` job (Adam,
N CPU workers on loopback, pshardctl local) with and without a checkpoint
every K steps, interleaved, each followed by bench/step's job_probe.

    bazel build //bench:benchmarks
    /usr/bin/python3 bench/checkpoint/job_stall.py --params 16M,64M --world 2

For each run the probe records when each step was first seen; the gap
between consecutive steps is the step's wall time as training sees it
(whatever runs between the steps included). A checkpoint after step s
snapshots rank state before step s+1 starts, then writes in the
background, so the stall shows in the gap of step s+1:

  stall = median gap of the steps just after a checkpoint
          - median gap of every step of the run without checkpoints

and `cost/step` = (mean gap with checkpoints) / (mean gap without) - 1:
all of it, background writing competing for the cores and the disk
included. Numbers are printed, never asserted; the results also go to
<out>/job_stall.json. Exit status 1 when a run failed.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import run_benchmarks as rb  # noqa: E402  (bench/run_benchmarks.py)


def gaps(out_dir, name, warmup):
    """{step: seconds since the previous step was first seen}, after warmup."""
    with open(os.path.join(out_dir, "logs", name + ".probe.out")) as f:
        probe = json.load(f)
    samples = [dict(zip(probe["columns"], row)) for row in probe["samples"]]
    out = {}
    for prev, cur in zip(samples, samples[1:]):
        if cur["step"] == prev["step"] + 1 and cur["step"] > warmup:
            out[cur["step"]] = cur["seen_s"] - prev["seen_s"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--params", default="16M,64M")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--bucket_mb", type=float, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=5, help="checkpoint every K steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved pairs of runs")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    if args.every < 1 or args.steps <= args.every or args.warmup < 1:
        parser.error("need --every >= 1, --steps > --every, --warmup >= 1")
    params = [rb.parse_count(p) for p in args.params.split(",") if p]
    bins = {"pshardctl": rb.find_binary("cli/pshardctl"),
            "job_probe": rb.find_binary("bench/step/job_probe")}
    out_dir = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(prefix="pshard-stall-")
    os.makedirs(out_dir, exist_ok=True)
    timeout = 600
    rows, failed = [], False
    with open(os.path.join(out_dir, "commands.log"), "w") as log:
        runner = rb.Runner(out_dir, log)
        runner.echo("machine: %s" % json.dumps(rb.machine()))
        for n in params:
            for rnd in range(args.rounds):
                measured = {}
                for with_ckpt in (False, True):
                    name = "stall-%s-%dw-%s-r%d" % (rb.fmt_count(n), args.world,
                                                   "ckpt" if with_ckpt else "base", rnd)
                    spec = rb.synthetic_spec(name, args.world, n, args.bucket_mb,
                                             "REDUCE_BROADCAST", args.steps)
                    ckpt_dir = os.path.join(out_dir, "ckpt", name)
                    if with_ckpt:
                        spec["checkpoint"] = {"dir": ckpt_dir, "every_steps": args.every,
                                              "keep_last": 1}
                    r = rb.run_pshard(runner, bins, name, spec, args.world, args.warmup, timeout)
                    rb.shutil.rmtree(ckpt_dir, ignore_errors=True)
                    if not r or not r.get("ok"):
                        failed = True
                        break
                    measured[with_ckpt] = gaps(out_dir, name, args.warmup)
                if len(measured) < 2:
                    continue
                base = list(measured[False].values())
                after = [g for s, g in measured[True].items() if (s - 1) % args.every == 0]
                rest = [g for s, g in measured[True].items() if (s - 1) % args.every != 0]
                if not base or not after or not rest:
                    runner.fail("stall-%s" % rb.fmt_count(n), "the probe missed steps")
                    failed = True
                    continue
                step = statistics.median(base)
                stall = statistics.median(after) - step
                row = {
                    "params": n, "world": args.world, "round": rnd,
                    "checkpoint_bytes": n * 12,
                    "step_s": step,
                    "after_checkpoint_s": statistics.median(after),
                    "other_steps_s": statistics.median(rest),
                    "stall_s": stall,
                    "stall_per_step": stall / step,
                    "cost_per_step": statistics.mean(list(measured[True].values()))
                    / statistics.mean(base) - 1,
                    "checkpoints": len(after),
                }
                rows.append(row)
                runner.echo("  %s, round %d: step %s ms; after a checkpoint %s ms (stall %s ms, "
                            "%.2f of a step); other steps %s ms; cost %+.0f%% per step" % (
                                rb.fmt_count(n), rnd, rb.fmt_ms(step),
                                rb.fmt_ms(row["after_checkpoint_s"]), rb.fmt_ms(stall),
                                row["stall_per_step"], rb.fmt_ms(row["other_steps_s"]),
                                100 * row["cost_per_step"]))
        rb.write(os.path.join(out_dir, "job_stall.json"), json.dumps(rows, indent=1) + "\n")
        runner.echo("\n| params | world | round | step (no checkpoints) | step after a checkpoint "
                    "| stall | stall / step | other steps | cost per step |")
        runner.echo("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            runner.echo("| %s | %d | %d | %s ms | %s ms | %s ms | **%.2f** | %s ms | %+.0f%% |" % (
                rb.fmt_count(r["params"]), r["world"], r["round"], rb.fmt_ms(r["step_s"]),
                rb.fmt_ms(r["after_checkpoint_s"]), rb.fmt_ms(r["stall_s"]),
                r["stall_per_step"], rb.fmt_ms(r["other_steps_s"]), 100 * r["cost_per_step"]))
        runner.echo("results: %s" % os.path.join(out_dir, "job_stall.json"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
