"""End-to-end test of pshard's container images on a real container engine.

Builds the CPU images with build_images.sh (on a Debian base made by
make_base_image.sh, so nothing is pulled and no container needs a network),
then runs a coordinator and two workers as containers and drives them with
the pshardctl image:

- every image's binary resolves all its libraries and the CPU images link no
  CUDA library (ldd inside the image);
- the example job (examples/mlp_adam_2workers.json) and a program job run to
  SUCCEEDED, and `pshardctl logs` reads a program rank's output through the
  worker's status server;
- `docker kill` of a busy worker: the job (max_restarts 1, min_world_size 1)
  restarts from its latest checkpoint on the remaining worker and succeeds;
  the restarted container registers again;
- the coordinator container, killed and started again on its state volume,
  still has every job, in the same state.

Every container uses `--network host` and every server listens on
127.0.0.1, so all traffic stays on loopback. Run by .ci/run after the Bazel
tests (it needs the engine, root for debootstrap, and Bazel outside any
sandbox):

    python3 deploy/docker/container_e2e_test.py

It skips, saying why, only when no container engine answers
(`docker info` fails). $PSHARD_E2E_BASE_IMAGE names a base image to use
instead of making one.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.environ.get("DOCKER", "docker")
REGISTRY = "pshard-e2e"
TAG = "e2e"
PREFIX = "pshard-e2e-"  # container names
UID = 65532  # the images' user
CUDA_LIBRARIES = ("libcuda", "libcudart", "libnccl", "libcublas", "libnvidia")


def engine_problem():
    """Why no container engine can be used here, or None."""
    if shutil.which(DOCKER) is None:
        return f"{DOCKER} is not installed"
    r = subprocess.run([DOCKER, "info"], capture_output=True, text=True)
    if r.returncode != 0:
        return f"`{DOCKER} info` failed: {r.stderr.strip()[:300]}"
    return None


def docker(*args, check=True, timeout=300):
    r = subprocess.run([DOCKER, *args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{DOCKER} {' '.join(args)} exited {r.returncode}:\n"
                             f"{r.stdout}\n{r.stderr}")
    return r


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what, predicate, timeout_s):
    """Polls `predicate` until it returns a true value (which it returns) or
    the deadline passes (then fails, naming `what` and the last value)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last: {last!r}")


def image(name):
    return f"{REGISTRY}/{name}:{TAG}"


class ContainerE2eTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        started = time.monotonic()
        problem = engine_problem()
        if problem:
            raise unittest.SkipTest(f"no container engine can run here: {problem}")
        base = os.environ.get("PSHARD_E2E_BASE_IMAGE")
        if not base:
            base = subprocess.run(
                [os.path.join(REPO, "deploy/docker/make_base_image.sh"),
                 "--tag", f"{REGISTRY}/debian-base:12"],
                check=True, capture_output=True, text=True).stdout.strip()
        subprocess.run([os.path.join(REPO, "deploy/docker/build_images.sh"),
                        "--registry", REGISTRY, "--tag", TAG, "--base", base, "--no-gpu"],
                       check=True, stdout=subprocess.DEVNULL)
        print(f"images built in {time.monotonic() - started:.1f} s", file=sys.stderr)
        cls.work = tempfile.mkdtemp(prefix="pshard-container-e2e-")
        # The state volume (the coordinator's database), the run directory
        # (port files, program logs) and the shared storage that checkpoints
        # need (the coordinator writes their manifests): each a host folder
        # the images' user owns.
        for sub in ("state", "run", "shared", "specs"):
            os.makedirs(os.path.join(cls.work, sub))
            os.chown(os.path.join(cls.work, sub), UID, UID)
        cls.port = free_port()
        cls.remove_containers()
        cls.start_coordinator()
        for i in range(2):
            cls.start_worker(i)
        cls.wait_for_idle_workers(2)

    @classmethod
    def tearDownClass(cls):
        if not hasattr(cls, "work"):
            return
        if os.environ.get("PSHARD_E2E_KEEP"):
            return
        cls.remove_containers()
        shutil.rmtree(cls.work, ignore_errors=True)

    # ---- the cluster -----------------------------------------------------

    @classmethod
    def remove_containers(cls):
        names = docker("ps", "-aq", "--filter", f"name=^{PREFIX}").stdout.split()
        if names:
            docker("rm", "-f", *names)

    @classmethod
    def volume(cls, sub, at):
        return ["-v", f"{os.path.join(cls.work, sub)}:{at}"]

    @classmethod
    def start_coordinator(cls):
        docker("run", "-d", "--name", PREFIX + "coordinator", "--network", "host",
               *cls.volume("state", "/var/lib/pshard/state"),
               *cls.volume("shared", "/var/lib/pshard/shared"),
               image("coordinator"),
               f"--listen=127.0.0.1:{cls.port}", "--insecure",
               "--state_path=/var/lib/pshard/state/pshard-coordinator.db")

    @classmethod
    def start_worker(cls, i):
        docker("run", "-d", "--name", f"{PREFIX}worker-{i}", "--network", "host",
               *cls.volume("run", "/var/lib/pshard/run"),
               *cls.volume("shared", "/var/lib/pshard/shared"),
               image("worker-cpu"),
               f"--coordinator=127.0.0.1:{cls.port}", f"--name=worker-{i}",
               "--listen=127.0.0.1:0", "--host=127.0.0.1", "--device=cpu", "--insecure",
               "--log_dir=/var/lib/pshard/run/program-logs")

    @classmethod
    def pshardctl(cls, *args, check=True):
        """pshardctl in its image, against the coordinator; job specs are
        read from the specs folder, mounted at /specs."""
        r = docker("run", "--rm", "--network", "host",
                   *cls.volume("specs", "/specs"), "-v", f"{REPO}/examples:/examples:ro",
                   image("pshardctl"), *args,
                   f"--coordinator=127.0.0.1:{cls.port}", "--insecure", check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"pshardctl {' '.join(args)} exited {r.returncode}:\n"
                                 f"{r.stdout}\n{r.stderr}\n{cls.logs()}")
        return r

    @classmethod
    def logs(cls):
        out = []
        for name in docker("ps", "-a", "--format", "{{.Names}}",
                           "--filter", f"name=^{PREFIX}").stdout.split():
            r = docker("logs", "--tail", "30", name, check=False)
            out.append(f"--- {name} ---\n{r.stdout}{r.stderr}")
        return "\n".join(out)

    @classmethod
    def workers(cls):
        r = cls.pshardctl("workers", "-o", "json", check=False)
        if r.returncode != 0:
            return []
        return json.loads(r.stdout).get("workers", [])

    @classmethod
    def wait_for_idle_workers(cls, n):
        return wait_until(f"{n} idle workers",
                          lambda: len([w for w in cls.workers() if w.get("state") == "IDLE"]) >= n
                          and cls.workers(), 90)

    def job(self, job_id):
        return json.loads(self.pshardctl("get", job_id, "-o", "json").stdout)

    def submit(self, spec, name):
        with open(os.path.join(self.work, "specs", name), "w") as f:
            json.dump(spec, f)
        return self.pshardctl("submit", f"/specs/{name}").stdout.strip()

    def wait_for_end(self, job_id, timeout_s=180):
        return wait_until(f"job {job_id} to end",
                          lambda: (lambda j: j if j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED")
                                   else None)(self.job(job_id)), timeout_s)

    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        print(f"{self.id()}: {time.monotonic() - self.started:.1f} s", file=sys.stderr)

    # ---- the tests, in order (unittest sorts them by name) ---------------

    def test_1_images_link_what_they_need_and_no_cuda(self):
        for name, binary in (("coordinator", "pshard-coordinator"),
                             ("worker-cpu", "pshard-worker"),
                             ("pshardctl", "pshardctl")):
            with self.subTest(image=name):
                r = docker("run", "--rm", "--network", "host", "--entrypoint", "ldd",
                           image(name), f"/usr/local/bin/{binary}")
                self.assertNotIn("not found", r.stdout)
                for lib in CUDA_LIBRARIES:
                    self.assertNotIn(lib, r.stdout, f"{name} links {lib}")

    def test_2_example_job_succeeds(self):
        job_id = self.pshardctl("submit", "/examples/mlp_adam_2workers.json").stdout.strip()
        job = self.wait_for_end(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", f"{job}\n{self.logs()}")
        self.assertEqual(int(job["progress"]["step"]), 200)
        shards = self.pshardctl("shards", job_id).stdout
        self.assertIn("layers.0.weight", shards)
        type(self).finished = {job_id: "SUCCEEDED"}

    def test_3_program_job_succeeds_and_its_logs_are_read(self):
        spec = {"name": "container-program", "world_size": 2,
                "program": {"argv": ["/bin/sh", "-c",
                                     'echo "rank $PSHARD_RANK of $WORLD_SIZE on $MASTER_ADDR"']}}
        job_id = self.submit(spec, "program.json")
        job = self.wait_for_end(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", f"{job}\n{self.logs()}")
        out = self.pshardctl("logs", job_id, "--rank", "1").stdout
        self.assertIn("rank 1 of 2 on 127.0.0.1", out)
        type(self).finished[job_id] = "SUCCEEDED"

    def test_4_killed_worker_job_restarts_from_checkpoint(self):
        with open(os.path.join(REPO, "examples/mlp_adam_2workers.json")) as f:
            spec = json.load(f)
        spec.update({"name": "container-restart", "steps": 3000, "progress_every": 10,
                     "max_restarts": 1, "min_world_size": 1,
                     "checkpoint": {"dir": "/var/lib/pshard/shared/checkpoints", "every_steps": 50}})
        job_id = self.submit(spec, "restart.json")
        job = wait_until("a complete checkpoint",
                         lambda: (lambda j: j if any(c.get("state") == "COMPLETE"
                                                     for c in j.get("checkpoints", [])) else None)
                         (self.job(job_id)), 120)
        self.assertEqual(job["state"], "RUNNING", job)
        victim = next(m for m in job["members"] if m.get("rank", 0) == 1)
        name = next(w["name"] for w in self.workers() if w["id"] == victim["worker_id"])
        docker("kill", PREFIX + name)
        job = self.wait_for_end(job_id, 300)
        self.assertEqual(job["state"], "SUCCEEDED", f"{job}\n{self.logs()}")
        self.assertEqual(job.get("restarts"), 1, job)
        self.assertGreater(int(job["resumed_from"]["step"]), 0, job)
        self.assertEqual(len(job["members"]), 1, job)
        type(self).finished[job_id] = "SUCCEEDED"
        # The killed container, started again, registers again.
        docker("start", PREFIX + name)
        self.wait_for_idle_workers(2)

    def test_5_restarted_coordinator_keeps_every_job(self):
        before = {j["id"]: j["state"]
                  for j in json.loads(self.pshardctl("list", "-o", "json").stdout)["jobs"]}
        self.assertEqual({k: before.get(k) for k in self.finished}, self.finished)
        docker("kill", PREFIX + "coordinator")
        docker("start", PREFIX + "coordinator")
        after = wait_until(
            "the restarted coordinator",
            lambda: (lambda r: json.loads(r.stdout)["jobs"] if r.returncode == 0 else None)
            (self.pshardctl("list", "-o", "json", check=False)), 60)
        self.assertEqual({j["id"]: j["state"] for j in after}, before)
        self.wait_for_idle_workers(2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
