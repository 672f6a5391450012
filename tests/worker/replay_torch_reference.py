#!/usr/bin/python3
"""Checks a replay job's parameters against the torch optimizer its
OptimizerSpec stands for (worker/optim/testdata/torch_optim.py: torch 1.13's
SGD, Adam, AdamW, Adagrad, RMSprop, lion-pytorch's Lion, per parameter group
and schedule) on the same data, also when the job's world size changed at a
step, as a restart at a smaller world does: steps 1..switch_step average the
gradients of `world_before` ranks, the steps after average those of
`world_after` ranks (rank r of step s reads
gradients/step-<s>/rank-<r>.safetensors, as the replay workload does).

  replay_torch_reference.py --replay_tools examples/make_replay_data.py \
      --torch_optim worker/optim/testdata/torch_optim.py \
      --optimizer '{"kind": "ADAM", "hyper_parameters": {"lr": 0.01}}' \
      --data DIR --steps 100 --switch_step 40 --world_before 3 \
      --world_after 2 --actual params.safetensors

A fixed world is --switch_step = --steps with --world_before the job's.

With --accumulation N each optimizer step averages N recorded micro-batches
(step s reads gradients/step-<(s-1)N+1 .. sN>), as gradient_accumulation_steps
does: the gradient of one batch N times larger.

When the OptimizerSpec has max_grad_norm (and norm_type 2 or "Infinity"),
the averaged gradients are clipped by torch.nn.utils.clip_grad_norm_ before
each step, the report says how many steps were clipped, and
--actual_grad_norm, when given, must be the last step's norm (what the job's
progress reported) within --rtol.

With --reduce_dtype bf16 (JobSpec.precision.reduce_dtype) each rank's
gradient is rounded to bf16, the ranks' sum is taken in bf16 (in rank
order) and the mean rounded to bf16 again, as a bf16 reduction does; with
--param_dtype bf16 the optimizer steps fp32 master weights and the expected
parameters are those rounded to bf16, as the model holds them.

Exits 0 when every value is within --rtol/--atol (as the Python parity tests
compare), else 1 naming the worst parameter. Needs torch and numpy.
"""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np
import torch


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reference(tools, optim, spec, data, steps, switch_step, world_before,
              world_after, accumulation=1, reduce_dtype=torch.float32):
    """The parameters after `steps`, and each step's clip_grad_norm_ (empty
    without max_grad_norm)."""
    max_grad_norm = spec.get("max_grad_norm", spec.get("maxGradNorm"))
    norm_type = float(spec.get("norm_type", spec.get("normType", 2.0)))
    norms = []
    initial = tools.read_safetensors(os.path.join(data, "params.safetensors"))
    params = {name: torch.tensor(np.array(value), dtype=torch.float32)
              for name, value in initial.items()}
    optimizers = optim.torch_optimizers(spec, list(params.items()))
    for step in range(1, steps + 1):
        world = world_before if step <= switch_step else world_after
        micro = range((step - 1) * accumulation + 1, step * accumulation + 1)
        grads = [[tools.read_safetensors(os.path.join(
            data, "gradients", f"step-{m}", f"rank-{r}.safetensors"))
            for m in micro] for r in range(world)]
        for name, p in params.items():
            # Each rank's mean over its micro-batches, then the mean over
            # ranks.
            total = None
            for r in range(world):
                mean = torch.tensor(np.array(grads[r][0][name]))
                for m in range(1, accumulation):
                    mean += torch.tensor(np.array(grads[r][m][name]))
                if accumulation > 1:
                    mean /= accumulation
                mean = mean.to(reduce_dtype)
                total = mean if total is None else total + mean
            p.grad = (total.float() / world).to(reduce_dtype).float()
        if max_grad_norm is not None:
            norms.append(float(torch.nn.utils.clip_grad_norm_(
                params.values(), float(max_grad_norm), norm_type=norm_type)))
        with torch.no_grad():
            for optimizer, scheduler in optimizers:
                optimizer.step()
                if scheduler is not None:
                    scheduler.step()
    return params, norms


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay_tools", required=True,
                        help="path of examples/make_replay_data.py")
    parser.add_argument("--torch_optim", required=True,
                        help="path of worker/optim/testdata/torch_optim.py")
    parser.add_argument("--optimizer", required=True,
                        help="the job's OptimizerSpec as JSON")
    parser.add_argument("--data", required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--switch_step", type=int, required=True)
    parser.add_argument("--world_before", type=int, required=True)
    parser.add_argument("--world_after", type=int, required=True)
    parser.add_argument("--actual", required=True)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=1e-6)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--actual_grad_norm", type=float)
    parser.add_argument("--param_dtype", choices=["fp32", "bf16"],
                        default="fp32")
    parser.add_argument("--reduce_dtype", choices=["fp32", "bf16"],
                        default="fp32")
    args = parser.parse_args()
    if not 0 <= args.switch_step <= args.steps:
        parser.error("--switch_step must be in [0, --steps]")
    tools = load_module(args.replay_tools, "make_replay_data")
    optim = load_module(args.torch_optim, "torch_optim")
    spec = json.loads(args.optimizer)
    expected, norms = reference(tools, optim, spec, args.data, args.steps,
                                args.switch_step, args.world_before,
                                args.world_after, args.accumulation,
                                DTYPES[args.reduce_dtype])
    if args.param_dtype == "bf16":
        expected = {name: p.detach().to(torch.bfloat16).float()
                    for name, p in expected.items()}
    if norms:
        limit = float(spec.get("max_grad_norm", spec.get("maxGradNorm")))
        clipped = sum(1 for n in norms if n > limit)
        print(f"clip_grad_norm_: {clipped} of {len(norms)} steps clipped; "
              f"last norm {norms[-1]!r}")
        if args.actual_grad_norm is not None and not (
                abs(args.actual_grad_norm - norms[-1]) <=
                args.rtol * abs(norms[-1])):
            print(f"grad_norm {args.actual_grad_norm!r}, torch's "
                  f"{norms[-1]!r} (rtol {args.rtol:g})", file=sys.stderr)
            return 1
    actual = tools.read_safetensors(args.actual)
    if sorted(actual) != sorted(expected):
        print(f"{args.actual}: parameters {sorted(actual)}, expected "
              f"{sorted(expected)}", file=sys.stderr)
        return 1
    worst_name, worst = None, 0.0
    for name, want in expected.items():
        got = torch.tensor(np.array(actual[name]))
        if got.shape != want.shape:
            print(f"{name}: shape {tuple(got.shape)}, expected "
                  f"{tuple(want.shape)}", file=sys.stderr)
            return 1
        # How far past the tolerance, as torch.allclose measures it.
        excess = float(((got - want).abs() -
                        args.rtol * want.abs()).max())
        if worst_name is None or excess > worst:
            worst_name, worst = name, excess
    ok = worst <= args.atol
    print(f"torch reference ({json.loads(args.optimizer)['kind']}, world "
          f"{args.world_before} to step "
          f"{args.switch_step}, then {args.world_after}): worst {worst_name}, "
          f"|got - want| - rtol*|want| = {worst:.3g} "
          f"({'within' if ok else 'above'} atol {args.atol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
