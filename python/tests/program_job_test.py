"""End to end through the real binaries: a pshard-coordinator and N
pshard-workers on loopback, under mutual TLS (every rank's program reaches
the coordinator with its worker's certificate), run a torch training script
as a `program` job
(submitted with pshardctl), the script using pshard.init() and
pshard.torch.ShardedOptimizer in coordinator mode. Checks the job's end, its
shard table (the model's parameter names), its progress (session.report),
and the final parameters against one process on the full batch (also
with torch's OneCycleLR driving the rates); then a
program that never calls pshard.init() on one rank (the job fails at the
collective deadline naming that rank, every program is stopped) and on no
rank (the job succeeds). The same script under the SHARDED policy, with
the spec's overlap_param_broadcast (every rank's session takes it), splits
every bucket over the ranks and ends with the same parameters. With the
spec's precision BF16 every rank's model is bf16, the shard table's buckets
are, and the ranks end with what bf16 ranks must compute.

    program_job_test.py WORLD_SIZE
"""

import os
import sys
import tempfile
import time
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

from program_cluster import HERE, ROOT, Cluster, process_alive, read_file, \
    wait_until

WORLD = int(sys.argv.pop(1)) if len(sys.argv) > 1 else 2
# A short collective timeout for the job that never joins.
NO_INIT_TIMEOUT_SECONDS = 4


def program_spec(out, extra_args=(), timeout=60, optimizer="adam"):
    """The job: /usr/bin/python3 program_train.py on WORLD ranks. The
    package is found as a user of a checkout finds it: PYTHONPATH names the
    repository's python/ (here the runfiles' copy; libpshard.so sits where
    the package looks for it, worker/api/ of the same tree)."""
    return {
        "name": "torch-program",
        "world_size": WORLD,
        "collective_timeout_seconds": timeout,
        "program": {
            "argv": ["/usr/bin/python3",
                     os.path.join(HERE, "program_train.py"), out, optimizer,
                     *extra_args],
            "env": {"PYTHONPATH": os.path.join(ROOT, "python") + ":" + HERE,
                    "OMP_NUM_THREADS": "1"},
            "grace_period_seconds": 5,
        },
    }


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class ProgramJobTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # Mutual TLS: every rank's program reaches the coordinator with its
        # worker's certificate (PSHARD_TLS_*), as on a secure cluster.
        cls.cluster = Cluster(WORLD, cls.tmp, tls=True)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    def out_dir(self, name):
        out = os.path.join(self.tmp, name)
        os.makedirs(out)
        return out

    def pids(self, out):
        pids = []
        for rank in range(WORLD):
            path = os.path.join(out, f"pid-{rank}")
            pids.append(int(wait_until(
                lambda: read_file(path), 60,
                f"rank {rank}'s pid file")))
        return pids

    def run_to_success(self, name, optimizer):
        """Runs program_train.py with `optimizer` (parity_common's) to its
        end, expecting SUCCEEDED: its output directory, id and job."""
        out = self.out_dir(name)
        job_id = self.cluster.submit(program_spec(out, optimizer=optimizer))
        job = self.cluster.wait_for_end(job_id, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        return out, job_id, job

    def assert_final_parameters(self, out, expected):
        """Every rank's final parameters are `expected`'s (by name), and the
        workers are idle again."""
        for rank in range(WORLD):
            got = torch.load(os.path.join(out, f"final-rank{rank}.pt"))
            self.assertEqual(sorted(got), sorted(expected))
            for name, value in expected.items():
                with self.subTest(rank=rank, param=name):
                    torch.testing.assert_close(got[name], value, rtol=1e-5,
                                               atol=1e-6)
        self.assertTrue(self.cluster.idle_workers() == WORLD or wait_until(
            lambda: self.cluster.idle_workers() == WORLD, 10, "idle workers"))

    def test_torch_script_trains_through_the_coordinator(self):
        import parity_common as common
        # AdamW under warmup + cosine: the schedule runs through the C API
        # too, and the progress names its lr.
        optimizer = "adamw_warmup_cosine"
        out, job_id, job = self.run_to_success("train", optimizer)

        # The shard table is the model's: its buckets name its parameters,
        # and every rank owns some (bucket_cap_mb is tiny).
        shards = self.cluster.ctl("shards", job_id)
        names = [n for b in shards["buckets"] for n in b["parameter_names"]]
        self.assertEqual(sorted(names),
                         sorted(n for n, _ in common.make_model().named_parameters()))
        self.assertIn("fc2.bias", names)
        self.assertEqual(len({b["owner_rank"] for b in shards["buckets"]}),
                         WORLD)

        # session.report's progress reached the job: the last step, the
        # rank-averaged loss of that step and the scheduled lr it ran at.
        self.assertEqual(int(job["progress"]["step"]), common.STEPS)
        self.assertTrue(0 < job["progress"]["loss"] < 10, job["progress"])
        self.assertAlmostEqual(job["progress"]["lr"],
                               common.reference_lr(optimizer, common.STEPS),
                               delta=1e-12)

        # Every rank ends with one process's parameters on the full batch.
        self.assert_final_parameters(
            out, common.reference(optimizer)[common.STEPS])

    def test_a_torch_lr_scheduler_drives_the_rates_through_the_coordinator(
            self):
        import parity_common as common
        # OneCycleLR stepping ShardedOptimizer's param_groups (a max_lr per
        # group; AdamW's beta1 cycled): the ranks end with torch's parameters
        # under the same scheduler, and the progress names the rate the last
        # step ran at.
        optimizer = "adamw_torch_onecycle"
        out, _, job = self.run_to_success("onecycle", optimizer)
        self.assertAlmostEqual(job["progress"]["lr"],
                               common.reference_lr(optimizer, common.STEPS),
                               delta=1e-12)
        self.assert_final_parameters(
            out, common.reference(optimizer)[common.STEPS])

    def test_a_program_can_close_its_session_and_open_another(self):
        import parity_common as common
        # The second session's rendezvous must not meet the first one's
        # keys: it trains on, with a new optimizer's state.
        out = self.out_dir("reopen")
        job_id = self.cluster.submit(program_spec(
            out, extra_args=["--reopen-after", "2"], optimizer="adam"))
        job = self.cluster.wait_for_end(job_id, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        self.assert_final_parameters(
            out, common.reference("adam", fresh_after=2)[common.STEPS])

    def test_clipping_program_reports_torchs_grad_norm(self):
        """max_grad_norm in the program's OptimizerSpec: the ranks end with
        one process's clip_grad_norm_ + Adam parameters, and the job's
        progress carries the last step's pre-clip norm (session.report)."""
        import parity_common as common
        optimizer = "adam_clip_l2"
        out, _, job = self.run_to_success("clip", optimizer)
        expected = common.reference(optimizer)
        want = expected["grad_norms"][-1]
        self.assertAlmostEqual(job["progress"]["grad_norm"], want,
                               delta=1e-6 * want)
        self.assert_final_parameters(out, expected[common.STEPS])

    def test_sharded_policy_splits_every_bucket_over_the_ranks(self):
        """Also with the spec's overlap_param_broadcast, which every rank's
        session takes (the forward pre-hooks wait; the same parameters)."""
        import parity_common as common
        out = self.out_dir("sharded")
        spec = program_spec(out, optimizer="adam")
        spec["assignment_policy"] = "SHARDED"
        spec["overlap_param_broadcast"] = True
        job_id = self.cluster.submit(spec)
        job = self.cluster.wait_for_end(job_id, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        for rank in range(WORLD):
            with open(os.path.join(out, f"overlap-{rank}")) as f:
                self.assertEqual(f.read(), "True", f"rank {rank}")
        # Every bucket is split over the ranks; together the ranges touch
        # every parameter of the model.
        shards = self.cluster.ctl("shards", job_id)
        self.assertEqual(shards["policy"], "SHARDED")
        touched = set()
        for bucket in shards["buckets"]:
            self.assertEqual(bucket["owner_rank"], -1)
            self.assertEqual([r.get("owner_rank", 0) for r in bucket["ranges"]],
                             list(range(WORLD)))
            for r in bucket["ranges"]:
                touched.update(r.get("parameter_names", []))
        self.assertEqual(sorted(touched),
                         sorted(n for n, _ in common.make_model().named_parameters()))
        self.assert_final_parameters(
            out, common.reference("adam")[common.STEPS])

    def test_bf16_precision_of_the_spec_reaches_every_rank(self):
        """The spec's precision is every rank's session default: the
        float32 model becomes bf16 (fp32 masters at the owners), the shard
        table shows BF16 buckets at 2 bytes an element, and every rank ends
        with what bf16 ranks must compute (precision_test's reference)."""
        import parity_common as common
        import precision_common as mixed
        out = self.out_dir("bf16")
        spec = program_spec(out, optimizer="adamw")
        spec["precision"] = {"param_dtype": "BF16", "reduce_dtype": "FP32"}
        job_id = self.cluster.submit(spec)
        job = self.cluster.wait_for_end(job_id, 180)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        for rank in range(WORLD):
            with open(os.path.join(out, f"dtypes-{rank}")) as f:
                self.assertEqual(f.read(), "torch.bfloat16 torch.float32")
        shards = self.cluster.ctl("shards", job_id)
        for bucket in shards["buckets"]:
            self.assertEqual(bucket["dtype"], "BF16", bucket)
            self.assertEqual(int(bucket["bytes"]),
                             2 * int(bucket["num_elements"]), bucket)
        expected = mixed.reference(
            ("adamw", torch.bfloat16, torch.float32, "reduce_broadcast"),
            WORLD)[common.STEPS]
        for rank in range(WORLD):
            got = torch.load(os.path.join(out, f"final-rank{rank}.pt"))
            for name, value in expected.items():
                with self.subTest(rank=rank, param=name):
                    self.assertEqual(got[name].dtype, torch.bfloat16)
                    torch.testing.assert_close(got[name].float(),
                                               value.float(),
                                               rtol=2.0 ** -7, atol=1e-6)

    def test_a_rank_that_never_calls_init_fails_the_job_naming_it(self):
        out = self.out_dir("no-init")
        started = time.monotonic()
        job_id = self.cluster.submit(program_spec(
            out, ["--no-init-on-rank", "1"], timeout=NO_INIT_TIMEOUT_SECONDS))
        pids = self.pids(out)
        job = self.cluster.wait_for_end(job_id, 60)
        self.assertEqual(job["state"], "FAILED", self.cluster.tail())
        reason = job["reason"]
        self.assertRegex(reason, r"rank 1 \(worker w-\d+\) did not join the "
                         r"job's communicator within 4s")
        self.assertIn("did its program call pshard.init()?", reason)
        # Failed at the deadline, not at the end of the sleeping rank's 600 s.
        self.assertLess(time.monotonic() - started, 45)
        for rank, pid in enumerate(pids):
            wait_until(lambda: not process_alive(pid), 15,
                       f"rank {rank}'s program (pid {pid}) ends")
        wait_until(lambda: self.cluster.idle_workers() == WORLD, 15,
                   "idle workers")

    def test_a_program_that_never_uses_pshard_succeeds(self):
        out = self.out_dir("no-pshard")
        job_id = self.cluster.submit(program_spec(
            out, ["--no-init-on-rank", "all"], timeout=NO_INIT_TIMEOUT_SECONDS))
        job = self.cluster.wait_for_end(job_id, 60)
        self.assertEqual(job["state"], "SUCCEEDED",
                         f"{job['reason']}\n{self.cluster.tail()}")
        wait_until(lambda: self.cluster.idle_workers() == WORLD, 15,
                   "idle workers")


if __name__ == "__main__":
    unittest.main()
