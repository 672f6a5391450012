"""One rank of session_test's failed first step, on 2 ranks: rank 1's
program leaves right after its optimizer is prepared; rank 0's first step
fails, naming rank 1, and its model still reads what it held before the
step, although that step had re-packed the buckets under it (gradients
become ready in the reverse of the registration order).

    RANK=r WORLD_SIZE=2 failed_step_rank.py STORE_BASE OUT_DIR
"""

import os
import sys

import torch

import pshard
import pshard.torch


class Backwards(torch.nn.Module):
    """Registered `second` first, called second: its gradients become ready
    first, against the registration order's guess, so the first step
    re-packs the buckets."""

    def __init__(self):
        super().__init__()
        self.second = torch.nn.Linear(64, 64)
        self.first = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.second(torch.tanh(self.first(x)))


def main():
    store, out = sys.argv[1], sys.argv[2]
    os.environ["PSHARD_LOCAL_STORE"] = store
    rank = int(os.environ["RANK"])
    torch.manual_seed(0)
    model = Backwards()
    session = pshard.Session.open()
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer={"kind": "SGD", "hyper_parameters": {"lr": 0.1}},
        bucket_cap_mb=0.01, session=session)
    if rank == 1:
        os._exit(0)  # gone without a step or a close
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model(torch.ones(4, 64)).sum().backward()
    error = None
    try:
        optimizer.step()
    except pshard.PshardError as e:
        error = str(e)
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    session.close()
    torch.save({"error": error, "before": before, "after": after},
               os.path.join(out, "rank0.pt"))


if __name__ == "__main__":
    main()
