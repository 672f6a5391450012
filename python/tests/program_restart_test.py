"""A program job survives the loss of a worker, end to end through the real
binaries: program_train.py (torch, Adam, pshard.checkpoint every 10 of 40
steps) on a real coordinator and real workers on loopback, one worker
killed with SIGKILL while the other ranks wait for its rank inside a step.

- 2 ranks and a spare: the job restarts on the survivor and the spare
  (PSHARD_RESTART_COUNT 1), resumes from the latest complete checkpoint,
  SUCCEEDS, and its final parameters are bit-identical to an uninterrupted
  run's (the data of a step is a function of the step; the optimizer state
  is restored exactly). Every rank gets back the program state each rank
  saved with the checkpoint (pshard.checkpoint.save's `state`).
  The same with SGD under torch's CyclicLR (the program steps its
  scheduler to the checkpoint's step, so the lr and momentum resume), and
  with bf16 parameters (the spec's precision): the checkpoint holds the
  owners' fp32 master weights.
- 3 ranks and no spare, min_world_size 2: it resumes at 2 ranks (each
  loading the buckets it now owns by name) and ends with one process's
  full-batch parameters.

The surviving rank's program fails in its collective when the peer dies;
its session tells the agent so (PSHARD_ERROR_FILE), so the failure is the
lost worker's (PEER), not the program's own, and the job restarts.

    program_restart_test.py
"""

import json
import os
import signal
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

from program_cluster import HERE, ROOT, Cluster, read_file, wait_until

STEPS = 40
EVERY = 10
HOLD_AFTER = 25


def spec(out, ckpt, world, extra_args=(), collective_timeout=60,
         optimizer="adam", **fields):
    return {
        "name": "torch-restart",
        "world_size": world,
        "collective_timeout_seconds": collective_timeout,
        "checkpoint": {"dir": ckpt, "every_steps": EVERY, "keep_last": 2},
        "program": {
            "argv": ["/usr/bin/python3",
                     os.path.join(HERE, "program_train.py"), out, optimizer,
                     "--steps", str(STEPS), *extra_args],
            "env": {"PYTHONPATH": os.path.join(ROOT, "python") + ":" + HERE,
                    "OMP_NUM_THREADS": "1"},
            "grace_period_seconds": 5,
        },
        **fields,
    }


def complete_checkpoint(job):
    return any(c.get("state") == "COMPLETE" for c in job.get("checkpoints", []))


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class ProgramRestartTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.cluster = None

    def tearDown(self):
        if self.cluster is not None:
            self.cluster.stop()

    def dirs(self, name):
        out = os.path.join(self.tmp, name)
        os.makedirs(out)
        return out, os.path.join(self.tmp, f"{name}-ckpt")

    def run_and_kill(self, job_spec, victim_rank, sig=signal.SIGKILL):
        """Submits, waits until a checkpoint is complete and the victim holds
        after step HOLD_AFTER, sends `sig` to the victim's worker, and
        returns the ended job and that worker's id."""
        job_id = self.cluster.submit(job_spec)
        running = wait_until(
            lambda: (lambda job: job if job["state"] == "RUNNING" and int(
                job.get("progress", {}).get("step", 0)) >= HOLD_AFTER and
                complete_checkpoint(job) else None)(
                    self.cluster.ctl("get", job_id)),
            120, "a complete checkpoint and step 25")
        killed = self.cluster.signal_worker_of_rank(running, victim_rank, sig)
        job = self.cluster.wait_for_end(job_id, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        return job, killed

    def final(self, out, rank):
        return torch.load(os.path.join(out, f"final-rank{rank}.pt"))

    def check_restart(self, job, killed, out, world, saved_world=None):
        self.assertEqual(int(job.get("restarts", 0)), 1, self.cluster.tail())
        self.assertEqual(int(job["progress"]["step"]), STEPS)
        # The restart resumed from a complete checkpoint, and every rank of
        # the new epoch was told so.
        resumed = int(job["resumed_from"]["step"])
        self.assertIn(resumed, (10, 20))
        for rank in range(world):
            self.assertEqual(read_file(os.path.join(
                out, f"resumed-{rank}-1")), str(resumed), f"rank {rank}")
        # Every rank got back the program state each rank of the
        # checkpoint saved with it, and None for ranks it did not have.
        saved_world = world if saved_world is None else saved_world
        expected = {str(r): ({"step": resumed, "rank": r}
                             if r < saved_world else None)
                    for r in range(world + 2)}
        for rank in range(world):
            self.assertEqual(json.loads(read_file(os.path.join(
                out, f"state-{rank}-1"))), expected, f"rank {rank}")
        # The restart event blames the killed worker, not the program.
        events = self.cluster.events(job["id"])
        restarts = [e["restart"] for e in events if "restart" in e]
        self.assertEqual(len(restarts), 1, events)
        self.assertIn(killed, restarts[0]["cause"])
        self.assertEqual(int(restarts[0]["world_size"]), world)

    def test_killed_worker_restarts_on_the_spare_bit_identical(self):
        """SGD with momentum under torch's CyclicLR: the restarted program
        brings its scheduler to the checkpoint's step, so the lr and the
        momentum resume too."""
        self.restart_on_the_spare_bit_identical(optimizer="sgd_torch_cyclic")

    def test_killed_bf16_worker_restarts_on_the_spare_bit_identical(self):
        """bf16 parameters: the checkpoint keeps the owners' fp32 master
        weights, so the resumed run loses nothing."""
        self.restart_on_the_spare_bit_identical(
            torch.bfloat16,
            precision={"param_dtype": "BF16", "reduce_dtype": "FP32"})

    def restart_on_the_spare_bit_identical(self, dtype=torch.float32,
                                           **fields):
        self.cluster = Cluster(3, self.tmp)
        clean_out, clean_ckpt = self.dirs("clean")
        clean = self.cluster.submit(spec(clean_out, clean_ckpt, 2, **fields))
        job = self.cluster.wait_for_end(clean, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        wait_until(lambda: self.cluster.idle_workers() == 3, 15, "idle workers")

        out, ckpt = self.dirs("restarted")
        job, killed = self.run_and_kill(
            spec(out, ckpt, 2, ["--hold-rank", "1", "--hold-after",
                                str(HOLD_AFTER)], max_restarts=1, **fields),
            1)
        self.check_restart(job, killed, out, 2)
        expected = self.final(clean_out, 0)
        self.assertEqual({v.dtype for v in expected.values()}, {dtype})
        for rank in range(2):
            got = self.final(out, rank)
            self.assertEqual(sorted(got), sorted(expected))
            for name, value in expected.items():
                with self.subTest(rank=rank, param=name):
                    self.assertTrue(torch.equal(got[name], value),
                                    "differs from the uninterrupted run")

    def test_a_peer_deadline_waits_for_the_frozen_workers_loss(self):
        # The frozen worker (SIGSTOP: its connection stays open) is caught by
        # its heartbeat timeout (5 s), after rank 0's collective deadline
        # (3 s) has ended rank 0's program. That exit is PEER (its session
        # said so), so the coordinator holds it (blame window 6 s) until the
        # loss takes the blame and restarts the job, instead of failing it
        # as the program's own exit.
        self.cluster = Cluster(3, self.tmp, worker_timeout="5s",
                               blame_window="6s")
        out, ckpt = self.dirs("frozen")
        job, frozen = self.run_and_kill(
            spec(out, ckpt, 2, ["--hold-rank", "1", "--hold-after",
                                str(HOLD_AFTER)], collective_timeout=3,
                 max_restarts=1), 1, signal.SIGSTOP)
        self.check_restart(job, frozen, out, 2)

    def test_no_spare_resumes_at_the_smaller_world(self):
        import parity_common as common
        self.cluster = Cluster(3, self.tmp)
        out, ckpt = self.dirs("shrunk")
        job, killed = self.run_and_kill(
            spec(out, ckpt, 3, ["--hold-rank", "2", "--hold-after",
                                str(HOLD_AFTER)], max_restarts=1,
                 min_world_size=2), 2)
        self.check_restart(job, killed, out, 2, saved_world=3)
        self.assertEqual(len(job["members"]), 2)
        expected = common.reference("adam", STEPS)
        for rank in range(2):
            got = self.final(out, rank)
            for name, value in expected.items():
                with self.subTest(rank=rank, param=name):
                    torch.testing.assert_close(got[name], value, rtol=1e-5,
                                               atol=1e-6)


if __name__ == "__main__":
    unittest.main()
