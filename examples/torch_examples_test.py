"""The torch examples train: each runs on 2 ranks (real processes, pshard's
local test mode: no coordinator, a directory rendezvous), both ranks exit 0,
end with the same parameters, and their loss falls. Small and fast: a tiny
model, a few dozen steps.

A test skips only when the Debian package holding its data is missing
(python3-sklearn, fortunes); tools/setup.sh installs both.

    torch_examples_test.py   (under Bazel: //examples:torch_examples_test)
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2
# The ranks' collective timeout is shorter, so a hang fails inside them.
RUN_TIMEOUT_SECONDS = 240


def have_sklearn():
    try:
        import sklearn.datasets  # noqa: F401
    except ImportError:
        return False
    return True


def run_ranks(script, args, tmp):
    """Runs `script` on WORLD ranks; returns each rank's metrics."""
    store = os.path.join(tmp, "store")
    os.makedirs(store)
    ranks = []
    for rank in range(WORLD):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD),
                   PSHARD_LOCAL_STORE=store, OMP_NUM_THREADS="1",
                   PSHARD_COLLECTIVE_TIMEOUT_SECONDS="60")
        env.pop("PSHARD_COORDINATOR", None)
        metrics = os.path.join(tmp, f"rank{rank}.json")
        ranks.append((metrics, subprocess.Popen(
            [sys.executable, os.path.join(HERE, script), *args,
             "--metrics-out", metrics],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True)))
    results = []
    try:
        for rank, (metrics, process) in enumerate(ranks):
            output, _ = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
            if process.returncode != 0:
                raise AssertionError(f"{script} rank {rank} exited "
                                     f"{process.returncode}:\n{output}")
            with open(metrics) as f:
                results.append((json.load(f), output))
    finally:
        for _, process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


class TorchExamplesTest(unittest.TestCase):

    def check_trained(self, results, window):
        """Both ranks agree on the parameters, and every rank's loss over
        the last `window` steps is well below its loss over the first."""
        (first, _), (second, _) = results
        self.assertEqual(first["world_size"], WORLD)
        self.assertAlmostEqual(first["parameter_checksum"],
                               second["parameter_checksum"], places=6)
        for metrics, _ in results:
            losses = metrics["losses"]
            start = sum(losses[:window]) / window
            end = sum(losses[-window:]) / window
            self.assertLess(end, 0.75 * start,
                            f"rank {metrics['rank']}: loss {start:.3f} -> "
                            f"{end:.3f}")

    @unittest.skipUnless(have_sklearn(), "scikit-learn (its bundled digits "
                         "images) is not installed for " + sys.executable +
                         ": install Debian's python3-sklearn "
                         "(tools/setup.sh does)")
    def test_digits_cnn_learns(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        results = run_ranks("torch_digits/train.py",
                            ["--steps", "60", "--log-every", "20"], tmp)
        self.check_trained(results, window=5)
        (rank0, output), _ = results
        # Ten classes: chance is 0.1.
        self.assertGreater(rank0["test_accuracy"], 0.6)
        self.assertIn("test accuracy", output)

    @unittest.skipUnless(os.path.isdir("/usr/share/games/fortunes"),
                         "/usr/share/games/fortunes is missing: install "
                         "Debian's fortunes package (tools/setup.sh does)")
    def test_char_transformer_learns(self):
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        results = run_ranks(
            "torch_lm/train.py",
            ["--steps", "40", "--width", "32", "--layers", "1", "--heads",
             "2", "--context", "32", "--batch-size", "8", "--lr", "0.01",
             "--bucket-cap-mb", "0.02", "--sample-chars", "20",
             "--log-every", "20"], tmp)
        self.check_trained(results, window=5)
        (_, output), _ = results
        self.assertIn("validation loss", output)
        self.assertIn("sample: The ", output)


if __name__ == "__main__":
    unittest.main()
