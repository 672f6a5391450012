#!/usr/bin/python3
"""Prints the lr torch.optim.lr_scheduler (1.13) gives each optimizer step
for one LrSchedule (proto/pshard/v1/job_spec.proto, its JSON with the proto
field names), built the way job_spec.proto documents:

  SequentialLR([LinearLR(warmup_start_factor, 1.0, total_iters=W), MAIN],
               milestones=[W])                       when warmup_steps W > 0
  MAIN: CONSTANT none (LinearLR alone with a warmup), LINEAR LinearLR,
        COSINE CosineAnnealingLR, STEP StepLR

    lr_schedule_torch.py < CASES

Each line of standard input is one case, SCHEDULE_JSON<TAB>BASE_LR<TAB>STEPS;
for each, one line of output: the lr optimizer.step() t runs at for
t = 0 .. STEPS-1 (scheduler.step() after every optimizer.step()), as
repr(float), separated by spaces. One process for every case: importing
torch takes seconds.
"""

import json
import sys
import warnings

import torch
from torch.optim import lr_scheduler


def main_scheduler(opt, s):
    kind = s.get("kind", "CONSTANT").upper()
    if kind == "LINEAR":
        return lr_scheduler.LinearLR(
            opt, start_factor=s.get("start_factor", 1.0 / 3),
            end_factor=s.get("end_factor", 1.0),
            total_iters=int(s.get("total_iters", 5)))
    if kind == "COSINE":
        return lr_scheduler.CosineAnnealingLR(
            opt, T_max=int(s["t_max"]), eta_min=s.get("eta_min", 0))
    if kind == "STEP":
        return lr_scheduler.StepLR(opt, step_size=int(s["step_size"]),
                                   gamma=s.get("gamma", 0.1))
    if kind in ("CONSTANT", "KIND_UNSPECIFIED"):
        return None
    raise ValueError(f"unknown kind {kind}")


def learning_rates(schedule, base_lr, steps):
    param = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([param], lr=base_lr)
    warmup = int(schedule.get("warmup_steps", 0))
    warmup_sched = None
    if warmup > 0:
        warmup_sched = lr_scheduler.LinearLR(
            opt, start_factor=schedule.get("warmup_start_factor", 1.0 / 3),
            end_factor=1.0, total_iters=warmup)
    main_sched = main_scheduler(opt, schedule)
    if warmup_sched is not None and main_sched is not None:
        sched = lr_scheduler.SequentialLR(
            opt, [warmup_sched, main_sched], milestones=[warmup])
    else:
        sched = warmup_sched or main_sched
    param.grad = torch.zeros(1)
    out = []
    for _ in range(steps):
        out.append(repr(opt.param_groups[0]["lr"]))
        opt.step()
        if sched is not None:
            sched.step()
    return out


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        schedule, base_lr, steps = line.rstrip("\n").split("\t")
        print(" ".join(learning_rates(json.loads(schedule), float(base_lr),
                                      int(steps))))


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    main()
