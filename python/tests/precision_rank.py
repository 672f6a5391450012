"""One rank of the mixed-precision test: every configuration in turn, each
with its own session, on this rank's share of each batch; saves the
parameters (in their dtype) after step 1 and the last.

    RANK=r WORLD_SIZE=n precision_rank.py STORE_BASE OUT_DIR
"""

import os
import sys

import torch

import parity_common as common
import precision_common as mixed
import pshard
import pshard.torch


def run(config, store, out):
    optimizer_name, param_dtype, reduce_dtype, comm_mode = config[:4]
    extra = mixed.options(config)
    os.environ["PSHARD_LOCAL_STORE"] = store
    if "sharded" in extra:
        os.environ["PSHARD_LOCAL_ASSIGNMENT_POLICY"] = "SHARDED"
    if param_dtype == "env":
        # As an agent sets them from the job spec's precision.
        want_param, want_reduce = mixed.ENV_DTYPES
        os.environ["PSHARD_PARAM_DTYPE"] = mixed.DTYPE_NAMES[want_param]
        os.environ["PSHARD_REDUCE_DTYPE"] = mixed.DTYPE_NAMES[want_reduce]
        param_dtype = reduce_dtype = None
    session = pshard.Session.open()
    for variable in ("PSHARD_PARAM_DTYPE", "PSHARD_REDUCE_DTYPE",
                     "PSHARD_LOCAL_ASSIGNMENT_POLICY"):
        os.environ.pop(variable, None)
    rank, world = session.rank, session.world_size
    model = common.make_model()  # float32: the masters start from it
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=common.OPTIMIZERS[optimizer_name][0],
        bucket_cap_mb=common.BUCKET_CAP_MB, comm_mode=comm_mode,
        session=session, param_dtype=param_dtype, reduce_dtype=reduce_dtype,
        overlap_param_broadcast="overlap" in extra)
    dtype = optimizer.param_dtype
    assert (dtype, optimizer.reduce_dtype) == mixed.dtypes(config), (
        dtype, optimizer.reduce_dtype)
    assert all(p.dtype == dtype for p in model.parameters())
    share = common.BATCH // world
    snapshots = {}
    for step in range(1, common.STEPS + 1):
        batches = common.step_batches(optimizer_name, step)
        optimizer.zero_grad()
        for m, (x, y) in enumerate(batches):
            loss = mixed.loss_of(model, x[rank * share:(rank + 1) * share],
                                 y[rank * share:(rank + 1) * share], dtype)
            if m + 1 < len(batches):
                with optimizer.no_sync():
                    (loss / len(batches)).backward()
            else:
                (loss / len(batches)).backward()
        optimizer.step()
        if step in (1, common.STEPS):
            optimizer.wait_parameters()  # read outside a forward (overlap)
            snapshots[step] = {n: p.detach().clone()
                               for n, p in model.named_parameters()}
    session.close()
    torch.save(snapshots, out)


def main():
    store_base, out_dir = sys.argv[1], sys.argv[2]
    rank = os.environ["RANK"]
    for config in mixed.CONFIGURATIONS:
        name = mixed.name(config)
        store = os.path.join(store_base, name)
        os.makedirs(store, exist_ok=True)
        run(config, store, os.path.join(out_dir, f"{name}-rank{rank}.pt"))


if __name__ == "__main__":
    main()
