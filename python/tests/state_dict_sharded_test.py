"""ShardedOptimizer.state_dict()/load_state_dict() under the SHARDED policy
(real processes, the local test mode, SGD with momentum and StepLR, the
biases' group without momentum): at 2 ranks each rank's state holds
slices ("offset" and 1-D tensors) of the parameters its ranges cut,
together tiling every parameter with state once, and the step alone of
each parameter without state it holds part of; a rank's own state loads back
bit-identically; every rank's states together load into a 3-rank SHARDED
run and into a 1-rank BALANCED run, whose next steps match the
uninterrupted 2-rank run (to float rounding: the gradient average over
another number of ranks rounds differently); a state missing another
rank's slices fails the first step naming what this rank lacks.
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
class ShardedStateDictTest(unittest.TestCase):

    def run_phase(self, phase, world, policy, state_dir=None):
        os.environ["PHASE"] = phase
        os.environ["PSHARD_LOCAL_ASSIGNMENT_POLICY"] = policy
        if state_dir is not None:
            os.environ["STATE_DIR"] = state_dir
        try:
            return run_local_ranks(self, "state_dict_sharded_rank.py", world,
                                   RUN_TIMEOUT_SECONDS)
        finally:
            for name in ("PHASE", "PSHARD_LOCAL_ASSIGNMENT_POLICY",
                         "STATE_DIR"):
                os.environ.pop(name, None)

    def test_slices_save_and_load_at_any_world_size_and_policy(self):
        import parity_common as common
        saved_dir = self.run_phase("save", 2, "SHARDED")
        saves = [torch.load(os.path.join(saved_dir, f"save-rank{r}.pt"))
                 for r in range(2)]
        shapes = {n: p.shape for n, p in common.make_model().named_parameters()}
        straight = saves[0]["straight"]

        # The slices: every parameter's state tiled exactly once by the two
        # ranks' entries, some of them true slices.
        covered = {n: torch.zeros(s.numel(), dtype=torch.int32)
                   for n, s in shapes.items()}
        sliced = 0
        stepped = set()  # parameters without state: their step
        for r, save in enumerate(saves):
            self.assertEqual(save["saved"]["world_size"], 2)
            for name, entry in save["saved"]["state"].items():
                self.assertEqual(entry["step"], 3)
                if common.second_group(name):
                    self.assertEqual(set(entry), {"step"}, name)
                    stepped.add(name)
                    continue
                self.assertEqual(set(entry) - {"offset"},
                                 {"step", "momentum_buffer"}, name)
                buffer = entry["momentum_buffer"]
                if "offset" in entry:
                    sliced += 1
                    n = buffer.numel()
                    self.assertEqual(buffer.shape, (n,))
                    self.assertLess(n, shapes[name].numel())
                    covered[name][entry["offset"]:entry["offset"] + n] += 1
                else:
                    self.assertEqual(buffer.shape, shapes[name])
                    covered[name] += 1
        self.assertGreater(sliced, 0, "no parameter was cut between ranks")
        for name, count in covered.items():
            if common.second_group(name):
                self.assertIn(name, stepped)
                continue
            self.assertTrue(torch.equal(count, torch.ones_like(count)), name)

        # A rank's own slices at the same configuration: bit for bit.
        for r, save in enumerate(saves):
            self.assertEqual(save["straight"].keys(), save["own"].keys())
            for name, value in save["straight"].items():
                with self.subTest(what="own", rank=r, param=name):
                    self.assertTrue(torch.equal(save["own"][name], value),
                                    (save["own"][name] - value).abs().max())

        # Every rank's slices together, at 3 ranks SHARDED and 1 rank
        # BALANCED: the uninterrupted run's parameters.
        for world, policy in ((3, "SHARDED"), (1, "BALANCED")):
            out = self.run_phase("resume", world, policy, state_dir=saved_dir)
            lacking = 0
            for r in range(world):
                got = torch.load(os.path.join(out, f"resume-rank{r}.pt"))
                for name, value in straight.items():
                    with self.subTest(world=world, policy=policy, rank=r,
                                      param=name):
                        torch.testing.assert_close(got["resumed"][name], value,
                                                   rtol=1e-5, atol=1e-6)
                if "has no entry for parameter" in got["partial"]:
                    lacking += 1
            # Rank 0's state alone leaves someone without its elements.
            self.assertGreater(lacking, 0, (world, policy))


if __name__ == "__main__":
    unittest.main()
