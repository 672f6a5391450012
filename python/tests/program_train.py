"""A user's torch training script, as a `program` job runs it: each rank
opens its session from the agent's environment (pshard.init(), coordinator
mode), resumes from the job's checkpoint when its epoch has one (writing
down the program state every rank saved with it), trains parity_common's
model with pshard.torch.ShardedOptimizer on its share of each batch,
reports progress, saves checkpoints (with its step and rank as program
state) when the spec asks, and saves its final parameters.

    program_train.py OUT_DIR OPTIMIZER [--steps N] [--no-init-on-rank R]
                     [--hold-rank R --hold-after S]

--steps N: train N steps (default parity_common.STEPS).
--no-init-on-rank R: rank R never calls pshard.init() and instead waits
(a program that forgot it); with R = all, no rank calls it and every rank
exits 0 (a program using only torch.distributed, or nothing of pshard).
--hold-rank R --hold-after S: on a first run (PSHARD_RESTART_COUNT 0), rank
R stops after step S until it is killed (2 minutes at most), so that a test
can kill its worker while the other ranks wait for it inside step S + 1.
--reopen-after S: after step S every rank closes its session and opens a
new one (pshard.init() again), with a new ShardedOptimizer over the model.
"""

import argparse
import json
import os
import time
import warnings

import torch

import parity_common as common
import precision_common as mixed
import pshard
import pshard.checkpoint
import pshard.torch


def write_atomically(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("optimizer")
    parser.add_argument("--steps", type=int, default=common.STEPS)
    parser.add_argument("--no-init-on-rank")
    parser.add_argument("--hold-rank", type=int)
    parser.add_argument("--hold-after", type=int)
    parser.add_argument("--reopen-after", type=int)
    return parser.parse_args()


def main():
    args = parse_args()
    rank = int(os.environ["RANK"])
    restarts = pshard.checkpoint.restart_count()
    write_atomically(os.path.join(args.out, f"pid-{rank}-{restarts}"),
                     str(os.getpid()))
    if restarts == 0:
        write_atomically(os.path.join(args.out, f"pid-{rank}"), str(os.getpid()))
    if args.no_init_on_rank == "all":
        print(f"rank {rank}: not using pshard", flush=True)
        return
    if args.no_init_on_rank is not None and int(args.no_init_on_rank) == rank:
        print(f"rank {rank}: never calls pshard.init()", flush=True)
        time.sleep(600)  # until the agent stops it
        return

    torch.set_num_threads(1)
    session = pshard.init()
    world = session.world_size
    model = common.make_model()

    def sharded_optimizer():
        return pshard.torch.ShardedOptimizer(
            model, optimizer=common.OPTIMIZERS[args.optimizer][0],
            bucket_cap_mb=common.BUCKET_CAP_MB)

    optimizer = sharded_optimizer()
    # The configurations a torch lr scheduler drives (else None).
    scheduler = common.pshard_scheduler(args.optimizer, optimizer)
    # The spec's overlap_param_broadcast and precision, as the session
    # took them.
    write_atomically(os.path.join(args.out, f"overlap-{rank}"),
                     str(optimizer.overlap_param_broadcast))
    write_atomically(os.path.join(args.out, f"dtypes-{rank}"),
                     f"{optimizer.param_dtype} {optimizer.reduce_dtype}")
    start = pshard.checkpoint.load(optimizer)
    if start > 0:
        # What each rank saved with the checkpoint (and None for ranks it
        # did not have), for the test to check.
        states = {}
        for r in range(world + 2):
            state = pshard.checkpoint.program_state(optimizer, rank=r)
            states[r] = None if state is None else json.loads(state)
        write_atomically(os.path.join(args.out, f"state-{rank}-{restarts}"),
                         json.dumps(states))
    if scheduler is not None:
        # A torch scheduler's values are a function of its step: brought to
        # the checkpoint's, they reach pshard before the next step's first
        # gradient.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "step() before optimizer.step()"
            for _ in range(start):
                scheduler.step()
    print(f"rank {rank} of {world}: restart {restarts}, resumed from step "
          f"{start}", flush=True)
    write_atomically(os.path.join(args.out, f"resumed-{rank}-{restarts}"),
                     str(start))
    share = common.BATCH // world
    for step in range(start + 1, args.steps + 1):
        x, y = common.batch(step)
        x = x[rank * share:(rank + 1) * share]
        y = y[rank * share:(rank + 1) * share]
        optimizer.zero_grad()
        # In the model's dtype (float32 unless the spec's precision says).
        loss = mixed.loss_of(model, x, y, optimizer.param_dtype)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        mean = session.average_loss(loss.item())
        session.report(step=step, loss=mean, samples=share)
        print(f"rank {rank} step {step} loss {mean:.6f}", flush=True)
        if pshard.checkpoint.due(step, args.steps):
            # The program's own state rides along (here: where it is).
            pshard.checkpoint.save(optimizer, step, state=json.dumps(
                {"step": step, "rank": rank}).encode())
        if restarts == 0 and rank == args.hold_rank and step == args.hold_after:
            print(f"rank {rank}: holding after step {step}", flush=True)
            time.sleep(120)  # until the test kills this worker
        if step == args.reopen_after:
            session.close()  # the model keeps its values
            session = pshard.init()
            optimizer = sharded_optimizer()
            print(f"rank {rank}: reopened its session after step {step}",
                  flush=True)
    optimizer.wait_parameters()  # read outside a forward (overlap)
    torch.save({n: p.detach().clone() for n, p in model.named_parameters()},
               os.path.join(args.out, f"final-rank{rank}.pt"))
    session.close()


if __name__ == "__main__":
    main()
