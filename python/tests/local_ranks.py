"""Runs a test's ranks as real processes in the local test mode: `script`
(in python/tests) on ranks 0..world-1, each given a rendezvous base
directory and an output directory, with RANK/WORLD_SIZE set and no
coordinator."""

import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_local_ranks(test, script, world, timeout_seconds):
    """Runs `script STORE OUT` on `world` ranks and asserts (through
    unittest's `test`) that each exits 0 within `timeout_seconds` in all.
    Returns OUT. The ranks' own collective timeout (60 s) is shorter, so a
    hang fails inside them first."""
    tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    store, out = os.path.join(tmp, "store"), os.path.join(tmp, "out")
    os.makedirs(store)
    os.makedirs(out)
    ranks = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                   PSHARD_COLLECTIVE_TIMEOUT_SECONDS="60",
                   OMP_NUM_THREADS="1")
        env.pop("PSHARD_COORDINATOR", None)
        ranks.append(subprocess.Popen(
            [sys.executable, os.path.join(HERE, script), store, out],
            env=env))
    try:
        for rank, process in enumerate(ranks):
            code = process.wait(timeout=timeout_seconds)
            test.assertEqual(code, 0, f"rank {rank} exited {code}")
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
                process.wait()
    return out
