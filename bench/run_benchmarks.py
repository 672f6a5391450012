#!/usr/bin/python3
"""pshard's benchmarks and their PyTorch peers, side by side in one run.

    bazel build //bench:benchmarks
    /usr/bin/python3 bench/run_benchmarks.py  # full run (docs/BENCHMARKS.md: 417 s on 2 vCPUs)
    /usr/bin/python3 bench/run_benchmarks.py --quick   # tiny sizes (CI; 31 s on 2 vCPUs)
    bazel test //bench:run_benchmarks_quick_test       # the quick run, under Bazel

Sections (--only limits,steps,optim,mlp picks some):

  limits The machine: loopback TCP throughput one way and both ways at once
         (bench/step/loopback_tcp.py), and how single-threaded sgemm adds up
         over the cores (bench/step/compute_scaling.py).
  steps  Step time of the comm + optimizer path: pshard's `synthetic` workload
         with Adam on N CPU workers on loopback (pshardctl local), for every
         world size x parameter count x bucket cap x comm mode, against, for
         the same sizes, the seed's per-bucket algorithm written with
         torch.distributed on Gloo (`torch_peers.py seed`) and PyTorch DDP with
         Adam (`torch_peers.py ddp`). Ratio pshard / seed. Also pshard's
         ZeroHook alone (worker/hook:hook_benchmark: ranks as threads,
         gradients generated once, as the seed peer has them).
  wire   Bytes on the wire per rank per step for each comm mode, from the
         same pshard runs (the communicator's bytes_sent in job progress),
         against 3(n-1)/n*S (all-reduce + broadcast) and 2(n-1)/n*S (reduce
         + broadcast). Comes with `steps`.
  optim  Optimizer kernels: bench/optimizer's optimizer_bench (GB/s of state
         touched vs memcpy in the same process) and torch_adam.py.
  mlp    End to end: pshard's `mlp` workload with Adam on 1, 2 and 4 workers,
         samples/s, against DDP + ZeroRedundancyOptimizer(Adam) (and DDP +
         Adam) on the same model, batch and optimizer.

How pshard's step time is measured: `pshardctl local JOB --workers N` runs
the job while bench/step's job_probe polls the coordinator's GetJob every
5 ms and records every step's progress (rank 0's wall time of the step, and
rank 0's cumulative bytes_sent). The step time reported is the median of the
recorded steps after the warm-up (step 1 includes the bucket-layout report
and the assignment); the probe sees practically every step (the "seen"
column says how many). As a cross-check the tables also give the mean from
wall time: (time step last was first seen - time step `warmup` was first
seen) / steps between, which includes any gap between steps. The PyTorch
peers time each step after a barrier; a step is the slowest rank's; median
after the same warm-up.

Every command is printed as it runs (`$ ...`) and repeated in the tables.
Results: <out>/results.json and <out>/results.md (markdown tables for
docs/BENCHMARKS.md). Numbers are never asserted: the exit status is 0 when
every run completed, 1 otherwise.
"""

import argparse
import datetime
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"  # Debian's, with python3-torch
MiB = 1 << 20

COMM_MODES = {"ALLREDUCE_BROADCAST": "allreduce+bcast", "REDUCE_BROADCAST": "reduce+bcast"}


def find_binary(rel):
    """A built binary: in the runfiles tree (bazel run/test) or bazel-bin."""
    for base in (ROOT, os.path.join(ROOT, "bazel-bin")):
        path = os.path.join(base, rel)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise SystemExit("run_benchmarks: %s is not built; run: bazel build //bench:benchmarks"
                     % rel)


def show(path):
    """A path as the user would type it: relative to the cwd when under it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def show_cmd(cmd):
    return " ".join(shlex.quote(show(c) if os.path.isabs(c) else c) for c in cmd)


def fmt_count(n):
    for unit, scale in (("G", 1 << 30), ("M", MiB), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d%s" % (n // scale, unit)
    return str(n)


def fmt_bytes(n):
    if n is None:
        return "-"
    if abs(n) >= MiB:
        return "%.2f MiB" % (n / MiB)
    return "%.1f KiB" % (n / 1024)


def fmt_ms(seconds):
    return "-" if seconds is None else "%.1f" % (seconds * 1e3)


def fmt_ratio(a, b):
    return "-" if a is None or not b else "%.2f" % (a / b)


def parse_count(text):
    scale = {"K": 1 << 10, "M": MiB, "G": 1 << 30}
    if text[-1].upper() in scale:
        return int(float(text[:-1]) * scale[text[-1].upper()])
    return int(text)


class Runner:
    """Runs commands, echoing each, with a deadline; keeps their output."""

    def __init__(self, out_dir, log):
        self.out_dir = out_dir
        self.log = log
        self.failures = []

    def echo(self, text):
        print(text, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def run(self, cmd, timeout, name):
        """Runs cmd; returns (returncode, stdout, stderr). Stops it (SIGINT,
        then SIGKILL to its process group) past the timeout."""
        self.echo("$ " + show_cmd(cmd))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        start = time.monotonic()
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            out, err = stop(proc)
            err += "\nrun_benchmarks: stopped after %ds" % timeout
        self.echo("  (%.1f s)" % (time.monotonic() - start))
        write(os.path.join(self.out_dir, "logs", name + ".out"), out)
        write(os.path.join(self.out_dir, "logs", name + ".err"), err)
        return proc.returncode, out, err

    def fail(self, name, what):
        self.failures.append("%s: %s" % (name, what))
        self.echo("  FAILED %s: %s" % (name, what))


def stop(proc):
    """SIGINT (pshardctl local then cancels the job and stops its cluster),
    then SIGKILL to the whole process group."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        return proc.communicate(timeout=15)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return proc.communicate()


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text or "")


def last_json_line(text):
    for line in reversed((text or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in the output")


# ---- pshard runs ----

def run_pshard(runner, bins, name, spec, workers, warmup, timeout):
    """One job on a fresh local cluster, followed by job_probe. Returns a
    dict with the median step time etc., or None if the run failed."""
    jobs_dir = os.path.join(runner.out_dir, "jobs")
    os.makedirs(jobs_dir, exist_ok=True)
    spec_path = os.path.join(jobs_dir, name + ".json")
    write(spec_path, json.dumps(spec, indent=1) + "\n")
    run_dir = os.path.join(runner.out_dir, "runs", name)
    shutil.rmtree(run_dir, ignore_errors=True)
    local_cmd = [bins["pshardctl"], "local", spec_path, "--workers", str(workers),
                 "--run_dir", run_dir]
    tls = os.path.join(run_dir, "tls")
    probe_cmd = [bins["job_probe"], "--port_file", os.path.join(run_dir, "coordinator.port"),
                 "--job", "job-1", "--timeout", "%ds" % timeout,
                 # pshardctl local's mutual TLS: its CA and client certificate.
                 "--tls_ca", os.path.join(tls, "ca.crt"),
                 "--tls_cert", os.path.join(tls, "pshardctl.crt"),
                 "--tls_key", os.path.join(tls, "pshardctl.key"),
                 # ... and its admin token (access control).
                 "--token_file", os.path.join(tls, "admin.token")]
    runner.echo("$ " + show_cmd(local_cmd) + " &")
    runner.echo("$ " + show_cmd(probe_cmd))
    start = time.monotonic()
    local = subprocess.Popen(local_cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, start_new_session=True)
    probe = subprocess.Popen(probe_cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        # The probe ends when it sees the job end. If pshardctl local dies
        # first (a bad spec, a crashed cluster), give the probe a moment,
        # then stop it rather than wait for its timeout.
        local_ended = None
        while probe.poll() is None:
            now = time.monotonic()
            if local_ended is None and local.poll() is not None:
                local_ended = now
            if (local_ended is not None and now - local_ended > 10) or now - start > timeout + 10:
                stop(probe)
                break
            time.sleep(0.1)
        probe_out, probe_err = probe.communicate()
        rc = probe.returncode
        try:
            local_out, _ = local.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            local_out, _ = stop(local)
    finally:
        for proc in (probe, local):
            if proc.poll() is None:
                stop(proc)
    runner.echo("  (%.1f s)" % (time.monotonic() - start))
    write(os.path.join(runner.out_dir, "logs", name + ".probe.out"), probe_out)
    write(os.path.join(runner.out_dir, "logs", name + ".probe.err"), probe_err)
    write(os.path.join(runner.out_dir, "logs", name + ".local"), local_out)
    # The final parameters (up to 256 MiB here) are not needed.
    shutil.rmtree(os.path.join(run_dir, "output"), ignore_errors=True)
    cmd_text = show_cmd(local_cmd)
    try:
        probe = json.loads(probe_out)
    except ValueError:
        runner.fail(name, "job_probe saw no job (rc %s%s); pshardctl local (exit %s) said: %s" % (
            rc, (", " + probe_err.strip()[-200:]) if probe_err.strip() else "",
            local.returncode, (local_out or "").strip()[-300:]))
        return {"command": cmd_text, "ok": False}
    if probe["state"] != "SUCCEEDED" or local.returncode != 0:
        runner.fail(name, "job %s (%s), pshardctl local exit %s; see %s" % (
            probe["state"], probe["reason"], local.returncode,
            show(os.path.join(runner.out_dir, "logs", name + ".local"))))
        return {"command": cmd_text, "ok": False}
    return summarize_probe(probe, warmup, cmd_text)


def summarize_probe(probe, warmup, cmd_text):
    samples = [dict(zip(probe["columns"], row)) for row in probe["samples"]]
    total = probe["total_steps"]
    measured = [s for s in samples if s["step"] > warmup]
    times = [s["step_time_s"] for s in measured]
    result = {
        "command": cmd_text,
        "ok": True,
        "steps": total - warmup,
        "seen": len(measured),
        "step_time_s": statistics.median(times) if times else None,
        "step_time_min_s": min(times) if times else None,
        "assignment": probe.get("assignment"),
    }
    # From the sample at (or just before) the end of the warm-up to the last.
    before = [s for s in samples if s["step"] <= warmup]
    first = before[-1] if before else (measured[0] if measured else None)
    last = samples[-1] if samples else None
    if first is not None and last is not None and last["step"] > first["step"]:
        n = last["step"] - first["step"]
        result["wall_step_s"] = (last["seen_s"] - first["seen_s"]) / n
        result["bytes_per_step"] = (last["bytes_sent"] - first["bytes_sent"]) / n
    else:
        result["wall_step_s"] = None
        result["bytes_per_step"] = None
    losses = [s["loss"] for s in samples if s["loss"] is not None]
    if losses:
        result["loss_first"] = losses[0]
        result["loss_last"] = losses[-1]
    return result


def run_step_timer(runner, name, cmd, timeout):
    """Runs a command whose last stdout line is JSON with step_time_ms_median
    and step_time_ms_min; returns that JSON with the command, ok and the
    times in seconds, or {"command", "ok": False} after runner.fail."""
    rc, out, err = runner.run(cmd, timeout, name)
    cmd_text = show_cmd(cmd)
    if rc != 0:
        runner.fail(name, "exit %s: %s" % (rc, err.strip()[-300:]))
        return {"command": cmd_text, "ok": False}
    try:
        r = last_json_line(out)
    except ValueError as e:
        runner.fail(name, str(e))
        return {"command": cmd_text, "ok": False}
    r.update({"command": cmd_text, "ok": True, "step_time_s": r["step_time_ms_median"] / 1e3,
              "step_time_min_s": r["step_time_ms_min"] / 1e3})
    return r


def run_hook(runner, bins, name, world, params, bucket, mode, cfg):
    """worker/hook's hook_benchmark: the ZeroHook over Gloo alone, ranks as
    threads of one process, gradients generated once outside the timed step
    (as the seed peer does); it has 2 warm-up steps of its own."""
    cmd = [bins["hook_benchmark"], "--world=%d" % world, "--params=%d" % params,
           "--bucket_mb=%g" % bucket, "--mode=%s" % mode.lower(), "--steps=%d" % cfg.steps]
    return run_step_timer(runner, name, cmd, cfg.timeout)


def run_torch(runner, name, args, timeout):
    cmd = [PYTHON, os.path.join(HERE, "peers", "torch_peers.py")] + [str(a) for a in args]
    return run_step_timer(runner, name, cmd, timeout)


def synthetic_spec(name, world, params, bucket_mb, mode, steps):
    return {
        "name": name,
        "world_size": world,
        "backend": "GLOO",
        "synthetic": {"num_parameters": params, "tensor_numel": 1 << 20},
        "bucket_cap_mb": bucket_mb,
        "assignment_policy": "BALANCED",
        "comm_mode": mode,
        "optimizer": {"kind": "ADAM", "hyper_parameters": {"lr": 0.001}},
        "steps": steps,
        "seed": 1,
        "progress_every": 1,
        "collective_timeout_seconds": 300,
    }


def mlp_spec(name, world, dims, batch, bucket_mb, steps):
    return {
        "name": name,
        "world_size": world,
        "backend": "GLOO",
        "mlp": {"input_dim": dims[0], "hidden_dims": dims[1:-1], "output_dim": dims[-1],
                "batch_size": batch},
        "bucket_cap_mb": bucket_mb,
        "assignment_policy": "BALANCED",
        "comm_mode": "REDUCE_BROADCAST",
        "optimizer": {"kind": "ADAM", "hyper_parameters": {"lr": 0.001}},
        "steps": steps,
        "seed": 1,
        "progress_every": 1,
        "collective_timeout_seconds": 300,
    }


# ---- sections ----

def section_limits(runner, bins, cfg):
    result = {"ok": True}
    cmd = [PYTHON, os.path.join(HERE, "step", "loopback_tcp.py"), "--json",
           "--mib", str(cfg.loopback_mib)]
    rc, out, err = runner.run(cmd, cfg.timeout, "limits-loopback")
    if rc != 0:
        runner.fail("limits-loopback", "exit %s: %s" % (rc, err.strip()[-300:]))
        result["ok"] = False
    else:
        result.update(last_json_line(out))
        result["command"] = show_cmd(cmd)
        runner.echo("  -> one way %.2f GB/s, both ways at once %.2f GB/s per direction" % (
            result["one_way_GBps"], result["both_ways_GBps"]))
    cmd = [PYTHON, os.path.join(HERE, "step", "compute_scaling.py"), "--json",
           "--seconds", str(cfg.scaling_seconds)]
    rc, out, err = runner.run(cmd, cfg.timeout, "limits-compute")
    if rc != 0:
        runner.fail("limits-compute", "exit %s: %s" % (rc, err.strip()[-300:]))
    else:
        result["compute"] = last_json_line(out)
        result["compute_command"] = show_cmd(cmd)
        c = result["compute"]["sgemm_GFLOPs"]
        runner.echo("  -> sgemm %.0f GFLOP/s in 1 process, %.0f in total on all cores (%.2fx)" % (
            c["one_process"], c["all_cores_total"], c["scaling"]))
    return result


def wire_bytes(runner_label, n, size):
    """Bytes one rank sends per step by the balanced formula."""
    if n < 2:
        return 0.0
    factor = 2 if runner_label in ("reduce+bcast", "torch DDP") else 3
    return factor * (n - 1) / n * size


def section_steps(runner, bins, cfg):
    rows = []
    for world in cfg.worlds:
        for params in cfg.params:
            for bucket in cfg.buckets:
                size = "%dw-%s-%gMB" % (world, fmt_count(params), bucket)
                group = {"world": world, "params": params, "bucket_mb": bucket, "pshard": {}}
                for mode in cfg.modes:
                    name = "steps-%s-%s" % (size, mode.lower())
                    spec = synthetic_spec(name, world, params, bucket, mode, cfg.warmup + cfg.steps)
                    group["pshard"][mode] = run_pshard(runner, bins, name, spec, world, cfg.warmup,
                                                       cfg.timeout)
                    report_row(runner, group["pshard"][mode])
                group["hook"] = {}
                for mode in cfg.modes:
                    name = "steps-%s-hook-%s" % (size, mode.lower())
                    group["hook"][mode] = run_hook(runner, bins, name, world, params, bucket,
                                                   mode, cfg)
                    report_row(runner, group["hook"][mode])
                for peer in ("seed", "ddp"):
                    name = "steps-%s-torch-%s" % (size, peer)
                    group[peer] = run_torch(runner, name, [
                        peer, "--world", world, "--params", fmt_count(params),
                        "--bucket_mb", "%g" % bucket,
                        "--steps", cfg.steps, "--warmup", cfg.warmup], cfg.timeout)
                    report_row(runner, group[peer])
                rows.append(group)
    return rows


def report_row(runner, r):
    if r.get("ok"):
        extra = ""
        if r.get("wall_step_s") is not None:
            extra = ", wall mean %s ms, %s/step sent by rank 0" % (
                fmt_ms(r["wall_step_s"]), fmt_bytes(r["bytes_per_step"]))
        if r.get("samples_per_second"):
            extra += ", %.0f samples/s" % r["samples_per_second"]
        runner.echo("  -> median %s ms/step%s" % (fmt_ms(r["step_time_s"]), extra))


def section_optim(runner, bins, cfg):
    # bench/optimizer/report.py's run_bench runs this very command and keeps
    # the best of the repetitions per benchmark, as STREAM reports.
    spec = importlib.util.spec_from_file_location(
        "optimizer_report", os.path.join(HERE, "optimizer", "report.py"))
    report = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(report)
    size_filter = "/(%s)/" % "|".join(str(n) for n in cfg.optim_numels)
    cmd = [bins["optimizer_bench"], "--benchmark_format=json",
           "--benchmark_repetitions=%d" % cfg.optim_repetitions,
           "--benchmark_min_time=%g" % cfg.optim_min_time,
           "--benchmark_enable_random_interleaving=true",
           "--benchmark_filter=%s" % size_filter]
    runner.echo("$ " + show_cmd(cmd))
    result = {"command": show_cmd(cmd), "kernels": {}, "torch": None}
    try:
        best = report.run_bench(bins["optimizer_bench"], cfg.optim_repetitions,
                                cfg.optim_min_time, size_filter)
        result["kernels"] = {"%s/%d/%d" % k: v for k, v in best.items()}
    except (subprocess.CalledProcessError, OSError, ValueError) as e:
        runner.fail("optim", "optimizer_bench: %s" % e)
    cmd = [PYTHON, os.path.join(HERE, "optimizer", "torch_adam.py"), "--json",
           "--numel", str(cfg.optim_numels[0]), "--min_time", str(cfg.optim_min_time)]
    rc, out, err = runner.run(cmd, cfg.timeout, "optim-torch")
    if rc != 0:
        runner.fail("optim-torch", "exit %s: %s" % (rc, err.strip()[-300:]))
    else:
        result["torch"] = json.loads(out)
        result["torch_command"] = show_cmd(cmd)
    return result


def section_mlp(runner, bins, cfg):
    rows = []
    dims = cfg.mlp_dims
    for world in cfg.mlp_worlds:
        row = {"world": world}
        name = "mlp-%dw" % world
        spec = mlp_spec(name, world, dims, cfg.mlp_batch, cfg.mlp_bucket_mb,
                        cfg.mlp_warmup + cfg.mlp_steps)
        r = run_pshard(runner, bins, name, spec, world, cfg.mlp_warmup, cfg.timeout)
        if r.get("ok") and r["step_time_s"]:
            r["samples_per_second"] = cfg.mlp_batch * world / r["step_time_s"]
        report_row(runner, r)
        row["pshard"] = r
        for peer in ("ddp_zero", "ddp_mlp"):
            r = run_torch(runner, "mlp-%dw-torch-%s" % (world, peer), [
                peer, "--world", world, "--mlp_dims", ",".join(str(d) for d in dims),
                "--batch", cfg.mlp_batch, "--bucket_mb", "%g" % cfg.mlp_bucket_mb,
                "--steps", cfg.mlp_steps, "--warmup", cfg.mlp_warmup], cfg.timeout)
            report_row(runner, r)
            row[peer] = r
        rows.append(row)
    return rows


# ---- the report ----

def machine():
    info = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": platform.processor() or "?", "cores": os.cpu_count()}
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                info["cpu"] = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
        info["ram"] = "%.1f GiB" % (kb / (1 << 20))
    except (OSError, ValueError, IndexError):
        info["ram"] = "?"
    info["load"] = "%.2f %.2f %.2f" % os.getloadavg()
    try:
        info["commit"] = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip() or "?"
    except OSError:
        info["commit"] = "?"
    try:
        # Uncommitted changes to what the benchmarks run (other engineers
        # work in the same tree): the binaries were built from them.
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--", "worker",
                                "server", "coordinator", "cli", "common", "proto", "bench"],
                               capture_output=True, text=True).stdout.split("\n")
        info["uncommitted"] = [line[3:] for line in dirty if line.strip()]
    except OSError:
        info["uncommitted"] = []
    try:
        info["torch"] = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True).stdout.strip()
    except OSError:
        info["torch"] = "?"
    return info


def goal_lines(groups):
    """The issue's goal: pshard <= 0.5x the seed algorithm's step time at 2
    workers (the better comm mode per size)."""
    lines = []
    for g in groups:
        if g["world"] != 2 or not g["seed"].get("ok"):
            continue
        best = min((r["step_time_s"], COMM_MODES[m]) for m, r in g["pshard"].items()
                   if r.get("ok") and r.get("step_time_s"))
        ratio = best[0] / g["seed"]["step_time_s"]
        lines.append("- 2 workers, %s params, %g MB buckets: best pshard (%s) / seed = %.2f: %s" % (
            fmt_count(g["params"]), g["bucket_mb"], best[1], ratio,
            "goal (<= 0.5) met" if ratio <= 0.5 else "goal (<= 0.5) not met"))
    return [""] + lines if lines else []


def markdown(results, cfg):
    m = results["machine"]
    lines = ["Machine: %s, %d cores, %s RAM; %s; commit %s; torch %s; load average at "
             "start %s, at end %s." % (m["cpu"], m["cores"], m["ram"], m["date"], m["commit"],
                                     m["torch"], m["load"], results.get("load_end", "?")),
             ""]
    if m.get("uncommitted"):
        lines[0] += " Built with uncommitted changes to: %s." % ", ".join(m["uncommitted"])
    limits = results.get("limits") or {}
    if limits.get("ok"):
        lines += ["### Loopback TCP", "",
                  "| measure | GB/s | command |", "|---|---|---|",
                  "| one way | %.2f | `%s` |" % (limits["one_way_GBps"], limits["command"]),
                  "| both ways at once, per direction | %.2f | (same) |" % limits["both_ways_GBps"],
                  ""]
    if limits.get("compute"):
        c = limits["compute"]
        lines += ["### Compute scaling over the cores", "",
                  "| measure | 1 process | %d processes at once, total | scaling | command |"
                  % c["cores"], "|---|---|---|---|---|"]
        for key, label in (("sgemm_GFLOPs", "sgemm GFLOP/s (torch.mm 1024², 1 thread)"),
                           ("scalar_Mloops", "scalar Python loop, M iterations/s")):
            lines.append("| %s | %.1f | %.1f | %.2fx | %s |" % (
                label, c[key]["one_process"], c[key]["all_cores_total"], c[key]["scaling"],
                ("`%s`" % limits["compute_command"]) if key == "sgemm_GFLOPs" else "(same)"))
        lines.append("")
    both = limits.get("both_ways_GBps") if limits.get("ok") else None
    if "steps" in results:
        lines += ["### Step time (synthetic workload, Adam, median over %d steps after %d warm-up)"
                  % (cfg.steps, cfg.warmup), "",
                  "Loopback floor: the time the kernel needs just to move the bytes all "
                  "ranks send in a step (balanced formula) at the machine's aggregate "
                  "loopback rate, 2 x the both-ways figure above (both cores copying).", "",
                  "| workers | params | bucket | runner | median ms/step | wall mean ms | "
                  "seen | vs seed | vs DDP | loopback floor ms | command |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for g in results["steps"]:
            seed, ddp = g["seed"], g["ddp"]
            entries = [(COMM_MODES[mode], r) for mode, r in g["pshard"].items()]
            entries += [("hook " + COMM_MODES[mode], r) for mode, r in g.get("hook", {}).items()]
            entries += [("torch seed", seed), ("torch DDP", ddp)]
            for label, r in entries:
                is_pshard = not label.startswith("torch") and not label.startswith("hook")
                floor = "-"
                if both:
                    sent = g["world"] * wire_bytes(label.replace("hook ", ""), g["world"],
                                                   4 * g["params"])
                    floor = "%.0f" % (sent / (2 * both * 1e9) * 1e3)
                lines.append("| %d | %s | %g MB | %s | %s | %s | %s | %s | %s | %s | `%s` |" % (
                    g["world"], fmt_count(g["params"]), g["bucket_mb"],
                    ("pshard " + label) if is_pshard else
                    ("pshard ZeroHook alone, " + label[5:]) if label.startswith("hook") else label,
                    fmt_ms(r.get("step_time_s")) if r.get("ok") else "FAILED",
                    fmt_ms(r.get("wall_step_s")),
                    ("%d/%d" % (r["seen"], r["steps"])) if is_pshard and r.get("ok") else "",
                    fmt_ratio(r.get("step_time_s"), seed.get("step_time_s")) if label != "torch seed" else "1",
                    fmt_ratio(r.get("step_time_s"), ddp.get("step_time_s")) if label != "torch DDP" else "1",
                    floor, r["command"]))
        lines += goal_lines(results["steps"])
        lines += ["", "### Bytes on the wire per rank per step (rank 0, pshard's communicator)", "",
                  "S = parameter bytes. The balanced formulas assume every rank owns S/n; "
                  "with O = the bytes rank 0 owns, pshard's point-to-point collectives send "
                  "2(n-1)/n·S + (n-1)·O (all-reduce + broadcast) and (S-O) + (n-1)·O "
                  "(reduce + broadcast) from rank 0.", "",
                  "| workers | params | bucket | mode | measured | balanced formula | measured / "
                  "formula | rank 0 owns O | formula at O | measured / that |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for g in results["steps"]:
            n, size = g["world"], 4 * g["params"]
            for mode, r in g["pshard"].items():
                factor = 3 if mode == "ALLREDUCE_BROADCAST" else 2
                expected = factor * (n - 1) / n * size
                a = r.get("assignment") or {}
                owned = (a.get("owned_bytes") or [None])[0]
                at_owned = None
                if owned is not None:
                    at_owned = (2 * (n - 1) / n * size if mode == "ALLREDUCE_BROADCAST"
                                else size - owned) + (n - 1) * owned
                lines.append("| %d | %s | %g MB | %s | %s | %d(n-1)/n·S = %s | %s | %s | %s | %s |" % (
                    n, fmt_count(g["params"]), g["bucket_mb"], COMM_MODES[mode],
                    fmt_bytes(r.get("bytes_per_step")), factor, fmt_bytes(expected),
                    fmt_ratio(r.get("bytes_per_step"), expected),
                    ("%s (%.1f%%)" % (fmt_bytes(owned), 100.0 * owned / size)) if owned is not None else "-",
                    fmt_bytes(at_owned), fmt_ratio(r.get("bytes_per_step"), at_owned)))
    if "optim" in results:
        o = results["optim"]
        lines += ["", "### Optimizer kernels (GB/s of state touched, best of %d)" %
                  cfg.optim_repetitions, "", "`%s`" % o["command"], "",
                  "| benchmark | elements | GB/s | vs memcpy |", "|---|---|---|---|"]
        by_size = {}
        for key, gbs in o["kernels"].items():
            bench, size, threads = key.rsplit("/", 2)
            by_size.setdefault(int(size), []).append((bench, int(threads), gbs))
        for size in sorted(by_size):
            base = dict(((b, t), g) for b, t, g in by_size[size]).get(("Memcpy", 1))
            for bench, threads, gbs in sorted(by_size[size]):
                label = bench if threads == 1 else "%s (%d threads)" % (bench, threads)
                lines.append("| %s | %s | %.2f | %s |" % (
                    label, fmt_count(size), gbs, ("%.0f%%" % (100 * gbs / base)) if base else "-"))
        if o.get("torch"):
            lines += ["", "`%s`" % o["torch_command"], "",
                      "| torch %s Adam | threads | foreach | copy GB/s | Adam GB/s | vs copy |"
                      % o["torch"]["torch"], "|---|---|---|---|---|---|"]
            for r in o["torch"]["rows"]:
                lines.append("| %s elements | %d | %s | %.2f | %.2f | %.0f%% |" % (
                    fmt_count(r["numel"]), r["threads"], r["foreach"], r["copy_GBps"],
                    r["adam_GBps"], 100 * r["ratio"]))
    if "mlp" in results:
        dims = cfg.mlp_dims
        nparams = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1))
        lines += ["", "### End to end: mlp %s (%s parameters), batch %d per worker, Adam, "
                  "bucket cap %g MB, median over %d steps after %d warm-up" % (
                      "-".join(str(d) for d in dims), "{:,}".format(nparams), cfg.mlp_batch,
                      cfg.mlp_bucket_mb, cfg.mlp_steps, cfg.mlp_warmup), "",
                  "| workers | runner | median ms/step | samples/s | vs DDP+ZeRO | loss first → last | command |",
                  "|---|---|---|---|---|---|---|"]
        for row in results["mlp"]:
            zero = row["ddp_zero"]
            for label, key in (("pshard", "pshard"), ("torch DDP + ZeRO(Adam)", "ddp_zero"),
                               ("torch DDP + Adam", "ddp_mlp")):
                r = row[key]
                sps = r.get("samples_per_second")
                loss = "-"
                if r.get("loss_first") is not None:
                    loss = "%.3f → %.3f" % (r["loss_first"], r["loss_last"])
                lines.append("| %d | %s | %s | %s | %s | %s | `%s` |" % (
                    row["world"], label, fmt_ms(r.get("step_time_s")) if r.get("ok") else "FAILED",
                    ("%.0f" % sps) if sps else "-",
                    fmt_ratio(sps, zero.get("samples_per_second")) if key != "ddp_zero" else "1",
                    loss, r["command"]))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, a few steps: checks that everything builds and runs")
    parser.add_argument("--only", default="limits,steps,optim,mlp",
                        help="comma-separated sections: limits (loopback TCP), steps (includes "
                        "the bytes on the wire), optim, mlp")
    parser.add_argument("--out", default="", help="results directory (default: a new /tmp dir)")
    parser.add_argument("--worlds", default="", help="steps: worker counts, e.g. 2,4")
    parser.add_argument("--params", default="", help="steps: parameter counts, e.g. 16M,64M")
    parser.add_argument("--buckets", default="", help="steps: bucket caps in MiB, e.g. 8,25")
    parser.add_argument("--steps", type=int, default=0, help="measured steps per run")
    parser.add_argument("--warmup", type=int, default=0, help="warm-up steps per run")
    args = parser.parse_args()

    cfg = argparse.Namespace()
    cfg.modes = list(COMM_MODES)
    if args.quick:
        cfg.worlds, cfg.params, cfg.buckets = [2], [1 << 20], [1]
        cfg.steps, cfg.warmup, cfg.timeout = 4, 1, 60
        cfg.loopback_mib, cfg.scaling_seconds = 8, 0.2
        cfg.optim_numels, cfg.optim_repetitions, cfg.optim_min_time = [4096], 1, 0.01
        cfg.mlp_worlds, cfg.mlp_dims, cfg.mlp_batch = [1, 2], [32, 64, 8], 16
        cfg.mlp_bucket_mb, cfg.mlp_steps, cfg.mlp_warmup = 0.01, 4, 1
    else:
        cfg.worlds, cfg.params, cfg.buckets = [2, 4], [16 * MiB, 64 * MiB], [8, 25]
        cfg.steps, cfg.warmup, cfg.timeout = 10, 3, 300
        cfg.loopback_mib, cfg.scaling_seconds = 1024, 2
        cfg.optim_numels, cfg.optim_repetitions, cfg.optim_min_time = [16 * MiB, 64 * MiB], 3, 0.3
        cfg.mlp_worlds, cfg.mlp_dims, cfg.mlp_batch = [1, 2, 4], [512, 1024, 1024, 512], 128
        cfg.mlp_bucket_mb, cfg.mlp_steps, cfg.mlp_warmup = 2, 30, 5
    if args.worlds:
        cfg.worlds = [int(w) for w in args.worlds.split(",")]
    if args.params:
        cfg.params = [parse_count(p) for p in args.params.split(",")]
    if args.buckets:
        cfg.buckets = [float(b) for b in args.buckets.split(",")]
    if args.steps:
        cfg.steps = args.steps
    if args.warmup:
        cfg.warmup = args.warmup
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    for s in sections:
        if s not in ("limits", "steps", "optim", "mlp"):
            parser.error("--only: unknown section %r" % s)

    bins = {"pshardctl": find_binary("cli/pshardctl"),
            "job_probe": find_binary("bench/step/job_probe"),
            "hook_benchmark": find_binary("worker/hook/hook_benchmark")}
    if "optim" in sections:
        bins["optimizer_bench"] = find_binary("bench/optimizer/optimizer_bench")
    out_dir = os.path.abspath(args.out) if args.out else tempfile.mkdtemp(
        prefix="pshard-bench-", dir=os.environ.get("TEST_TMPDIR"))
    os.makedirs(out_dir, exist_ok=True)

    with open(os.path.join(out_dir, "commands.log"), "w") as log:
        runner = Runner(out_dir, log)
        results = {"machine": machine(), "config": {k: v for k, v in vars(cfg).items()}}
        runner.echo("pshard benchmarks%s: results in %s" % (" (quick)" if args.quick else "",
                                                            show(out_dir)))
        runner.echo("machine: %s" % json.dumps(results["machine"]))
        started = time.monotonic()
        for section, fn in (("limits", section_limits), ("steps", section_steps), ("optim", section_optim),
                            ("mlp", section_mlp)):
            if section not in sections:
                continue
            t0 = time.monotonic()
            runner.echo("\n== %s ==" % section)
            results[section] = fn(runner, bins, cfg)
            runner.echo("== %s took %.0f s" % (section, time.monotonic() - t0))
        results["load_end"] = "%.2f %.2f %.2f" % os.getloadavg()
        results["elapsed_s"] = time.monotonic() - started
        results["failures"] = runner.failures
        write(os.path.join(out_dir, "results.json"), json.dumps(results, indent=1) + "\n")
        md = markdown(results, cfg)
        write(os.path.join(out_dir, "results.md"), md)
        runner.echo("\n" + md)
        runner.echo("total %.0f s; results: %s" % (results["elapsed_s"],
                                                   show(os.path.join(out_dir, "results.md"))))
        if runner.failures:
            runner.echo("%d run(s) failed:\n  %s" % (len(runner.failures),
                                                    "\n  ".join(runner.failures)))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
