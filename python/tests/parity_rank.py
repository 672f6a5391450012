"""One rank of the parity test: every configuration in turn, each with its
own session (a fresh rendezvous directory under the store given), on this
rank's share of each batch; saves the parameters after step 1 and the last.

    RANK=r WORLD_SIZE=n parity_rank.py STORE_BASE OUT_DIR
"""

import os
import sys

import torch

import parity_common as common
import pshard
import pshard.torch


def run(optimizer_name, comm_mode, store, out):
    os.environ["PSHARD_LOCAL_STORE"] = store
    session = pshard.Session.open()
    rank, world = session.rank, session.world_size
    model = common.make_model()
    spec = common.OPTIMIZERS[optimizer_name][0]
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=spec, bucket_cap_mb=common.BUCKET_CAP_MB,
        comm_mode=comm_mode, session=session)
    scheduler = common.pshard_scheduler(optimizer_name, optimizer)
    share = common.BATCH // world
    snapshots = {"grad_norms": []}
    for step in range(1, common.STEPS + 1):
        # Micro-batches but the last accumulate inside no_sync; each loss
        # scaled by 1/N, as with DDP.
        batches = common.step_batches(optimizer_name, step)
        optimizer.zero_grad()
        losses = []
        for m, (x, y) in enumerate(batches):
            x = x[rank * share:(rank + 1) * share]
            y = y[rank * share:(rank + 1) * share]
            loss = common.loss_of(model, x, y) / len(batches)
            if m + 1 < len(batches):
                with optimizer.no_sync():
                    loss.backward()
            else:
                loss.backward()
            losses.append(loss.item())
        loss = torch.tensor(sum(losses))
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        snapshots["grad_norms"].append(optimizer.last_grad_norm)
        session.report(step=step, loss=session.average_loss(loss.item()),
                       samples=share * len(batches))
        if step in (1, common.STEPS):
            snapshots[step] = {n: p.detach().clone()
                               for n, p in model.named_parameters()}
    snapshots["owned"] = optimizer.owned_buckets()
    session.close()
    torch.save(snapshots, out)


def main():
    store_base, out_dir = sys.argv[1], sys.argv[2]
    rank = os.environ["RANK"]
    for optimizer_name, comm_mode in common.configurations():
        name = f"{optimizer_name}-{comm_mode}"
        store = os.path.join(store_base, name)
        os.makedirs(store, exist_ok=True)
        run(optimizer_name, comm_mode, store,
            os.path.join(out_dir, f"{name}-rank{rank}.pt"))


if __name__ == "__main__":
    main()
