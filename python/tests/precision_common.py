"""What the mixed-precision test's ranks and its reference share: the
configurations, the loss in the parameters' dtype, and the reference — one
process that does what N ranks under JobSpec.precision do, so that bf16
runs are compared with what they must compute, not only with fp32."""

import torch

import parity_common as common

# (optimizer, param_dtype, reduce_dtype, comm_mode[, options]). "env": the
# precision comes from the environment (the job spec's, as the agent sets
# it), not from ShardedOptimizer's arguments. options: "sharded" (the
# SHARDED assignment policy: every bucket cut over the ranks) and
# "overlap" (overlap_param_broadcast: the forward waits per module).
BF16, FP32 = torch.bfloat16, torch.float32
CONFIGURATIONS = [
    ("sgd_momentum", BF16, FP32, "reduce_broadcast"),
    ("adamw", BF16, FP32, "allreduce_broadcast"),
    ("adam_accum4", BF16, FP32, "reduce_broadcast"),
    ("sgd_momentum", BF16, BF16, "reduce_broadcast"),
    ("adamw", BF16, BF16, "reduce_broadcast"),
    ("adamw", FP32, BF16, "reduce_broadcast"),
    ("adamw", "env", "env", "reduce_broadcast"),
    ("adamw", BF16, BF16, "reduce_broadcast", ("sharded", "overlap")),
]
# What "env" stands for: PSHARD_PARAM_DTYPE / PSHARD_REDUCE_DTYPE.
ENV_DTYPES = (BF16, FP32)
DTYPE_NAMES = {BF16: "BF16", FP32: "FP32"}


def dtypes(config):
    _, param, reduce = config[:3]
    return ENV_DTYPES if param == "env" else (param, reduce)


def options(config):
    return config[4] if len(config) > 4 else ()


def name(config):
    optimizer, param, reduce, comm_mode = config[:4]
    suffix = "".join(f"-{o}" for o in options(config))
    if param == "env":
        return f"{optimizer}-env-{comm_mode}{suffix}"
    return (f"{optimizer}-{DTYPE_NAMES[param]}-{DTYPE_NAMES[reduce]}-"
            f"{comm_mode}{suffix}")


def loss_of(model, x, y, dtype):
    """The model computes in its parameters' dtype; the loss in float32."""
    return torch.nn.functional.mse_loss(model(x.to(dtype)).float(), y)


def reference(config, world):
    """The parameters (in param_dtype) after step 1 and after the last, by
    name: every rank's gradient computed by a param_dtype copy of the model
    on its share (micro-batches accumulated in param_dtype, as autograd
    does), converted to reduce_dtype and summed in rank order — rounded
    after each addition in bf16 — the mean rounded to reduce_dtype, and the
    torch optimizer stepping float32 master weights that started from the
    float32 model."""
    optimizer_name = config[0]
    param_dtype, reduce_dtype = dtypes(config)
    masters = common.make_model()
    optimizer, scheduler = common.torch_reference_optimizer(optimizer_name,
                                                            masters)
    compute = common.make_model().to(param_dtype)
    named_masters = list(masters.named_parameters())
    named_compute = dict(compute.named_parameters())
    share = common.BATCH // world
    snapshots = {}
    for step in range(1, common.STEPS + 1):
        with torch.no_grad():
            for n, m in named_masters:
                named_compute[n].copy_(m)
        batches = common.step_batches(optimizer_name, step)
        total = {}
        for r in range(world):
            compute.zero_grad(set_to_none=True)
            for x, y in batches:
                loss = loss_of(compute, x[r * share:(r + 1) * share],
                               y[r * share:(r + 1) * share], param_dtype)
                (loss / len(batches)).backward()
            for n, p in named_compute.items():
                g = p.grad.to(reduce_dtype)
                total[n] = g if r == 0 else total[n] + g
        for n, m in named_masters:
            m.grad = (total[n].float() / world).to(reduce_dtype).float()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        if step in (1, common.STEPS):
            snapshots[step] = {n: m.detach().to(param_dtype).clone()
                               for n, m in named_masters}
    return snapshots
