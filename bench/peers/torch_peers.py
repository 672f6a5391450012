#!/usr/bin/python3
"""PyTorch peers that pshard's benchmarks are measured against, side by side.

Each mode runs N ranks as processes on loopback with torch.distributed over
Gloo (Debian's python3-torch, CPU) and prints one JSON line per run:

  seed      The seed change's per-bucket algorithm (hook_with_zero_step) written
            with torch.distributed, since PyTorch's own hook refuses Gloo: for
            every bucket all-reduce the gradient, the owner (bucket i -> rank
            i % N) runs Adam on it, the owner broadcasts the bucket; wait for all.
  ddp       Plain DistributedDataParallel with an unsharded Adam on every rank.
  ddp_zero  DDP + ZeroRedundancyOptimizer(Adam) on the MLP (end-to-end peer).
  ddp_mlp   DDP + unsharded Adam on the MLP.

The synthetic modes use fp32 parameter tensors of --tensor_numel elements
(pshard's `synthetic` workload: t0, t1, ... of 1 Mi elements) packed into
buckets exactly as pshard packs them (in reverse order, at most --bucket_mb
MiB each, a larger tensor alone); gradients are fixed pseudo-random tensors
(generated once, so their cost is not timed, whereas pshard's step includes
generating its gradients).

The MLP modes build the model pshard's `mlp` workload builds: nn.Linear layers
with ReLU between them, named layers.0.weight, layers.0.bias, layers.2...,
default nn.Linear initialisation (U(-1/sqrt(fan_in), 1/sqrt(fan_in))), a
teacher network of the same shape (U(-sqrt(6/fan_in), sqrt(6/fan_in))), inputs
x ~ N(0, 1), MSELoss, Adam. As in pshard, drawing the batch and the teacher's
forward pass are part of the timed step.

Every step starts after a barrier; a step's time is the slowest rank's; the
JSON line has the median over the steps after --warmup.

  /usr/bin/python3 bench/peers/torch_peers.py seed --world 2 --params 16M --bucket_mb 25
  /usr/bin/python3 bench/peers/torch_peers.py ddp_zero --world 2 --mlp_dims 512,1024,1024,512 --batch 128
"""

import argparse
import json
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_count(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in scale:
        return int(float(text[:-1]) * scale[text[-1].upper()])
    return int(text)


def tensor_sizes(num_params, tensor_numel):
    """pshard's synthetic parameters: tensors of tensor_numel, the last shorter."""
    sizes = []
    left = num_params
    while left > 0:
        sizes.append(min(tensor_numel, left))
        left -= sizes[-1]
    return sizes


def make_buckets(num_params, tensor_numel, bucket_mb):
    """Bucket sizes (elements) as pshard's BucketLayout packs the synthetic
    tensors: in gradient-ready (reverse) order, at most the cap per bucket,
    a tensor larger than the cap alone."""
    cap = max(1, int(bucket_mb * (1 << 20)) // 4)
    buckets = []
    for n in reversed(tensor_sizes(num_params, tensor_numel)):
        if buckets and buckets[-1] + n <= cap:
            buckets[-1] += n
        else:
            buckets.append(n)
    return buckets


def run_seed(rank, world, args):
    torch.manual_seed(args.seed)
    sizes = make_buckets(args.params, args.tensor_numel, args.bucket_mb)
    params = [torch.randn(n) for n in sizes]
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    grads = [torch.randn(n, generator=gen) for n in sizes]
    owners = [i % world for i in range(len(sizes))]
    # The owner holds Adam state only for its buckets (ZeRO-1).
    owned = [torch.nn.Parameter(params[i]) for i in range(len(sizes)) if owners[i] == rank]
    optim = torch.optim.Adam(owned, lr=args.lr) if owned else None
    owned_index = {i: k for k, i in enumerate(i for i in range(len(sizes)) if owners[i] == rank)}
    times = []
    for step in range(args.warmup + args.steps):
        bucket_grads = [g.clone() for g in grads]  # backward writes fresh gradients
        dist.barrier()
        start = time.perf_counter()
        handles = [dist.all_reduce(g, async_op=True) for g in bucket_grads]
        broadcasts = []
        for i, handle in enumerate(handles):
            handle.wait()
            if owners[i] == rank:
                p = owned[owned_index[i]]
                p.grad = bucket_grads[i].div_(world)
                optim.step()  # only p has a fresh gradient; others' grads are None
                p.grad = None
                params[i] = p.data
            broadcasts.append(dist.broadcast(params[i], src=owners[i], async_op=True))
        for b in broadcasts:
            b.wait()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    return times


class FlatModel(torch.nn.Module):
    """Parameters shaped like the synthetic workload; backward yields fixed grads."""

    def __init__(self, sizes, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.tensors = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(n)) for n in sizes])

    def forward(self, coefficients):
        return sum((p * c).sum() for p, c in zip(self.tensors, coefficients))


def run_ddp(rank, world, args):
    from torch.nn.parallel import DistributedDataParallel as DDP
    sizes = tensor_sizes(args.params, args.tensor_numel)
    model = DDP(FlatModel(sizes, args.seed), bucket_cap_mb=args.bucket_mb)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    coefficients = [torch.randn(n, generator=gen) for n in sizes]
    optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        optim.zero_grad(set_to_none=True)
        model(coefficients).backward()
        optim.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    return times


class Mlp(torch.nn.Module):
    """Parameters named as pshard's mlp workload names them: layers.<i>.*"""

    def __init__(self, dims):
        super().__init__()
        layers = []
        for i in range(len(dims) - 1):
            layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
            if i < len(dims) - 2:
                layers.append(torch.nn.ReLU())
        self.layers = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.layers(x)


def make_teacher(dims):
    teacher = Mlp(dims)
    with torch.no_grad():
        for layer in teacher.layers:
            if isinstance(layer, torch.nn.Linear):
                bound = (6.0 / layer.in_features) ** 0.5
                layer.weight.uniform_(-bound, bound)
                layer.bias.uniform_(-bound, bound)
    return teacher


def run_mlp(rank, world, args, sharded):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    dims = [int(d) for d in args.mlp_dims.split(",")]
    torch.manual_seed(args.seed)
    teacher = make_teacher(dims)
    model = DDP(Mlp(dims), bucket_cap_mb=args.bucket_mb)
    if sharded:
        optim = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr)
    else:
        optim = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    loss_fn = torch.nn.MSELoss()
    times = []
    losses = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        x = torch.randn(args.batch, dims[0], generator=gen)
        with torch.no_grad():
            y = teacher(x)
        optim.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optim.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return times, losses


def worker(rank, world, store_path, args, queue):
    torch.set_num_threads(args.threads)
    # Rendezvous through a file, not a TCP port picked in advance: a port
    # probed free here can be taken by a concurrent test before rank 0 binds
    # it. Gloo's own connections still bind ephemeral ports.
    dist.init_process_group("gloo", init_method="file://" + store_path,
                            rank=rank, world_size=world)
    runners = {
        "seed": run_seed,
        "ddp": run_ddp,
        "ddp_zero": lambda r, w, a: run_mlp(r, w, a, sharded=True),
        "ddp_mlp": lambda r, w, a: run_mlp(r, w, a, sharded=False),
    }
    result = runners[args.mode](rank, world, args)
    times, losses = result if isinstance(result, tuple) else (result, [])
    dist.barrier()
    dist.destroy_process_group()
    queue.put((rank, times, losses))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["seed", "ddp", "ddp_zero", "ddp_mlp"])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--params", type=parse_count, default=parse_count("16M"))
    parser.add_argument("--bucket_mb", type=float, default=25)
    parser.add_argument("--tensor_numel", type=parse_count, default=parse_count("1M"),
                        help="synthetic: elements per parameter tensor (pshard's default)")
    parser.add_argument("--mlp_dims", default="512,1024,1024,512")
    parser.add_argument("--batch", type=int, default=64, help="mlp: samples per rank per step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    store_dir = tempfile.TemporaryDirectory(prefix="torch_peers-")
    store_path = os.path.join(store_dir.name, "store")
    procs = [ctx.Process(target=worker, args=(r, args.world, store_path, args, queue))
             for r in range(args.world)]
    for p in procs:
        p.start()
    results = {}
    losses = {}
    for _ in procs:
        rank, times, rank_losses = queue.get()
        results[rank] = times
        losses[rank] = rank_losses
    for p in procs:
        p.join(timeout=60)
    # A step ends when the slowest rank has finished it.
    per_step = [max(results[r][i] for r in results) for i in range(args.steps)]
    per_step.sort()
    median = per_step[len(per_step) // 2]
    out = {
        "peer": "torch-" + args.mode,
        "world": args.world,
        "params": args.params,
        "bucket_mb": args.bucket_mb,
        "step_time_ms_median": round(median * 1e3, 3),
        "step_time_ms_min": round(per_step[0] * 1e3, 3),
        "steps": args.steps,
    }
    if args.mode in ("ddp_zero", "ddp_mlp"):
        dims = [int(d) for d in args.mlp_dims.split(",")]
        out["params"] = sum(dims[i] * dims[i + 1] + dims[i + 1] for i in range(len(dims) - 1))
        out["mlp_dims"] = args.mlp_dims
        out["batch"] = args.batch
        out["samples_per_second"] = round(args.batch * args.world / median, 1)
        # Mean over ranks, as pshard reports its loss.
        out["loss_first"] = sum(losses[r][0] for r in losses) / len(losses)
        out["loss_last"] = sum(losses[r][-1] for r in losses) / len(losses)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
