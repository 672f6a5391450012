"""One rank of the buffers test: a model with batch norm, initialised
differently on each rank (its parameters and a buffer), trained with
broadcast_buffers on (one session) and off (another), each step's batch
this rank's own, the last step in two micro-batches (the first under
no_sync()), then one evaluation forward. Saves the state the optimizer
started from, the parameters, the buffers after training and the
evaluation's output.

    RANK=r WORLD_SIZE=n buffers_rank.py STORE_BASE OUT_DIR
"""

import contextlib
import os
import sys

import torch

import pshard
import pshard.torch

# Micro-batches per step: the last accumulates two, so the buffers it leaves
# show that its second forward (after one under no_sync) synced nothing.
MICRO_BATCHES = [1, 1, 2]
SPEC = {"kind": "SGD", "hyper_parameters": {"lr": 0.1, "momentum": 0.9}}


def make_model(seed=7):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8),
                               torch.nn.ReLU(), torch.nn.Linear(8, 2))


def batch(step, micro, rank):
    """This rank's batch: each rank's differs, so do its batch statistics."""
    generator = torch.Generator().manual_seed(1000 * step + 10 * micro + rank)
    return torch.randn(5, 6, generator=generator) * (rank + 1) + rank


EVAL_INPUT = torch.linspace(-1, 1, 18).reshape(3, 6)


def run(broadcast, store, out):
    os.makedirs(store, exist_ok=True)
    os.environ["PSHARD_LOCAL_STORE"] = store
    session = pshard.Session.open()
    rank = session.rank
    # Each rank initialises its own way; the optimizer starts every rank
    # from rank 0's values, as DDP does.
    model = make_model(seed=7 + rank)
    with torch.no_grad():
        model[1].running_var.fill_(1 + rank)
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=SPEC, session=session, bucket_cap_mb=0.0001,
        broadcast_buffers=broadcast)
    initial = {n: t.detach().clone() for n, t in model.state_dict().items()}
    for step, micros in enumerate(MICRO_BATCHES, start=1):
        optimizer.zero_grad()
        for micro in range(micros):
            # The forward inside no_sync() too, as under DDP.
            with (optimizer.no_sync() if micro < micros - 1
                  else contextlib.nullcontext()):
                loss = model(batch(step, micro, rank)).pow(2).mean() / micros
                loss.backward()
        optimizer.step()
    trained = {n: b.clone() for n, b in model.named_buffers()}
    model.eval()
    with torch.no_grad():
        evaluated = model(EVAL_INPUT)
    torch.save({"initial": initial,
                "params": {n: p.detach().clone()
                           for n, p in model.named_parameters()},
                "buffers": trained, "eval": evaluated},
               os.path.join(out, f"{'on' if broadcast else 'off'}-rank{rank}"
                                 ".pt"))
    session.close()


def main():
    store_base, out = sys.argv[1], sys.argv[2]
    # Broadcasts of 64 bytes at most: several per sync, and tensors larger
    # than one (a weight, 192 bytes) alone.
    pshard.torch._BROADCAST_CHUNK_BYTES = 64
    for broadcast in (True, False):
        run(broadcast, os.path.join(store_base, str(broadcast)), out)


if __name__ == "__main__":
    main()
