#!/usr/bin/python3
"""Golden values for shard_optimizer_test: PyTorch 1.13's SGD, Adam, AdamW
(with amsgrad), Adagrad and RMSprop, and Lion as torch_optim.py writes it in
torch operations (torch 1.13 has no Lion).

Run with Debian's python3-torch (1.13, CPU):
    /usr/bin/python3 worker/optim/testdata/make_golden.py > worker/optim/testdata/golden.txt

Each case lays several parameters out in one flat bucket (with a gap that no
parameter covers, which must stay untouched), assigns them to parameter groups
by the same fnmatch globs as common/job_spec.cc, runs torch.optim (foreach=False)
with the groups' torch.optim.lr_scheduler schedules (job_spec.proto's
LrSchedule; the spec-to-torch mapping is torch_optim.py's) for several steps
and records the flat parameters after every step.

File format, one record per line, floats printed with 9 significant digits
(enough to round-trip fp32 exactly):
    case <name>
    optimizer <OptimizerSpec as protobuf JSON, one line>
    span <name> <offset> <numel>          (one line per parameter)
    params <n> <v0> ... <vn-1>            (initial flat bucket)
    grad <n> ...                          (step s: averaged gradient)
    expect <n> ...                        (step s: parameters after the step)
    end
"""
import json
import os
import sys
import warnings


import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_optim import torch_optimizers  # noqa: E402

# Parameter layout inside the bucket: name, offset, numel. Sizes are chosen to
# exercise vector tails (not multiples of 8) and a gap at [45, 48).
SPANS = [
    ("layers.2.bias", 0, 3),
    ("layers.2.weight", 3, 37),
    ("layers.0.bias", 40, 5),
    ("layers.0.weight", 48, 67),
]
BUCKET_NUMEL = 48 + 67
STEPS = 5

CASES = [
    ("sgd_plain", {"kind": "SGD", "hyperParameters": {"lr": 0.1}}),
    ("sgd_momentum", {"kind": "SGD", "hyperParameters": {"lr": 0.05, "momentum": 0.9}}),
    ("sgd_nesterov", {"kind": "SGD", "hyperParameters": {"lr": 0.05, "momentum": 0.9, "nesterov": True}}),
    ("sgd_dampening", {"kind": "SGD", "hyperParameters": {"lr": 0.07, "momentum": 0.8, "dampening": 0.3}}),
    ("sgd_weight_decay", {"kind": "SGD", "hyperParameters": {"lr": 0.03, "weightDecay": 0.01}}),
    ("sgd_momentum_weight_decay", {"kind": "SGD", "hyperParameters": {"lr": 0.03, "momentum": 0.9, "weightDecay": 0.05}}),
    ("sgd_groups", {
        "kind": "SGD",
        "hyperParameters": {"lr": 0.1, "momentum": 0.9},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"lr": 0.01, "momentum": 0.0}},
            {"params": ["layers.0.*"], "hyperParameters": {"nesterov": True, "weightDecay": 0.1}},
        ]}),
    ("adam_default", {"kind": "ADAM", "hyperParameters": {}}),
    ("adam_weight_decay", {"kind": "ADAM", "hyperParameters": {"lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-6, "weightDecay": 0.1}}),
    ("adamw_default", {"kind": "ADAMW", "hyperParameters": {}}),
    ("adamw_weight_decay", {"kind": "ADAMW", "hyperParameters": {"lr": 0.01, "betas": [0.85, 0.995], "weightDecay": 0.3}}),
    ("adam_groups", {
        "kind": "ADAM",
        "hyperParameters": {"lr": 0.002},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"lr": 0.05, "betas": [0.5, 0.9]}},
            {"params": ["layers.2.*"], "hyperParameters": {"weightDecay": 0.2, "eps": 1e-4}},
        ]}),
    ("adamw_groups", {
        "kind": "ADAMW",
        "hyperParameters": {"lr": 0.004, "weightDecay": 0.05},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"weightDecay": 0.0}},
        ]}),
    # Learning-rate schedules (after the cases above, so that their random
    # draws stay the same): torch.optim.lr_scheduler, one scheduler.step()
    # after every optimizer.step().
    ("sgd_momentum_step_warmup", {
        "kind": "SGD",
        "hyperParameters": {"lr": 0.1, "momentum": 0.9, "lrSchedule": {
            "kind": "STEP", "stepSize": 2, "gamma": 0.5, "warmupSteps": 1}}}),
    ("adam_cosine_warmup", {
        "kind": "ADAM",
        "hyperParameters": {"lr": 0.01, "lrSchedule": {
            "kind": "COSINE", "tMax": 2, "etaMin": 0.001, "warmupSteps": 2,
            "warmupStartFactor": 0.1}}}),
    ("adamw_linear_groups", {
        "kind": "ADAMW",
        "hyperParameters": {"lr": 0.01, "weightDecay": 0.1, "lrSchedule": {
            "kind": "LINEAR", "startFactor": 1.0, "endFactor": 0.2,
            "totalIters": 3}},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"lr": 0.05, "lrSchedule": {
                "kind": "STEP", "stepSize": 1, "gamma": 0.7}}},
            {"params": ["layers.0.*"], "hyperParameters": {"weightDecay": 0.0}},
        ]}),
    # Issue 15 item 5 (after the cases above, for the same reason): AMSGrad,
    # Adagrad, RMSprop and Lion, each with its options and parameter groups.
    ("adam_amsgrad", {
        "kind": "ADAM",
        "hyperParameters": {"lr": 0.01, "amsgrad": True, "weightDecay": 0.1}}),
    ("adamw_amsgrad_groups", {
        "kind": "ADAMW",
        "hyperParameters": {"lr": 0.01, "amsgrad": True, "betas": [0.8, 0.9]},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"amsgrad": False,
                                                       "weightDecay": 0.0}},
        ]}),
    ("adagrad_default", {"kind": "ADAGRAD", "hyperParameters": {}}),
    ("adagrad_options", {
        "kind": "ADAGRAD",
        "hyperParameters": {"lr": 0.05, "lrDecay": 0.1, "weightDecay": 0.01,
                            "initialAccumulatorValue": 0.1, "eps": 1e-6}}),
    ("adagrad_groups_schedule", {
        "kind": "ADAGRAD",
        "hyperParameters": {"lr": 0.1, "lrDecay": 0.05, "lrSchedule": {
            "kind": "STEP", "stepSize": 2, "gamma": 0.5}},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {
                "initialAccumulatorValue": 0.5, "eps": 0.0}},
        ]}),
    ("rmsprop_default", {"kind": "RMSPROP", "hyperParameters": {}}),
    ("rmsprop_momentum_weight_decay", {
        "kind": "RMSPROP",
        "hyperParameters": {"lr": 0.01, "alpha": 0.9, "momentum": 0.9,
                            "weightDecay": 0.01}}),
    ("rmsprop_centered", {
        "kind": "RMSPROP",
        "hyperParameters": {"lr": 0.005, "centered": True, "eps": 1e-6}}),
    ("rmsprop_centered_momentum_groups", {
        "kind": "RMSPROP",
        "hyperParameters": {"lr": 0.01, "centered": True, "momentum": 0.5},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {
                "centered": False, "momentum": 0.0, "alpha": 0.95}},
            {"params": ["layers.0.*"], "hyperParameters": {"centered": False}},
        ]}),
    ("lion_default", {"kind": "LION", "hyperParameters": {}}),
    ("lion_weight_decay_groups", {
        "kind": "LION",
        "hyperParameters": {"lr": 0.01, "betas": [0.95, 0.98],
                            "weightDecay": 0.5, "lrSchedule": {
                                "kind": "COSINE", "tMax": 4}},
        "paramGroups": [
            {"params": ["*.bias"], "hyperParameters": {"weightDecay": 0.0,
                                                       "lr": 0.03}},
        ]}),
]

def fmt(values):
    return " ".join("%.9g" % v for v in values)


def run_case(out, name, spec, gen):
    flat = torch.randn(BUCKET_NUMEL, generator=gen)
    params = {n: torch.nn.Parameter(flat[o:o + k].clone()) for n, o, k in SPANS}
    pairs = torch_optimizers(spec, [(n, params[n]) for n, _, _ in SPANS])

    out.write("case %s\n" % name)
    out.write("optimizer %s\n" % json.dumps(spec, separators=(",", ":")))
    for n, o, k in SPANS:
        out.write("span %s %d %d\n" % (n, o, k))
    out.write("params %d %s\n" % (BUCKET_NUMEL, fmt(flat.tolist())))
    for step in range(STEPS):
        # Vary the scale per step so moments see more than one magnitude.
        grad_flat = torch.randn(BUCKET_NUMEL, generator=gen) * (0.5 + step)
        for n, o, k in SPANS:
            params[n].grad = grad_flat[o:o + k].clone()
        for opt, scheduler in pairs:
            opt.step()
            if scheduler is not None:
                scheduler.step()
        for n, o, k in SPANS:
            flat[o:o + k] = params[n].detach()
        out.write("grad %d %s\n" % (BUCKET_NUMEL, fmt(grad_flat.tolist())))
        out.write("expect %d %s\n" % (BUCKET_NUMEL, fmt(flat.tolist())))
    out.write("end\n")


def main():
    assert torch.__version__.startswith("1.13"), torch.__version__
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")  # SequentialLR's step(0) deprecation
    gen = torch.Generator().manual_seed(20261202)
    out = sys.stdout
    out.write("# Generated by worker/optim/testdata/make_golden.py with torch %s. "
              "Do not edit.\n" % torch.__version__)
    for name, spec in CASES:
        run_case(out, name, spec, gen)


if __name__ == "__main__":
    main()
