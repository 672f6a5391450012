"""What the parity test's ranks and its single-process reference share: the
model (odd shapes, a scalar), the optimizers (with two parameter groups),
the data, and one training loop."""

import torch

STEPS = 5
BATCH = 12  # divisible by 2 and 3: every rank's share is the same size
# Small enough that the model spans several buckets, owned by different
# ranks (each bucket is at least one parameter).
BUCKET_CAP_MB = 0.0001

def _lion(groups, **kwargs):
    """Lion as lion-pytorch writes it (torch 1.13 has none):
    worker/optim/testdata/torch_optim.py, on run_python_test.sh's PYTHONPATH
    (imported here, when a reference needs it, so that programs importing
    this module need no such path)."""
    from torch_optim import Lion
    return Lion(groups, **kwargs)


# OptimizerSpec JSON and the torch optimizer it stands for. The second
# group ("*.bias" and "scale") has its own lr and no weight decay.
OPTIMIZERS = {
    "sgd_momentum": (
        {"kind": "SGD",
         "hyper_parameters": {"lr": 0.05, "momentum": 0.9,
                              "weight_decay": 0.01},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1,
                                                "weight_decay": 0}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9,
                                       weight_decay=0.01),
        {"lr": 0.1, "weight_decay": 0}),
    "adam": (
        {"kind": "ADAM",
         "hyper_parameters": {"lr": 0.01, "betas": [0.8, 0.99],
                              "weight_decay": 0.01},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02,
                                                "weight_decay": 0}}]},
        lambda groups: torch.optim.Adam(groups, lr=0.01, betas=(0.8, 0.99),
                                        weight_decay=0.01),
        {"lr": 0.02, "weight_decay": 0}),
    "adamw": (
        {"kind": "ADAMW",
         "hyper_parameters": {"lr": 0.01, "eps": 1e-6, "weight_decay": 0.1},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.005,
                                                "weight_decay": 0}}]},
        lambda groups: torch.optim.AdamW(groups, lr=0.01, eps=1e-6,
                                         weight_decay=0.1),
        {"lr": 0.005, "weight_decay": 0}),
    # The same optimizers under a learning-rate schedule (every group's lr
    # from its own base): linear warmup then cosine, and StepLR.
    "adamw_warmup_cosine": (
        {"kind": "ADAMW",
         "hyper_parameters": {"lr": 0.01, "weight_decay": 0.1,
                              "lr_schedule": {"kind": "COSINE",
                                              "warmup_steps": 2,
                                              "warmup_start_factor": 0.25,
                                              "t_max": 4, "eta_min": 0.001}},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02,
                                                "weight_decay": 0}}]},
        lambda groups: torch.optim.AdamW(groups, lr=0.01, weight_decay=0.1),
        {"lr": 0.02, "weight_decay": 0}),
    "sgd_step": (
        {"kind": "SGD",
         "hyper_parameters": {"lr": 0.05, "momentum": 0.9,
                              "lr_schedule": {"kind": "STEP", "step_size": 2,
                                              "gamma": 0.5}},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9),
        {"lr": 0.1}),
    # Issue 15 item 5's kinds, each with its own options.
    "adam_amsgrad": (
        {"kind": "ADAM",
         "hyper_parameters": {"lr": 0.01, "amsgrad": True,
                              "weight_decay": 0.01},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02,
                                                "amsgrad": False}}]},
        lambda groups: torch.optim.Adam(groups, lr=0.01, amsgrad=True,
                                        weight_decay=0.01),
        {"lr": 0.02, "amsgrad": False}),
    "adagrad": (
        {"kind": "ADAGRAD",
         "hyper_parameters": {"lr": 0.05, "lr_decay": 0.01,
                              "weight_decay": 0.001,
                              "initial_accumulator_value": 0.1},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1, "eps": 1e-6}}]},
        lambda groups: torch.optim.Adagrad(groups, lr=0.05, lr_decay=0.01,
                                           weight_decay=0.001,
                                           initial_accumulator_value=0.1),
        {"lr": 0.1, "eps": 1e-6}),
    "rmsprop": (
        {"kind": "RMSPROP",
         "hyper_parameters": {"lr": 0.005, "alpha": 0.9, "centered": True,
                              "momentum": 0.9, "weight_decay": 0.001},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"centered": False,
                                                "momentum": 0}}]},
        lambda groups: torch.optim.RMSprop(groups, lr=0.005, alpha=0.9,
                                           centered=True, momentum=0.9,
                                           weight_decay=0.001),
        {"centered": False, "momentum": 0}),
    "lion": (
        {"kind": "LION",
         "hyper_parameters": {"lr": 0.001, "betas": [0.9, 0.99],
                              "weight_decay": 0.1},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.003,
                                                "weight_decay": 0}}]},
        lambda groups: _lion(groups, lr=0.001, betas=(0.9, 0.99),
                             weight_decay=0.1),
        {"lr": 0.003, "weight_decay": 0}),
    # Global gradient-norm clipping (torch.nn.utils.clip_grad_norm_ between
    # backward and step): limits the gradients exceed at every step (they
    # must be clipped) and limits they never reach, L2 and infinity norms.
    "adam_clip_l2": (
        {"kind": "ADAM", "hyper_parameters": {"lr": 0.01},
         "max_grad_norm": 0.05,
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02}}]},
        lambda groups: torch.optim.Adam(groups, lr=0.01),
        {"lr": 0.02}),
    "sgd_noclip_l2": (
        {"kind": "SGD", "hyper_parameters": {"lr": 0.05, "momentum": 0.9},
         "max_grad_norm": 100.0, "norm_type": 2,
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9),
        {"lr": 0.1}),
    "sgd_clip_inf": (
        {"kind": "SGD", "hyper_parameters": {"lr": 0.05, "momentum": 0.9},
         "max_grad_norm": 0.02, "norm_type": "Infinity",
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9),
        {"lr": 0.1}),
    "adamw_noclip_inf": (
        {"kind": "ADAMW", "hyper_parameters": {"lr": 0.01},
         "max_grad_norm": 100.0, "norm_type": "Infinity",
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.005}}]},
        lambda groups: torch.optim.AdamW(groups, lr=0.01),
        {"lr": 0.005}),
    # torch's own lr schedulers driving ShardedOptimizer's param_groups
    # (TORCH_SCHEDULED below), one rate per group: no lr_schedule here.
    "adamw_torch_onecycle": (
        {"kind": "ADAMW",
         "hyper_parameters": {"lr": 0.01, "weight_decay": 0.1},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02,
                                                "weight_decay": 0}}]},
        lambda groups: torch.optim.AdamW(groups, lr=0.01, weight_decay=0.1),
        {"lr": 0.02, "weight_decay": 0}),
    "sgd_torch_lambda": (
        {"kind": "SGD", "hyper_parameters": {"lr": 0.05, "momentum": 0.9},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9),
        {"lr": 0.1}),
    # CyclicLR cycles the lr and the momentum of each group.
    "sgd_torch_cyclic": (
        {"kind": "SGD", "hyper_parameters": {"lr": 0.05, "momentum": 0.9},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.1,
                                                "momentum": 0.8}}]},
        lambda groups: torch.optim.SGD(groups, lr=0.05, momentum=0.9),
        {"lr": 0.1, "momentum": 0.8}),
    # Gradient accumulation (ACCUMULATION below): Adam over 4 micro-batches
    # per step, with no_sync, against one batch 4 times larger.
    "adam_accum4": (
        {"kind": "ADAM", "hyper_parameters": {"lr": 0.01},
         "param_groups": [{"params": ["*.bias", "scale"],
                           "hyper_parameters": {"lr": 0.02}}]},
        lambda groups: torch.optim.Adam(groups, lr=0.01),
        {"lr": 0.02}),
}

# Micro-batches per step: micro-batch m (1..N) of step s is
# batch((s - 1) * N + m); the reference steps once on all N together.
ACCUMULATION = {"adam_accum4": 4}


def micro_batches(optimizer_name):
    return ACCUMULATION.get(optimizer_name, 1)


def step_batches(optimizer_name, step):
    """The batches of optimizer step `step` (one, or its micro-batches)."""
    n = micro_batches(optimizer_name)
    return [batch((step - 1) * n + m) for m in range(1, n + 1)]


def clipping(optimizer_name):
    """(max_norm, norm_type) of the configuration's max_grad_norm, or None."""
    spec = OPTIMIZERS[optimizer_name][0]
    if "max_grad_norm" not in spec:
        return None
    return spec["max_grad_norm"], float(spec.get("norm_type", 2))


def _warmup_cosine(optimizer):
    import warnings
    from torch.optim import lr_scheduler
    warnings.simplefilter("ignore")  # SequentialLR's step(0) deprecation
    return lr_scheduler.SequentialLR(
        optimizer,
        [lr_scheduler.LinearLR(optimizer, 0.25, 1.0, total_iters=2),
         lr_scheduler.CosineAnnealingLR(optimizer, T_max=4, eta_min=0.001)],
        milestones=[2])


# torch's own schedulers for the scheduled configurations, stepped once
# after every optimizer step.
SCHEDULERS = {
    "adamw_warmup_cosine": _warmup_cosine,
    "sgd_step": lambda optimizer: torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=2, gamma=0.5),
    "adamw_torch_onecycle": lambda optimizer:
        torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=[0.01, 0.02], total_steps=STEPS + 1),
    # A rate per group: the groups must be in the same order on both sides.
    "sgd_torch_lambda": lambda optimizer: torch.optim.lr_scheduler.LambdaLR(
        optimizer, [lambda s: 0.5 ** s, lambda s: 1.0 / (1 + s)]),
    "sgd_torch_cyclic": lambda optimizer: torch.optim.lr_scheduler.CyclicLR(
        optimizer, base_lr=[0.02, 0.05], max_lr=[0.05, 0.1], step_size_up=3,
        base_momentum=0.7, max_momentum=0.9),
}
# The configurations whose pshard side steps the same torch scheduler on
# ShardedOptimizer (param_groups' "lr", and OneCycleLR's "betas" and
# CyclicLR's "momentum", through pshardSetHyperParameters); the others'
# pshard side follows the spec's lr_schedule.
TORCH_SCHEDULED = {"adamw_torch_onecycle", "sgd_torch_lambda",
                   "sgd_torch_cyclic"}


def pshard_scheduler(optimizer_name, optimizer):
    """The torch scheduler the pshard side steps after every step() of
    `optimizer` (a ShardedOptimizer), or None."""
    if optimizer_name not in TORCH_SCHEDULED:
        return None
    return SCHEDULERS[optimizer_name](optimizer)
COMM_MODES = ["reduce_broadcast", "allreduce_broadcast"]


def configurations():
    return [(o, c) for o in OPTIMIZERS for c in COMM_MODES]


def second_group(name):
    return name.endswith(".bias") or name == "scale"


class Net(torch.nn.Module):
    """Odd shapes on purpose: 7x5, 5, 3x5, 3, a scalar, 3x1x3 (none a
    multiple of a vector width)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(7, 5)
        self.fc2 = torch.nn.Linear(5, 3)
        self.scale = torch.nn.Parameter(torch.tensor(1.5))
        self.mix = torch.nn.Parameter(torch.randn(3, 1, 3) * 0.3)

    def forward(self, x):
        y = self.fc2(torch.tanh(self.fc1(x))) * self.scale
        return y + y @ self.mix.view(3, 3)


def make_model():
    torch.manual_seed(1234)  # every rank and the reference alike
    return Net()


def batch(step):
    generator = torch.Generator().manual_seed(step)
    x = torch.randn(BATCH, 7, generator=generator)
    y = torch.randn(BATCH, 3, generator=generator)
    return x, y


def loss_of(model, x, y):
    return torch.nn.functional.mse_loss(model(x), y)


def torch_reference_optimizer(optimizer_name, model):
    """The torch optimizer (two groups) and scheduler (or None) that
    `optimizer_name`'s OptimizerSpec stands for, over `model`."""
    _, make, group_options = OPTIMIZERS[optimizer_name]
    named = list(model.named_parameters())
    optimizer = make([
        {"params": [p for n, p in named if not second_group(n)]},
        dict(params=[p for n, p in named if second_group(n)], **group_options),
    ])
    scheduler = SCHEDULERS.get(optimizer_name, lambda _: None)(optimizer)
    return optimizer, scheduler


def reference(optimizer_name, steps=None, fresh_after=None):
    """The same optimizer in one process on the full batch: parameters after
    step 1 and after the last step (STEPS, or `steps`: then only those), by
    name; with clipping, also "grad_norms": what clip_grad_norm_ returned at
    each step. `fresh_after` S: a new optimizer (and scheduler) takes over
    the model after step S, as after a program reopens its session."""
    model = make_model()
    named = list(model.named_parameters())
    optimizer, scheduler = torch_reference_optimizer(optimizer_name, model)
    clip = clipping(optimizer_name)
    snapshots = {"grad_norms": []}
    last = STEPS if steps is None else steps
    for step in range(1, last + 1):
        if fresh_after is not None and step == fresh_after + 1:
            optimizer, scheduler = torch_reference_optimizer(optimizer_name,
                                                             model)
        batches = step_batches(optimizer_name, step)
        x = torch.cat([b[0] for b in batches])
        y = torch.cat([b[1] for b in batches])
        optimizer.zero_grad()
        loss_of(model, x, y).backward()
        if clip is not None:
            snapshots["grad_norms"].append(float(
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip[0],
                                               norm_type=clip[1])))
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if step in (1, last):
            snapshots[step] = {n: p.detach().clone() for n, p in named}
    return snapshots if steps is None else snapshots[steps]


def reference_lr(optimizer_name, step):
    """The default group's lr that optimizer step `step` (1, 2, ...) runs at
    under torch's scheduler: what the job's progress reports for it."""
    optimizer, scheduler = torch_reference_optimizer(optimizer_name,
                                                     make_model())
    for _ in range(step - 1):
        optimizer.step()  # no gradients: parameters stay, the schedule moves
        if scheduler is not None:
            scheduler.step()
    return optimizer.param_groups[0]["lr"]
