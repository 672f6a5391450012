"""Rank 0's state on every rank, as under DistributedDataParallel
(pshard.torch, real processes, the local test mode, 2 ranks): ranks that
initialise a batch-norm model differently all start from rank 0's
parameters and buffers; with broadcast_buffers the buffers and an
evaluation are exactly DDP's, computed here in one process as DDP syncs
them (rank 0's copied before the first forward and before each forward
that follows one with gradients outside no_sync); without it each rank
keeps its own statistics.
"""

import copy
import os
import sys
import unittest

from local_ranks import run_local_ranks

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

WORLD = 2
RUN_TIMEOUT_SECONDS = 180


def ddp_reference():
    """What DDP with broadcast_buffers gives each rank, in one process: the
    parameters (the same on every rank), each rank's buffers after training
    and each rank's evaluation output."""
    import buffers_rank
    model = buffers_rank.make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    buffers = [copy.deepcopy(dict(model.named_buffers()))
               for _ in range(WORLD)]
    sync_next = True

    def load(rank):
        for name, b in model.named_buffers():
            b.copy_(buffers[rank][name])

    for step, micros in enumerate(buffers_rank.MICRO_BATCHES, start=1):
        sums = [None] * WORLD
        for micro in range(micros):
            if sync_next:
                buffers = [copy.deepcopy(buffers[0]) for _ in range(WORLD)]
            for rank in range(WORLD):
                load(rank)
                loss = model(buffers_rank.batch(step, micro, rank))
                grads = torch.autograd.grad(loss.pow(2).mean() / micros,
                                            list(model.parameters()))
                sums[rank] = (list(grads) if sums[rank] is None else
                              [s + g for s, g in zip(sums[rank], grads)])
                buffers[rank] = copy.deepcopy(dict(model.named_buffers()))
            sync_next = micro == micros - 1  # outside no_sync
        for p, *per_rank in zip(model.parameters(), *sums):
            p.grad = sum(per_rank) / WORLD
        optimizer.step()
    trained = copy.deepcopy(buffers)
    if sync_next:
        buffers = [copy.deepcopy(buffers[0]) for _ in range(WORLD)]
    model.eval()
    evaluated = []
    with torch.no_grad():
        for rank in range(WORLD):
            load(rank)
            evaluated.append(model(buffers_rank.EVAL_INPUT))
    return dict(model.named_parameters()), trained, evaluated


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class BuffersTest(unittest.TestCase):

    def test_buffers_follow_rank_0_as_under_ddp(self):
        out = run_local_ranks(self, "buffers_rank.py", WORLD,
                              RUN_TIMEOUT_SECONDS)
        params, buffers, evaluated = ddp_reference()
        got = [torch.load(os.path.join(out, f"on-rank{rank}.pt"))
               for rank in range(WORLD)]
        # Rank 0's initial values, though rank 1 made its own.
        import buffers_rank
        rank_0_model = buffers_rank.make_model(seed=7).state_dict()
        for rank in range(WORLD):
            for name, want in rank_0_model.items():
                with self.subTest(rank=rank, initial=name):
                    self.assertTrue(torch.equal(got[rank]["initial"][name],
                                                want))
        for rank in range(WORLD):
            for name, want in params.items():
                with self.subTest(rank=rank, param=name):
                    torch.testing.assert_close(got[rank]["params"][name],
                                               want.detach(), rtol=1e-6,
                                               atol=1e-7)
            for name, want in buffers[rank].items():
                with self.subTest(rank=rank, buffer=name):
                    self.assertTrue(torch.equal(got[rank]["buffers"][name],
                                                want), (got[rank]["buffers"]
                                                        [name], want))
            with self.subTest(rank=rank, what="eval"):
                torch.testing.assert_close(got[rank]["eval"],
                                           evaluated[rank], rtol=1e-6,
                                           atol=1e-7)
        # Every rank evaluated with rank 0's statistics.
        torch.testing.assert_close(got[1]["eval"], got[0]["eval"], rtol=0,
                                   atol=0)
        # Without it, rank 1 keeps statistics of its own batches only.
        off = [torch.load(os.path.join(out, f"off-rank{rank}.pt"))
               for rank in range(WORLD)]
        self.assertFalse(torch.equal(off[1]["buffers"]["1.running_mean"],
                                     off[0]["buffers"]["1.running_mean"]))
        self.assertFalse(torch.equal(off[1]["eval"], off[0]["eval"]))


if __name__ == "__main__":
    unittest.main()
