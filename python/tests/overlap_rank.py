"""One rank of the overlap test: for each policy, the same training with
overlap_param_broadcast off and on (each its own session), on a model whose
forward calls its modules in another order than they were registered (and
so bucketed). Saves each step's loss, the parameters after the last step,
the order in which the forward pre-hooks waited for parameters in the last
step's forward, and the optimizer state.

    RANK=r WORLD_SIZE=n overlap_rank.py STORE_BASE OUT_DIR
"""

import os
import sys

import torch

import pshard
import pshard.torch
from pshard import _capi

STEPS = 6
BATCH = 12  # divisible by 2 and 3
BUCKET_CAP_MB = 0.00005  # a bucket or two per layer
POLICIES = ["BALANCED", "SHARDED"]
SPEC = {"kind": "ADAM", "hyper_parameters": {"lr": 0.01,
                                             "weight_decay": 0.01}}


class Shuffled(torch.nn.Module):
    """Registered c, a, b (and a scale of its own); the forward runs a, b,
    c: the forward order is neither the registration order nor the bucket
    order (gradients become ready c, b, a)."""

    def __init__(self):
        super().__init__()
        self.c = torch.nn.Linear(9, 3)
        self.a = torch.nn.Linear(7, 11)
        self.b = torch.nn.Sequential(torch.nn.Linear(11, 9), torch.nn.Tanh())
        self.scale = torch.nn.Parameter(torch.tensor(1.5))

    def forward(self, x):
        return self.c(self.b(torch.relu(self.a(x)))) * self.scale

    # The forward's order of the parameters, by name.
    FORWARD_ORDER = ["scale", "a.weight", "a.bias", "b.0.weight", "b.0.bias",
                     "c.weight", "c.bias"]


def batch(step):
    generator = torch.Generator().manual_seed(step)
    return (torch.randn(BATCH, 7, generator=generator),
            torch.randn(BATCH, 3, generator=generator))


def run(policy, overlap, store, out):
    os.makedirs(store, exist_ok=True)
    os.environ["PSHARD_LOCAL_STORE"] = store
    os.environ["PSHARD_LOCAL_ASSIGNMENT_POLICY"] = policy
    session = pshard.Session.open()
    rank, world = session.rank, session.world_size
    torch.manual_seed(1234)
    model = Shuffled()
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=SPEC, bucket_cap_mb=BUCKET_CAP_MB, session=session,
        overlap_param_broadcast=overlap)
    assert optimizer.overlap_param_broadcast == overlap
    names = [n for n, _ in model.named_parameters()]
    # Which parameters the forward pre-hooks wait for, in order.
    waits = []
    check = _capi.check

    def recording_check(call, *args):
        if call == "pshardWaitParameter":
            waits.append(names[args[1]])
        return check(call, *args)

    share = BATCH // world
    losses = []
    for step in range(1, STEPS + 1):
        x, y = batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        optimizer.zero_grad()
        if step == STEPS:
            pshard.torch._capi.check = recording_check
        loss = torch.nn.functional.mse_loss(model(x), y)
        pshard.torch._capi.check = check
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    state = optimizer.state_dict()  # waits for the last step's updates
    session.close()  # so does close: the model keeps the updated values
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    torch.save({"losses": losses, "params": params, "waits": waits,
                "state": state["state"]}, out)


def main():
    store_base, out_dir = sys.argv[1], sys.argv[2]
    rank = os.environ["RANK"]
    for policy in POLICIES:
        for overlap in (False, True):
            name = f"{policy}-{'on' if overlap else 'off'}"
            run(policy, overlap, os.path.join(store_base, name),
                os.path.join(out_dir, f"{name}-rank{rank}.pt"))


if __name__ == "__main__":
    main()
