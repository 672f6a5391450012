"""Parity: pshard.torch.ShardedOptimizer on N ranks (real processes, the
local test mode) ends with the parameters one process gets from the same
torch optimizer on the full batch — SGD with momentum, Adam and AdamW, with
and without a learning-rate schedule (warmup + cosine, StepLR; and torch's
own OneCycleLR (cycling AdamW's beta1), CyclicLR (cycling SGD's momentum)
and per-group LambdaLR stepping ShardedOptimizer's param_groups), Adam with
amsgrad, Adagrad, RMSprop (centered, momentum) and Lion (lion-pytorch's
update), with global gradient-norm clipping (L2 and infinity norms,
clipping or not: the reported norm is torch's clip_grad_norm_'s within
1e-6), with gradient accumulation (4 micro-batches through no_sync against
one batch 4 times larger), two parameter groups, odd shapes, both comm
modes — within 1e-5 relative after 5 steps (and after the first: it already
updates the parameters).

    parity_test.py WORLD_SIZE
"""

import os
import sys
import unittest

from local_ranks import run_local_ranks

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

# The world size: the first argument (taken off before unittest sees the
# command line).
WORLD = int(sys.argv.pop(1)) if len(sys.argv) > 1 else 2
# The whole run of every configuration; the ranks' own collective timeout
# is shorter, so a hang fails inside them first.
RUN_TIMEOUT_SECONDS = 240


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class ParityTest(unittest.TestCase):

    def test_every_rank_matches_the_single_process_reference(self):
        import parity_common as common
        out = run_local_ranks(self, "parity_rank.py", WORLD, RUN_TIMEOUT_SECONDS)

        for optimizer_name, comm_mode in common.configurations():
            name = f"{optimizer_name}-{comm_mode}"
            expected = common.reference(optimizer_name)
            owned = []
            for rank in range(WORLD):
                got = torch.load(os.path.join(out, f"{name}-rank{rank}.pt"))
                owned.append(got["owned"])
                for step in (1, common.STEPS):
                    for param, value in expected[step].items():
                        with self.subTest(config=name, rank=rank, step=step,
                                          param=param):
                            torch.testing.assert_close(
                                got[step][param], value, rtol=1e-5, atol=1e-6)
            # Clipping: every rank reports torch's pre-clip norm (within
            # 1e-6), and the configuration clips at every step or never.
            clip = common.clipping(optimizer_name)
            for rank in range(WORLD):
                got = torch.load(os.path.join(out, f"{name}-rank{rank}.pt"))
                if clip is None:
                    self.assertEqual(got["grad_norms"], [None] * common.STEPS)
                    continue
                with self.subTest(config=name, rank=rank, what="grad_norm"):
                    self.assertEqual(len(got["grad_norms"]), common.STEPS)
                    for norm, want in zip(got["grad_norms"],
                                          expected["grad_norms"]):
                        self.assertAlmostEqual(norm, want,
                                               delta=1e-6 * want)
            if clip is not None:
                clips = "noclip" not in optimizer_name
                for want in expected["grad_norms"]:
                    self.assertEqual(want > clip[0], clips, name)
            # The optimizer state really is sharded: every bucket has one
            # owner, and more than one rank owns some.
            flat = sorted(b for buckets in owned for b in buckets)
            self.assertEqual(flat, list(range(len(flat))), name)
            self.assertGreater(sum(1 for b in owned if b), 1, name)


if __name__ == "__main__":
    unittest.main()
