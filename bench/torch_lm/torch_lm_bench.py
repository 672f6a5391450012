#!/usr/bin/python3
"""The torch_lm example's model (examples/torch_lm/model.py) trained on N
ranks, one thread each, in four modes measured in the same run, interleaved
(each repeat runs every mode once, the order rotating):

  pshard    pshard.torch.ShardedOptimizer (AdamW sharded by bucket, no DDP
            wrapper), the ranks as plain processes in pshard's local mode
            (PSHARD_LOCAL_STORE: a directory rendezvous, no coordinator; the
            data path is the same as under an agent).
  pshard_bf16  the same with param_dtype and reduce_dtype bfloat16: the
            model computes in bf16, gradients travel in bf16, the owners
            step fp32 master weights (the loss in float32).
  ddp_zero  DistributedDataParallel + torch.distributed.optim.
            ZeroRedundancyOptimizer(AdamW), Gloo.
  ddp       DistributedDataParallel + torch.optim.AdamW on every rank, Gloo.

Same model, batch (model.batch: rank r's slice of a global batch drawn from
(seed, step)), optimizer (AdamW, betas (0.9, 0.95), no weight decay on biases
and LayerNorm gains), bucket cap and steps in every mode; DDP runs with
gradient_as_bucket_view=True, as pshard's gradients are bucket views.

Per run: samples/s over the timed steps (after --warmup; a barrier starts
them; the slowest rank's time counts) and every rank's peak RSS
(resource.getrusage ru_maxrss), and how far that peak is above its RSS
just before the first step (what training itself adds: gradients,
optimizer state, activations, communication buffers).
For pshard also the Python layer's own cost: the time spent in pshard's
Python code (the gradient hooks, step(), zero_grad(), report()) minus the
time inside the C library's calls, as a share of the step. The summary gives
the median over repeats and the ratio to ddp_zero.

    /usr/bin/python3 bench/torch_lm/torch_lm_bench.py            # after
        bazel build //worker/api:libpshard.so (PYTHONPATH=python is set here)
    /usr/bin/python3 bench/torch_lm/torch_lm_bench.py --quick    # a smoke run
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
MODES = ("pshard", "pshard_bf16", "ddp_zero", "ddp")
# pshard's modes: the precision ShardedOptimizer runs in (None: float32).
PSHARD_MODES = {"pshard": None, "pshard_bf16": "bfloat16"}
RANK_TIMEOUT_SECONDS = 600


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="windows per rank per step")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--bucket-cap-mb", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model, 1 repeat, few steps (a smoke run)")
    parser.add_argument("--json-out", default=None,
                        help="write every run and the summary here")
    # Internal: this process is one rank of one run.
    parser.add_argument("--as-rank", nargs=3,
                        metavar=("MODE", "RANK", "RENDEZVOUS"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.warmup = 1, 4, 2
        args.width, args.layers, args.heads, args.context = 32, 1, 2, 32
        args.batch_size, args.bucket_cap_mb = 8, 0.02
    args.modes = args.modes.split(",")
    for mode in args.modes:
        if mode not in MODES:
            parser.error(f"--modes: {mode!r} is not one of {MODES}")
    return args


class PythonLayerTimer:
    """Time spent in pshard's Python code, less the C calls it makes.

    Wraps the methods that run every step (the gradient hook's target,
    step, zero_grad, report) and the library handle that every C call goes
    through (pshard._capi.check looks functions up on it)."""

    def __init__(self):
        self.outer_s = 0.0
        self.c_s = {}
        self._depth = 0

    def install(self):
        import pshard
        import pshard.torch
        from pshard import _capi
        cls = pshard.torch.ShardedOptimizer
        for owner, name in ((cls, "_gradient_final"), (cls, "step"),
                            (cls, "zero_grad"), (pshard.Session, "report")):
            setattr(owner, name, self._timed(getattr(owner, name)))
        _capi._lib = _TimedLibrary(_capi._lib, self.c_s)

    def _timed(self, method):
        def wrapper(*args, **kwargs):
            self._depth += 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.outer_s += time.perf_counter() - start
        return wrapper

    def reset(self):
        self.outer_s = 0.0
        self.c_s.clear()

    def python_s(self):
        return self.outer_s - sum(self.c_s.values())


class _TimedLibrary:
    def __init__(self, lib, totals):
        self._lib = lib
        self._totals = totals

    def __getattr__(self, name):
        function = getattr(self._lib, name)
        totals = self._totals

        def timed(*args):
            start = time.perf_counter()
            try:
                return function(*args)
            finally:
                totals[name] = (totals.get(name, 0.0) + time.perf_counter()
                                - start)
        return timed


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mib():
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def run_rank(args):
    """One rank of one run; writes its measurements to args.result."""
    mode, rank, rendezvous = args.as_rank[0], int(args.as_rank[1]), \
        args.as_rank[2]
    timer = PythonLayerTimer() if mode in PSHARD_MODES else None
    if timer is not None:
        timer.install()
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch_lm"))
    import model as lm
    torch.manual_seed(args.seed)
    text = lm.load_corpus()
    vocabulary = lm.Vocabulary(text)
    train_ids, _ = lm.split_corpus(vocabulary.encode(text))
    del text
    model = lm.CharTransformer(len(vocabulary), context=args.context,
                               width=args.width, layers=args.layers,
                               heads=args.heads)
    report = None
    if mode in PSHARD_MODES:
        import pshard
        import pshard.torch
        session = pshard.init()
        # bf16: the model computes in bf16, gradients are reduced in bf16,
        # the owners step fp32 masters.
        dtype = PSHARD_MODES[mode] and getattr(torch, PSHARD_MODES[mode])
        optimizer = pshard.torch.ShardedOptimizer(
            model, optimizer=lm.optimizer_spec(args.lr, args.weight_decay),
            bucket_cap_mb=args.bucket_cap_mb, param_dtype=dtype,
            reduce_dtype=dtype)
        forward, barrier, report = model, session.barrier, session.report
        finish = session.close
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        dist.init_process_group("gloo", init_method="file://" + rendezvous,
                                rank=rank, world_size=args.world)
        groups = lm.torch_param_groups(model, args.weight_decay)
        forward = DistributedDataParallel(
            model, bucket_cap_mb=args.bucket_cap_mb,
            gradient_as_bucket_view=True)
        if mode == "ddp_zero":
            from torch.distributed.optim import ZeroRedundancyOptimizer
            optimizer = ZeroRedundancyOptimizer(
                groups, optimizer_class=torch.optim.AdamW, lr=args.lr,
                betas=(0.9, 0.95))
        else:
            optimizer = torch.optim.AdamW(groups, lr=args.lr,
                                          betas=(0.9, 0.95))
        barrier = dist.barrier

        def finish():
            # DDP and ZeRO keep their own references to the process group,
            # so destroy_process_group alone leaves Gloo's threads to die in
            # interpreter finalisation, where they can end in std::terminate
            # (SIGABRT, seen in CI). The result is on disk by now: leave
            # without finalisation.
            dist.destroy_process_group()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
    rss_before_mib = current_rss_mib()

    losses = []
    start = None
    for step in range(1, args.warmup + args.steps + 1):
        if step == args.warmup + 1:
            barrier()
            if timer is not None:
                timer.reset()
            start = time.perf_counter()
        inputs, targets = lm.batch(train_ids, args.seed, rank, args.world,
                                   step, args.batch_size, args.context)
        optimizer.zero_grad()
        # The loss in float32 whatever the model's dtype.
        loss = lm.next_character_loss(forward(inputs).float(), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if report is not None:
            report(step=step, loss=losses[-1], samples=len(inputs))
    elapsed = time.perf_counter() - start
    result = {"mode": mode, "rank": rank, "elapsed_s": elapsed,
              "peak_rss_mib": peak_rss_mib(),
              "rss_before_first_step_mib": rss_before_mib,
              "loss_first": losses[0], "loss_last": losses[-1]}
    if timer is not None:
        result["python_layer_s"] = timer.python_s()
        result["c_calls_s"] = dict(timer.c_s)
    barrier()
    with open(args.result, "w") as f:
        json.dump(result, f)
    finish()
    return 0


def run_once(mode, args, own_argv):
    """One run of `mode` on args.world ranks; its per-rank results."""
    tmp = tempfile.mkdtemp(prefix=f"torch_lm_bench-{mode}-")
    rendezvous = os.path.join(tmp, "store")
    if mode in PSHARD_MODES:
        os.makedirs(rendezvous)
    ranks = []
    for rank in range(args.world):
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(
                       [os.path.join(ROOT, "python"),
                        os.environ.get("PYTHONPATH", "")]))
        env.pop("PSHARD_COORDINATOR", None)
        if mode in PSHARD_MODES:
            env.update(PSHARD_LOCAL_STORE=rendezvous, RANK=str(rank),
                       WORLD_SIZE=str(args.world))
        result = os.path.join(tmp, f"rank{rank}.json")
        ranks.append((result, subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), *own_argv,
             "--as-rank", mode, str(rank), rendezvous, "--result", result],
            env=env)))
    results = []
    try:
        for rank, (result, process) in enumerate(ranks):
            code = process.wait(timeout=RANK_TIMEOUT_SECONDS)
            if code != 0:
                raise RuntimeError(f"{mode} rank {rank} exited {code}")
            with open(result) as f:
                results.append(json.load(f))
    finally:
        for _, process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


def summarise(runs, args):
    samples_per_run = args.batch_size * args.world * args.steps
    summary = {}
    for mode in args.modes:
        mine = [r for r in runs if r[0]["mode"] == mode]
        rates = [samples_per_run / max(rank["elapsed_s"] for rank in run)
                 for run in mine]
        entry = {
            "samples_per_second": statistics.median(rates),
            "samples_per_second_all": rates,
            "step_ms": 1e3 * args.batch_size * args.world /
            statistics.median(rates),
            "peak_rss_mib": [statistics.median(run[r]["peak_rss_mib"]
                                               for run in mine)
                             for r in range(args.world)],
            "rss_growth_mib": [statistics.median(
                run[r]["peak_rss_mib"] - run[r]["rss_before_first_step_mib"]
                for run in mine) for r in range(args.world)],
            "loss_last": statistics.median(
                statistics.mean(rank["loss_last"] for rank in run)
                for run in mine),
        }
        if mode in PSHARD_MODES:
            # Python layer per step as a share of the step, per rank, the
            # worst rank of each run.
            shares = [max(rank["python_layer_s"] / rank["elapsed_s"]
                          for rank in run) for run in mine]
            entry["python_layer_share"] = statistics.median(shares)
            entry["python_layer_ms_per_step"] = statistics.median(
                max(rank["python_layer_s"] for rank in run) * 1e3 /
                args.steps for run in mine)
            calls = {}
            for run in mine:
                for name, seconds in run[0]["c_calls_s"].items():
                    calls.setdefault(name, []).append(seconds * 1e3 /
                                                      args.steps)
            entry["rank0_c_ms_per_step"] = {
                name: statistics.median(v) for name, v in calls.items()}
        summary[mode] = entry
    if "ddp_zero" in summary:
        base = summary["ddp_zero"]["samples_per_second"]
        for entry in summary.values():
            entry["vs_ddp_zero"] = entry["samples_per_second"] / base
            # Against the DDP + ZeRO run of the same repeat (the modes of a
            # repeat run back to back, so they share the machine's load).
            entry["vs_ddp_zero_per_repeat"] = [
                mine / theirs for mine, theirs in zip(
                    entry["samples_per_second_all"],
                    summary["ddp_zero"]["samples_per_second_all"])]
    return summary


def print_table(summary, args):
    names = {"pshard": "pshard ShardedOptimizer",
             "pshard_bf16": "pshard ShardedOptimizer, bf16 (fp32 masters)",
             "ddp_zero": "DDP + ZeroRedundancyOptimizer",
             "ddp": "DDP + AdamW"}
    print(f"\n{args.world} ranks x 1 thread, batch {args.batch_size} x "
          f"{args.context} chars per rank, width {args.width}, "
          f"{args.layers} layers, bucket cap {args.bucket_cap_mb} MB, "
          f"{args.steps} timed steps after {args.warmup}, median of "
          f"{args.repeats}")
    print("| mode | samples/s | vs DDP+ZeRO | step ms | peak RSS per rank "
          "(MiB) | RSS growth in training (MiB) | final loss |")
    print("|---|---|---|---|---|---|---|")
    for mode, entry in summary.items():
        ratio = entry.get("vs_ddp_zero")
        print(f"| {names[mode]} | {entry['samples_per_second']:.1f} | "
              f"{'' if ratio is None else f'{ratio:.3f}'} | "
              f"{entry['step_ms']:.1f} | "
              f"{' / '.join(f'{v:.0f}' for v in entry['peak_rss_mib'])} | "
              f"{' / '.join(f'{v:.1f}' for v in entry['rss_growth_mib'])} | "
              f"{entry['loss_last']:.4f} |")
    for mode, entry in summary.items():
        if mode != "ddp_zero" and "vs_ddp_zero_per_repeat" in entry:
            ratios = entry["vs_ddp_zero_per_repeat"]
            print(f"{names[mode]} / DDP+ZeRO, repeat by repeat: " +
                  ", ".join(f"{r:.2f}" for r in ratios) +
                  f" (median {statistics.median(ratios):.2f})")
    for mode in PSHARD_MODES:
        if mode not in summary:
            continue
        entry = summary[mode]
        print(f"\n{names[mode]}'s Python layer: "
              f"{entry['python_layer_ms_per_step']:.3f} ms per step, "
              f"{100 * entry['python_layer_share']:.2f}% of a step; rank 0's "
              "C calls per step (ms): " + ", ".join(
                  f"{k} {v:.3f}" for k, v in
                  sorted(entry["rank0_c_ms_per_step"].items())))


def main(argv):
    args = parse_args(argv)
    if args.as_rank:
        return run_rank(args)
    own_argv = [a for a in argv if a != "--json-out" and
                not a.startswith("--json-out=")]
    if args.json_out and args.json_out in own_argv:
        own_argv.remove(args.json_out)
    runs = []
    started = time.time()
    for repeat in range(args.repeats):
        # Rotate the order so no mode always runs first (or last).
        order = args.modes[repeat % len(args.modes):] + \
            args.modes[:repeat % len(args.modes)]
        for mode in order:
            results = run_once(mode, args, own_argv)
            runs.append(results)
            print(json.dumps({"repeat": repeat, "mode": mode,
                              "elapsed_s": [r["elapsed_s"] for r in results],
                              "peak_rss_mib": [r["peak_rss_mib"]
                                               for r in results]}),
                  flush=True)
    summary = summarise(runs, args)
    print_table(summary, args)
    print(f"\nwall time {time.time() - started:.0f} s")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"runs": runs, "summary": summary,
                       "args": {k: v for k, v in vars(args).items()
                                if k not in ("as_rank", "result")}}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
