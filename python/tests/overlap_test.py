"""overlap_param_broadcast in a program (pshard.torch, real processes, the
local test mode) on 2 and 3 ranks, under the BALANCED and SHARDED policies:
with it on, every step's loss, the final parameters and the optimizer
state are bit-identical to those with it off, on a model whose forward
calls its modules in another order than their registration and bucket
order; the forward pre-hooks wait for the parameters in the order the
forward really reads them.
"""

import os
import sys
import unittest

from local_ranks import run_local_ranks

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

RUN_TIMEOUT_SECONDS = 240


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class OverlapTest(unittest.TestCase):

    def check_world(self, world):
        import overlap_rank
        out = run_local_ranks(self, "overlap_rank.py", world,
                              RUN_TIMEOUT_SECONDS)
        for policy in overlap_rank.POLICIES:
            for rank in range(world):
                off = torch.load(os.path.join(out, f"{policy}-off-rank{rank}.pt"))
                on = torch.load(os.path.join(out, f"{policy}-on-rank{rank}.pt"))
                where = dict(world=world, policy=policy, rank=rank)
                with self.subTest(**where, what="losses"):
                    self.assertEqual(on["losses"], off["losses"])
                for name, value in off["params"].items():
                    with self.subTest(**where, param=name):
                        self.assertTrue(torch.equal(on["params"][name], value),
                                        (on["params"][name] - value).abs().max())
                with self.subTest(**where, what="state"):
                    self.assertEqual(set(on["state"]), set(off["state"]))
                    for name, entry in off["state"].items():
                        for key, value in entry.items():
                            got = on["state"][name][key]
                            if isinstance(value, torch.Tensor):
                                self.assertTrue(torch.equal(got, value),
                                                (name, key))
                            else:
                                self.assertEqual(got, value, (name, key))
                # Overlap off: no forward pre-hook. On: the forward waited
                # for each parameter once, in the order it reads them (not
                # the registration order c, a, b).
                self.assertEqual(off["waits"], [])
                with self.subTest(**where, what="wait order"):
                    self.assertEqual(on["waits"],
                                     overlap_rank.Shuffled.FORWARD_ORDER)

    def test_two_ranks(self):
        self.check_world(2)

    def test_three_ranks(self):
        self.check_world(3)


if __name__ == "__main__":
    unittest.main()
