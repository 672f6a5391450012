"""A small decoder-only transformer language model, character by character,
on the fortunes Debian ships, trained data-parallel with pshard's sharded
AdamW (no DDP wrapper).

Run by `pshardctl local examples/torch_lm/job.json --workers 2` (the agent
sets the environment pshard.init() reads), or, without a coordinator, as N
plain processes in pshard's local test mode (see README.md).

Every rank builds the same model from the same seed; step s's global batch
is drawn from (seed, s) alone and rank r takes its r-th slice (model.batch).
"""

import argparse
import json
import os
import sys

import torch

import pshard
import pshard.checkpoint
import pshard.torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as lm  # noqa: E402  (this example's model, beside the script)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=16,
                        help="windows per rank per step")
    parser.add_argument("--context", type=int, default=64,
                        help="characters per window")
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corpus", default=lm.FORTUNES_DIR,
                        help="a directory of fortune files (default: "
                        "Debian's fortunes package)")
    parser.add_argument("--bucket-cap-mb", type=float, default=0.25,
                        help="small, so that the small model has several "
                        "buckets to shard")
    parser.add_argument("--comm-mode", default="reduce_broadcast",
                        choices=["reduce_broadcast", "allreduce_broadcast"])
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--sample-chars", type=int, default=200,
                        help="characters rank 0 samples at the end")
    parser.add_argument("--metrics-out", default=None,
                        help="write this rank's losses as JSON (tests read "
                        "it)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "context", "width", "layers",
                 "heads", "log_every"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


@torch.no_grad()
def validation_loss(model, ids, args, device, batches=4):
    """The mean loss over a few fixed windows of the held-out text."""
    losses = []
    for step in range(1, batches + 1):
        inputs, targets = lm.batch(ids, args.seed, 0, 1, step,
                                   args.batch_size, args.context)
        losses.append(model.loss(inputs.to(device), targets.to(device)).item())
    return sum(losses) / len(losses)


def main(argv):
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    session = pshard.init()
    rank, world = session.rank, session.world_size
    # The worker's device: cuda:N on a GPU worker (NCCL), else the CPU (Gloo).
    device = torch.device(pshard.device())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    text = lm.load_corpus(args.corpus)
    vocabulary = lm.Vocabulary(text)
    train_ids, validation_ids = lm.split_corpus(vocabulary.encode(text))
    model = lm.CharTransformer(len(vocabulary), context=args.context,
                               width=args.width, layers=args.layers,
                               heads=args.heads).to(device)
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=lm.optimizer_spec(args.lr, args.weight_decay),
        bucket_cap_mb=args.bucket_cap_mb, comm_mode=args.comm_mode)
    if rank == 0:
        print(f"torch_lm: {len(text)} characters of fortunes, vocabulary "
              f"{len(vocabulary)}, {sum(p.numel() for p in model.parameters())}"
              f" parameters, {world} ranks x {args.batch_size} windows of "
              f"{args.context}, on {device}", flush=True)

    # A restarted job (the spec's max_restarts and checkpoint) resumes from
    # its latest complete checkpoint; a first run starts at step 1.
    start = pshard.checkpoint.load(optimizer)
    if start > 0 and rank == 0:
        print(f"resumed from step {start} (restart "
              f"{pshard.checkpoint.restart_count()})", flush=True)

    losses = []
    for step in range(start + 1, args.steps + 1):
        inputs, targets = lm.batch(train_ids, args.seed, rank, world, step,
                                   args.batch_size, args.context)
        optimizer.zero_grad()
        loss = model.loss(inputs, targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        session.report(step=step, loss=losses[-1], samples=len(inputs))
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            mean = session.average_loss(losses[-1])
            if rank == 0:
                print(f"step {step:5d}  loss {mean:.4f}", flush=True)
        if pshard.checkpoint.due(step, args.steps):
            pshard.checkpoint.save(optimizer, step)

    held_out = validation_loss(model, validation_ids, args, device)
    if rank == 0:
        print(f"validation loss {held_out:.4f}; this rank owned buckets "
              f"{optimizer.owned_buckets()}", flush=True)
        if args.sample_chars > 0:
            generator = torch.Generator().manual_seed(args.seed)
            sample = model.generate(vocabulary.encode("The "),
                                    args.sample_chars, generator)
            print("sample: The " + vocabulary.decode(sample), flush=True)
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            # Every rank holds the same parameters after each step: a test
            # compares this sum across ranks.
            checksum = sum(p.double().sum().item() for p in model.parameters())
            json.dump({"rank": rank, "world_size": world, "losses": losses,
                       "parameter_checksum": checksum,
                       "validation_loss": held_out}, f)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
