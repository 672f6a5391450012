"""A user's torch training script, as a `program` job runs it: each rank
opens its session from the agent's environment (pshard.init(), coordinator
mode), trains parity_common's model with pshard.torch.ShardedOptimizer on
its share of each batch, reports progress, and saves its final parameters.

    program_train.py OUT_DIR OPTIMIZER [--no-init-on-rank R]

--no-init-on-rank R: rank R never calls pshard.init() and instead waits
(a program that forgot it); with R = all, no rank calls it and every rank
exits 0 (a program using only torch.distributed, or nothing of pshard).
"""

import os
import sys
import time

import torch

import parity_common as common
import pshard
import pshard.torch


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    out, optimizer_name = sys.argv[1], sys.argv[2]
    no_init = sys.argv[4] if len(sys.argv) > 4 and sys.argv[3] == "--no-init-on-rank" else None
    rank = int(os.environ["RANK"])
    write_atomically(os.path.join(out, f"pid-{rank}"), str(os.getpid()))
    if no_init == "all":
        print(f"rank {rank}: not using pshard", flush=True)
        return
    if no_init is not None and int(no_init) == rank:
        print(f"rank {rank}: never calls pshard.init()", flush=True)
        time.sleep(600)  # until the agent stops it
        return

    torch.set_num_threads(1)
    session = pshard.init()
    world = session.world_size
    model = common.make_model()
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=common.OPTIMIZERS[optimizer_name][0],
        bucket_cap_mb=common.BUCKET_CAP_MB)
    share = common.BATCH // world
    for step in range(1, common.STEPS + 1):
        x, y = common.batch(step)
        x = x[rank * share:(rank + 1) * share]
        y = y[rank * share:(rank + 1) * share]
        optimizer.zero_grad()
        loss = common.loss_of(model, x, y)
        loss.backward()
        optimizer.step()
        mean = session.average_loss(loss.item())
        session.report(step=step, loss=mean, samples=share)
        print(f"rank {rank} step {step} loss {mean:.6f}", flush=True)
    torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
               os.path.join(out, f"final-rank{rank}.pt"))
    session.close()


if __name__ == "__main__":
    main()
