"""A small CNN on scikit-learn's bundled 8x8 digits images, trained
data-parallel with pshard's sharded AdamW (no DDP wrapper).

Run by `pshardctl local examples/torch_digits/job.json --workers 2` (the
agent sets the environment pshard.init() reads), or, without a coordinator,
as N plain processes in pshard's local test mode (see README.md).

The data is offline: python3-sklearn ships the images. Every rank builds the
same model from the same seed; step s's global batch is drawn from (seed, s)
alone and rank r takes its r-th slice, so a run is a pure function of the
seed, the world size and the arguments.
"""

import argparse
import json
import sys

import torch
import torch.nn.functional as F

import pshard
import pshard.checkpoint
import pshard.torch

# Images held out for the final test accuracy (of 1797).
TEST_IMAGES = 360


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="images per rank per step")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--weight-decay", type=float, default=0.01,
                        help="AdamW's decoupled weight decay (not on biases)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bucket-cap-mb", type=float, default=0.05,
                        help="small, so that the tiny model has several "
                        "buckets to shard")
    parser.add_argument("--comm-mode", default="reduce_broadcast",
                        choices=["reduce_broadcast", "allreduce_broadcast"])
    parser.add_argument("--log-every", type=int, default=25)
    parser.add_argument("--metrics-out", default=None,
                        help="write this rank's losses and test accuracy "
                        "here as JSON (tests read it)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or args.log_every < 1:
        parser.error("--steps, --batch-size and --log-every must be >= 1")
    return args


def load_data(seed):
    """The digits as float images in [0, 1] and labels, split into train and
    test by a permutation drawn from `seed`."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1)
    images /= 16.0
    labels = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(labels),
                           generator=torch.Generator().manual_seed(seed))
    test, train = order[:TEST_IMAGES], order[TEST_IMAGES:]
    return (images[train], labels[train]), (images[test], labels[test])


def batch_indices(seed, rank, world_size, step, batch_size, num_examples):
    """Rank `rank`'s examples for `step`: its slice of a global batch drawn
    from (seed, step) only, so every rank agrees without talking and the
    union over ranks is the batch one process would take."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    global_batch = torch.randint(num_examples, (batch_size * world_size,),
                                 generator=generator)
    return global_batch[rank * batch_size:(rank + 1) * batch_size]


class DigitsCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 4 * 4, 64)
        self.fc2 = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def main(argv):
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    session = pshard.init()
    rank, world = session.rank, session.world_size
    # The worker's device: cuda:N on a GPU worker (NCCL), else the CPU (Gloo).
    device = torch.device(pshard.device())
    if device.type == "cuda":
        torch.cuda.set_device(device)
    (train_x, train_y), (test_x, test_y) = (
        (x.to(device), y.to(device)) for x, y in load_data(args.seed))
    model = DigitsCNN().to(device)
    optimizer = pshard.torch.ShardedOptimizer(
        model,
        optimizer={
            "kind": "ADAMW",
            "hyper_parameters": {"lr": args.lr,
                                 "weight_decay": args.weight_decay},
            # No weight decay on biases (the usual AdamW recipe).
            "param_groups": [{"params": ["*.bias"],
                              "hyper_parameters": {"weight_decay": 0}}],
        },
        bucket_cap_mb=args.bucket_cap_mb, comm_mode=args.comm_mode)
    if rank == 0:
        print(f"torch_digits: {len(train_y)} train / {len(test_y)} test "
              f"images, {sum(p.numel() for p in model.parameters())} "
              f"parameters, {world} ranks x {args.batch_size} images, on "
              f"{device}",
              flush=True)

    # A restarted job (the spec's max_restarts and checkpoint) resumes from
    # its latest complete checkpoint; a first run starts at step 1.
    start = pshard.checkpoint.load(optimizer)
    if start > 0 and rank == 0:
        print(f"resumed from step {start} (restart "
              f"{pshard.checkpoint.restart_count()})", flush=True)

    losses = []
    for step in range(start + 1, args.steps + 1):
        index = batch_indices(args.seed, rank, world, step, args.batch_size,
                              len(train_y)).to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(train_x[index]), train_y[index])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        session.report(step=step, loss=losses[-1], samples=len(index))
        if step == 1 or step % args.log_every == 0 or step == args.steps:
            mean = session.average_loss(losses[-1])
            if rank == 0:
                print(f"step {step:5d}  loss {mean:.4f}", flush=True)
        if pshard.checkpoint.due(step, args.steps):
            pshard.checkpoint.save(optimizer, step)

    with torch.no_grad():
        predicted = model(test_x).argmax(dim=1)
    accuracy = (predicted == test_y).float().mean().item()
    if rank == 0:
        print(f"test accuracy {accuracy:.4f} ({len(test_y)} images); this "
              f"rank owned buckets {optimizer.owned_buckets()}", flush=True)
    if args.metrics_out:
        with open(args.metrics_out, "w") as f:
            # Every rank holds the same parameters after each step: a test
            # compares this sum across ranks.
            checksum = sum(p.double().sum().item() for p in model.parameters())
            json.dump({"rank": rank, "world_size": world, "losses": losses,
                       "parameter_checksum": checksum,
                       "test_accuracy": accuracy}, f)
    session.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
