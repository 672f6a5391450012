"""The torch optimizers a pshard OptimizerSpec (job_spec.proto, as protobuf
JSON, camelCase or snake_case names) stands for, for pshard's golden and
parity tests (worker/optim/testdata/make_golden.py,
tests/worker/replay_torch_reference.py, python/tests/parity_common.py):

  torch_optimizers(spec, named_params) -> [(optimizer, scheduler or None)]

one torch optimizer per parameter group (groups matched by the same fnmatch
globs as common/job_spec.cc, first match wins), each with its group's
torch.optim.lr_scheduler schedule. Needs torch 1.13 (Debian's python3-torch).

Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") is
here as a torch.optim.Optimizer: torch 1.13 has none. The update is
lion-pytorch's (github.com/lucidrains/lion-pytorch,
update_fn), torch operation for torch operation, so that the fp32 rounding is
the one pshard's LION kernels reproduce (worker/optim/cpu_kernels.h):

    p.mul_(1 - lr * weight_decay)                      # decoupled decay
    c = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1)
    p.add_(c.sign_(), alpha=-lr)
    exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)

Defaults as lion-pytorch's: lr 1e-4, betas (0.9, 0.99), weight_decay 0.
State per parameter: "exp_avg" (and "step", as torch's own optimizers keep
one, so that state_dict comparisons line up).
"""
import fnmatch
import re

import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0,
                 foreach=None):
        # `foreach` is accepted (and ignored) so callers can pass the same
        # keywords as to torch's own optimizers.
        if not lr > 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not all(0.0 <= beta <= 1.0 for beta in betas):
            raise ValueError("Invalid betas: {}".format(betas))
        super().__init__(params, dict(lr=lr, betas=betas,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            wd = group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                state["step"] += 1
                exp_avg = state["exp_avg"]
                grad = p.grad
                p.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1)
                p.add_(update.sign_(), alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss


# OptimizerSpec.Kind -> the torch optimizer.
TORCH_CLASSES = {"SGD": torch.optim.SGD, "ADAM": torch.optim.Adam,
                 "ADAMW": torch.optim.AdamW, "ADAGRAD": torch.optim.Adagrad,
                 "RMSPROP": torch.optim.RMSprop, "LION": Lion}

# OptimizerHyperParameters fields that are torch keywords of the same name.
_KEYWORDS = {"lr", "momentum", "dampening", "nesterov", "weight_decay", "betas",
             "eps", "lr_decay", "initial_accumulator_value", "alpha",
             "centered", "amsgrad"}


def _snake(name):
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _snake_keys(value):
    if isinstance(value, dict):
        return {_snake(k): _snake_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_snake_keys(v) for v in value]
    return value


def torch_kwargs(hyper_parameters):
    """The torch keywords of OptimizerHyperParameters (lr_schedule aside)."""
    out = {}
    for key, value in _snake_keys(hyper_parameters).items():
        if key == "lr_schedule":
            continue
        if key not in _KEYWORDS:
            raise ValueError(f"no torch keyword for hyper-parameter {key!r}")
        out[key] = tuple(value) if key == "betas" else value
    return out


def make_scheduler(opt, schedule):
    """The torch scheduler job_spec.proto's LrSchedule documents (None for a
    constant lr), one scheduler.step() after every optimizer.step()."""
    from torch.optim import lr_scheduler
    if not schedule:
        return None
    schedule = _snake_keys(schedule)
    kind = schedule.get("kind", "CONSTANT").upper()
    main = None
    if kind == "LINEAR":
        main = lr_scheduler.LinearLR(
            opt, start_factor=schedule.get("start_factor", 1.0 / 3),
            end_factor=schedule.get("end_factor", 1.0),
            total_iters=schedule.get("total_iters", 5))
    elif kind == "COSINE":
        main = lr_scheduler.CosineAnnealingLR(
            opt, T_max=schedule["t_max"], eta_min=schedule.get("eta_min", 0))
    elif kind == "STEP":
        main = lr_scheduler.StepLR(opt, step_size=schedule["step_size"],
                                   gamma=schedule.get("gamma", 0.1))
    warmup = schedule.get("warmup_steps", 0)
    if warmup == 0:
        return main
    first = lr_scheduler.LinearLR(
        opt, start_factor=schedule.get("warmup_start_factor", 1.0 / 3),
        end_factor=1.0, total_iters=warmup)
    if main is None:
        return first
    return lr_scheduler.SequentialLR(opt, [first, main], milestones=[warmup])


def group_of(spec, name):
    """The index of the first param group whose globs match `name`, or -1."""
    for g, group in enumerate(_snake_keys(spec).get("param_groups", [])):
        if any(fnmatch.fnmatchcase(name, p) for p in group["params"]):
            return g
    return -1


def torch_optimizers(spec, named_params):
    """[(optimizer, scheduler or None)], one per parameter group present in
    `named_params` (name, tensor pairs), in group order (-1, the default
    group, first). Each optimizer steps its parameters one by one
    (foreach=False), so splitting the groups changes no value; it lets every
    group have its own scheduler, as pshard's groups do."""
    spec = _snake_keys(spec)
    base = spec.get("hyper_parameters", {})
    groups = {}
    for name, param in named_params:
        groups.setdefault(group_of(spec, name), []).append(param)
    cls = TORCH_CLASSES[spec["kind"].upper()]
    out = []
    for g in sorted(groups):
        hp = dict(base)
        schedule = base.get("lr_schedule")
        if g >= 0:
            own = spec["param_groups"][g].get("hyper_parameters", {})
            hp.update(own)
            schedule = own.get("lr_schedule", schedule)
        # Adagrad reads initial_accumulator_value from its constructor only
        # (torch 1.13 fills "sum" in __init__): one optimizer per group
        # passes each group's own there.
        optimizer = cls([{"params": groups[g]}], foreach=False,
                        **torch_kwargs(hp))
        out.append((optimizer, make_scheduler(optimizer, schedule)))
    return out
