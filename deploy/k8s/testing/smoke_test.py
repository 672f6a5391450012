"""Smoke test of the Kubernetes deployment, without a cluster.

Plays the kubelet for the rendered manifests: takes the containers' command,
args and environment exactly as `kubectl kustomize overlays/cpu` (and, in
LocalRanksSmokeTest, `overlays/cpu-local-ranks`) and `examples/mlp-job`
render them (ConfigMaps, Secrets, the downward API and
$(VAR) expansion included), and runs those processes on loopback from the Bazel
outputs that the Dockerfiles put in the images: the coordinator, the
StatefulSet's worker pods (pshard-worker-0, -1, ...) and the example Job's
`pshardctl submit --watch`. It runs the manifests' gRPC probes with the same
check the kubelet makes (grpc_health_probe), keeps probing the workers'
liveness while the job trains, waits for the job to succeed, and stops
everything as Kubernetes does: a container's preStop hook first (the
workers' drain, which must succeed and leave the worker DRAINING), then
SIGTERM, expecting a clean exit.

What is simulated, and how:
- Service names: "<service>[.<namespace>[.svc[.cluster.local]]]:<port>" in
  args and environment becomes 127.0.0.1:<the port the selected pod bound>,
  and every pod's IP (the downward API's status.podIP) is 127.0.0.1.
- Ports: every --listen=HOST:PORT becomes --listen=127.0.0.1:0 with a
  --port_file (and --metrics_listen, --health_listen the same with
  --metrics_port_file, --health_port_file), so several pods share the
  machine without fixed ports. A --local_ranks pod's ranks write those
  files with a suffix .<i>; rank 0's ports are the pod's. The probes go to the --health_listen port
  (plaintext), everything else speaks mutual TLS.
- Secrets: cert-manager's part. Each Certificate of examples/cert-manager
  gets a certificate from one test CA (tests/testing:make_certificates, for
  127.0.0.1, which is where the Service names point here), and a Secret
  volume holds it as cert-manager writes it: tls.crt, tls.key, ca.crt. The
  access Secrets (pshard-auth, pshard-worker-tokens, pshard-client-token)
  are what deploy/k8s/tools/make_access_secrets.sh prints for the
  StatefulSet's replicas, each key a file, as `kubectl apply -f -` would
  store them: the servers enforce the tokens, each worker presents its own,
  the example Job the client's.
- Volumes: each volume is a directory under the test's temporary directory
  (a PersistentVolumeClaim one per claim, a ConfigMap volume holds its keys
  as files); mount paths in args, environment and mounted ConfigMap files are
  rewritten to those directories. /dev/shm and /tmp stay the machine's. The
  workers' output volumes share one directory, as a shared volume would, so
  that the job's output_dir means the same on every worker.
"""

import json
import os
import re
import signal
import shutil
import subprocess
import tempfile
import threading
import time
import unittest

import manifests as m
from deploy.docker import dockerfiles

RUNFILES = m.workspace_dir()
PROBE = os.path.join(RUNFILES, "deploy", "k8s", "testing", "grpc_health_probe")
MAKE_CERTIFICATES = os.path.join(RUNFILES, "tests", "testing", "make_certificates")
# Paths that stay the machine's own (the processes open them by name).
UNMAPPED_MOUNTS = ("/dev/shm", "/tmp")
SHARED_VOLUMES = ("output",)
# A simulated pod's IP (status.podIP), unless the test gives it another
# loopback address (pods on different "nodes").
POD_IP = "127.0.0.1"
JOB_TIMEOUT_S = 180


def image_binary(image):
    """Runfiles path of the binary that `image`'s ENTRYPOINT runs, and the
    image's own environment."""
    repo = image.rpartition(":")[0]
    df = dockerfiles.load_all()[dockerfiles.IMAGES[repo]]
    return os.path.join(RUNFILES, df.binary_source()), df.entrypoint()[0], df.env()


def read(path):
    with open(path) as f:
        return f.read()


def wait_for(predicate, timeout, what, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


# The Secret of the example pods' client certificate.
CLIENT_SECRET = "pshard-client-tls"


def issue_secrets(directory):
    """What cert-manager does for examples/cert-manager: a certificate for
    each of its Certificates (except the CA's own) from one CA, as the files
    of the Secret it names. Returns {secret name: {key: path}}."""
    objs = m.render(m.CERT_MANAGER)
    ca_secrets = {i["spec"]["ca"]["secretName"] for i in m.find(objs, "Issuer") if "ca" in i["spec"]}
    certificates = [c for c in m.find(objs, "Certificate") if c["spec"]["secretName"] not in ca_secrets]
    names = [c["metadata"]["name"] for c in certificates]
    r = subprocess.run([MAKE_CERTIFICATES, f"--dir={directory}", f"--names={','.join(names)}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"make_certificates failed: {r.stderr}"
    return {c["spec"]["secretName"]: {
                "tls.crt": os.path.join(directory, f"{c['metadata']['name']}.crt"),
                "tls.key": os.path.join(directory, f"{c['metadata']['name']}.key"),
                "ca.crt": os.path.join(directory, "ca.crt")}
            for c in certificates}


def make_access_secrets(directory, workers):
    """What an operator does with deploy/k8s/tools/make_access_secrets.sh:
    the Secrets it prints, each key written to a file as the kubelet would
    mount it. Returns {secret name: {key: path}}."""
    _, data = m.access_secrets(workers)
    secrets = {}
    for name, keys in data.items():
        d = os.path.join(directory, name)
        os.makedirs(d)
        secrets[name] = {}
        for key, value in keys.items():
            path = os.path.join(d, key)
            with open(path, "w") as f:
                f.write(value)
            secrets[name][key] = path
    return secrets


class Pod:
    """One simulated pod: a container of a rendered workload, run as a process."""

    def __init__(self, sim, workload, name, container=None, bind_ports=None, ip=POD_IP):
        self.sim = sim
        self.ip = ip
        # container port -> loopback port to bind instead of a free one (a
        # replacement pod behind a Service keeps the Service's address).
        self.bind_ports = bind_ports or {}
        self.workload = workload
        self.name = name
        self.spec = m.pod_spec(workload)
        self.labels = workload["spec"]["template"]["metadata"]["labels"]
        self.container = m.container(workload, container)
        # A --local_ranks pod: each rank writes its port files as F.<i>
        # (worker/local_ranks.h); rank 0's are the pod's ports here.
        self.ranks = m.local_ranks(self.container)
        self.dir = os.path.join(sim.root, "pods", name)
        while os.path.exists(self.dir):  # a StatefulSet pod's replacement
            self.dir += "+"
        os.makedirs(self.dir)
        self.port_file = os.path.join(self.dir, "port")
        self.ports = {}  # container port -> bound port on 127.0.0.1
        self.process = None
        self.pre_stop_status = None
        self.log_path = os.path.join(self.dir, "log")
        self.mounts = self._mount_volumes()

    def _mount_volumes(self):
        volumes = {v["name"]: v for v in self.spec.get("volumes", [])}
        mounts = {}
        for vm in self.container.get("volumeMounts", []):
            if vm["mountPath"] in UNMAPPED_MOUNTS:
                continue
            v = volumes[vm["name"]]
            if "persistentVolumeClaim" in v:
                d = os.path.join(self.sim.root, "pvc", v["persistentVolumeClaim"]["claimName"])
            elif "emptyDir" in v and v["name"] in SHARED_VOLUMES:
                d = os.path.join(self.sim.root, "shared", v["name"])
            elif "emptyDir" in v:
                d = os.path.join(self.dir, "volumes", v["name"])
            elif "secret" in v:
                d = os.path.join(self.dir, "volumes", v["name"])
                os.makedirs(d, exist_ok=True)
                name = v["secret"]["secretName"]
                files = self.sim.secrets.get(name)
                assert files is not None, f"{self.name}: no Secret {name} (does cert-manager issue it?)"
                for key, source in files.items():
                    shutil.copyfile(source, os.path.join(d, key))
                    os.chmod(os.path.join(d, key), v["secret"].get("defaultMode", 0o644))
            elif "configMap" in v:
                d = os.path.join(self.dir, "volumes", v["name"])
                os.makedirs(d, exist_ok=True)
                data = m.config_map_data(self.sim.objects, v["configMap"]["name"])
                for key, value in data.items():
                    with open(os.path.join(d, key), "w") as f:
                        f.write(self.sim.rewrite(value))
            else:
                raise AssertionError(f"{self.name}: unsupported volume {v}")
            os.makedirs(d, exist_ok=True)
            mounts[vm["mountPath"].rstrip("/")] = d
        return mounts

    def rewrite(self, s):
        """Mount paths -> directories, Service addresses -> loopback."""
        for path in sorted(self.mounts, key=len, reverse=True):
            s = re.sub(re.escape(path) + r"(?=/|$|\s|\")", self.mounts[path], s)
        return self.sim.rewrite(s)

    def argv_and_env(self):
        c = self.container
        binary, entrypoint, image_env = image_binary(c["image"])
        env = {k: self.sim.rewrite(v) for k, v in image_env.items()}
        env.update(m.container_env(self.sim.objects, c,
                                   {"name": self.name, "ip": self.ip,
                                    "namespace": self.workload["metadata"]["namespace"]}))
        missing = []
        argv = [m.expand(a, env, missing) for a in c.get("command", [entrypoint]) + c.get("args", [])]
        assert not missing, f"{self.name}: undefined $(VAR): {missing}"
        assert argv[0] == entrypoint, f"{self.name}: runs {argv[0]}, the image has {entrypoint}"
        argv[0] = binary
        out = []
        for a in argv:
            mt = re.fullmatch(r"--listen=(.*):(\d+)", a)
            health = re.fullmatch(r"--health_listen=(.*):(\d+)", a)
            if health:
                # The probes' port: any free loopback port, written to a file.
                self.health_port = int(health.group(2))
                out += ["--health_listen=127.0.0.1:0",
                        f"--health_port_file={self.port_file}.health"]
            elif re.fullmatch(r"--metrics_listen=(.*):(\d+)", a):
                # Like --listen: any free loopback port, written to a file.
                out += ["--metrics_listen=127.0.0.1:0",
                        f"--metrics_port_file={self.port_file}.metrics"]
            elif mt:
                self.listen_port = int(mt.group(2))
                bind = self.bind_ports.get(self.listen_port, 0)
                out += [f"--listen=127.0.0.1:{bind}", f"--port_file={self.port_file}"]
            else:
                out.append(self.rewrite(a))
        env = {k: self.rewrite(v) for k, v in env.items()}
        base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "HOME": self.dir, "HOSTNAME": self.name}
        return out, {**base, **env}

    def start(self):
        argv, env = self.argv_and_env()
        self.argv = argv
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(argv, env=env, cwd=self.dir, stdout=self.log,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def rank_port_file(self, kind="", rank=0):
        """The file rank `rank` writes its `kind` ("", ".health",
        ".metrics") port to."""
        return self.port_file + kind + (f".{rank}" if self.ranks > 1 else "")

    def wait_bound(self, timeout):
        def bound(path):
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
            return os.path.exists(path) and read(path).strip()
        port = int(wait_for(lambda: bound(self.rank_port_file()), timeout, f"{self.name} to listen"))
        self.ports[self.listen_port] = port
        if getattr(self, "health_port", None) is not None:
            self.ports[self.health_port] = int(wait_for(
                lambda: bound(self.rank_port_file(".health")), timeout, f"{self.name}'s health port"))
        return port

    def rank_health_ports(self, timeout):
        """Every rank's health port, once each listens."""
        return [int(wait_for(lambda: os.path.exists(self.rank_port_file(".health", i))
                             and read(self.rank_port_file(".health", i)).strip(),
                             timeout, f"{self.name} rank {i}'s health port"))
                for i in range(self.ranks)]

    def probe(self, kind):
        """Runs the container's `kind` probe (startupProbe, ...) once."""
        p = self.container[kind]["grpc"]
        port = self.ports[p["port"]]
        timeout = self.container[kind].get("timeoutSeconds", 1)
        r = subprocess.run([PROBE, f"--addr=127.0.0.1:{port}", f"--service={p.get('service', '')}",
                            f"--timeout={timeout}s"], capture_output=True, text=True,
                           timeout=timeout + 10)
        return r.returncode == 0, r.stdout.strip()

    def wait_started(self):
        """The startup probe, as the kubelet runs it: until success, at most
        failureThreshold x periodSeconds (capped at 60 s for the test)."""
        sp = self.container["startupProbe"]
        budget = min(sp.get("periodSeconds", 10) * sp.get("failureThreshold", 3), 60)
        last = []

        def started():
            if self.process.poll() is not None:
                raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
            ok, out = self.probe("startupProbe")
            last[:] = [out]
            return ok
        try:
            wait_for(started, budget, f"{self.name}'s startup probe", interval=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}: {last}\n{self.tail()}")

    def run_pre_stop(self, grace):
        """The container's preStop exec hook, as the kubelet runs it before
        SIGTERM: the command in the container (its environment and volumes;
        no $(VAR) expansion in a hook), for at most the grace period. Its
        exit status, or None without a hook."""
        hook = self.container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if not hook or self.process is None or self.process.poll() is not None:
            return None
        binary, entrypoint, _ = image_binary(self.container["image"])
        assert hook[0] == entrypoint, f"{self.name}: the hook runs {hook[0]}, the image has {entrypoint}"
        _, env = self.argv_and_env()
        with open(os.path.join(self.dir, "pre-stop.log"), "w") as log:
            try:
                r = subprocess.run([binary] + [self.rewrite(a) for a in hook[1:]], env=env,
                                   cwd=self.dir, stdout=log, stderr=subprocess.STDOUT, timeout=grace)
            except subprocess.TimeoutExpired:
                return "ran past the grace period"
        return r.returncode

    def terminate(self, grace, pre_stop=True):
        """The preStop hook (unless `pre_stop` is False: it ran already),
        SIGTERM, then SIGKILL after the grace period; the exit status."""
        if self.process is None:
            return None
        try:
            if self.process.poll() is not None:
                return self.process.returncode
            started = time.monotonic()
            if pre_stop:
                self.pre_stop_status = self.run_pre_stop(grace)
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(timeout=max(grace - (time.monotonic() - started), 0.1))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
                return "killed after the grace period"
        finally:
            self.log.close()

    def tail(self, n=40):
        try:
            return "".join(read(self.log_path).splitlines(keepends=True)[-n:])
        except OSError:
            return ""


class Cluster:
    """The rendered objects and the simulated pods."""

    def __init__(self, root, objects, secrets):
        self.root = root
        self.objects = objects
        # Secret name -> {key: file}
        self.secrets = secrets
        self.pods = []

    def shared_mounts(self):
        """mountPath -> directory of the shared volumes, in any pod."""
        out = {}
        for obj in self.objects:
            if obj["kind"] not in ("Deployment", "StatefulSet", "Job"):
                continue
            spec = m.pod_spec(obj)
            shared = {v["name"] for v in spec.get("volumes", [])
                      if v["name"] in SHARED_VOLUMES and "emptyDir" in v}
            for c in spec["containers"]:
                for vm in c.get("volumeMounts", []):
                    if vm["name"] in shared:
                        out[vm["mountPath"].rstrip("/")] = os.path.join(self.root, "shared", vm["name"])
        return out

    def rewrite(self, s):
        """Shared volume paths -> their directory, Service addresses ->
        loopback (for any pod)."""
        for path, d in self.shared_mounts().items():
            s = re.sub(re.escape(path) + r"(?=/|$|\s|\")", d, s)
        for svc in m.find(self.objects, "Service"):
            name = svc["metadata"]["name"]
            ns = svc["metadata"].get("namespace", "default")
            for port in svc["spec"].get("ports", []):
                target = self.service_target(svc, port)
                if target is None:
                    continue
                pattern = (r"(?<![\w.-])" + re.escape(name) + r"(\." + re.escape(ns) +
                           r"(\.svc(\.cluster\.local)?)?)?:" + str(port["port"]) + r"(?!\d)")
                s = re.sub(pattern, f"127.0.0.1:{target}", s)
        return s

    def service_target(self, svc, port):
        """The loopback port behind a Service port: the first running pod the
        Service selects, its container port named or numbered targetPort."""
        selector = {"matchLabels": svc["spec"].get("selector", {})}
        for pod in self.pods:
            if not m.labels_match(selector, pod.labels):
                continue
            tp = port.get("targetPort", port["port"])
            for cp in pod.container.get("ports", []):
                if tp in (cp.get("name"), cp["containerPort"]) and cp["containerPort"] in pod.ports:
                    return pod.ports[cp["containerPort"]]
        return None

    def add(self, workload, name, bind_ports=None, ip=POD_IP):
        pod = Pod(self, workload, name, bind_ports=bind_ports, ip=ip)
        self.pods.append(pod)
        return pod

    def replace(self, pod, name, grace, pre_stop=True):
        """Stops `pod` as Kubernetes does (its preStop hook unless `pre_stop`
        is False, SIGTERM, then SIGKILL after the grace period) and starts its
        replacement from the same workload and volumes; a pod behind a
        ClusterIP Service keeps its loopback port, as the Service keeps its
        address. Returns (old exit status, new pod)."""
        status = pod.terminate(grace, pre_stop)
        self.pods.remove(pod)
        behind_service = any(
            m.labels_match({"matchLabels": svc["spec"].get("selector", {})}, pod.labels)
            and svc["spec"].get("clusterIP") != "None"
            for svc in m.find(self.objects, "Service"))
        new = self.add(pod.workload, name, dict(pod.ports) if behind_service else None, ip=pod.ip)
        new.start()
        return status, new


class ClusterTest(unittest.TestCase):
    """An overlay's pods, with the example Job's, as local processes."""

    OVERLAY = None  # set by each test class

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="pshard-smoke-", dir=os.environ.get("TEST_TMPDIR"))
        objects = m.render(self.OVERLAY) + m.render(m.EXAMPLE)
        self.secrets = issue_secrets(os.path.join(self.root, "cert-manager"))
        replicas = m.one(objects, "StatefulSet", "pshard-worker")["spec"]["replicas"]
        self.secrets.update(make_access_secrets(os.path.join(self.root, "access"), replicas))
        self.cluster = Cluster(self.root, objects, self.secrets)
        self.addCleanup(self.stop_all)

    def stop_all(self):
        for pod in reversed(self.cluster.pods):
            pod.terminate(5, pre_stop=False)

    def pshardctl(self, *args, timeout=30, token=True):
        """pshardctl from the client image, as a debugging pod would run it
        (with the client token unless `token` is False, or the token file
        `token` names)."""
        binary, _, _ = image_binary(m.one(self.cluster.objects, "Job")["spec"]["template"]["spec"]
                                    ["containers"][0]["image"])
        coordinator = self.cluster.rewrite("pshard-coordinator:7070")
        # As the example pods: the client certificate from its Secret.
        client = self.secrets[CLIENT_SECRET]
        token_flags = []
        if token is True:
            token_flags = [f"--token_file={self.secrets[m.CLIENT_TOKEN_SECRET]['token']}"]
        elif token:
            token_flags = [f"--token_file={token}"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PSHARD_TOKEN")}
        return subprocess.run([binary, f"--coordinator={coordinator}",
                               f"--tls_cert={client['tls.crt']}", f"--tls_key={client['tls.key']}",
                               f"--tls_ca={client['ca.crt']}", *token_flags, *args],
                              capture_output=True, text=True, timeout=timeout, env=env)

    def run_example_job(self, pod_name):
        """Runs the example Job's pod to completion; (pod, job id)."""
        job = self.cluster.add(m.one(self.cluster.objects, "Job", "pshard-example-mlp"), pod_name)
        job.start()
        try:
            rc = job.process.wait(timeout=JOB_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            rc = None
        job.terminate(0)
        logs = "\n".join(f"--- {p.name}\n{p.tail()}" for p in self.cluster.pods)
        self.assertEqual(rc, 0, f"the example Job failed (exit {rc}):\n{logs}")
        job_id = read(job.log_path).split()[0]
        self.assertRegex(job_id, r"^job-")
        return job, job_id

    def pool(self):
        """The workers the coordinator lists (pshardctl workers)."""
        r = self.pshardctl("workers", "--output=json")
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout).get("workers", [])

    def start_coordinator(self):
        """The coordinator's pod, started and past its startup probe."""
        coordinator = self.cluster.add(m.one(self.cluster.objects, "Deployment", "pshard-coordinator"),
                                       "pshard-coordinator-0")
        coordinator.start()
        coordinator.wait_bound(30)
        coordinator.wait_started()
        return coordinator

    @staticmethod
    def grace(pod):
        """The pod's grace period, capped for the test."""
        return min(m.pod_spec(pod.workload).get("terminationGracePeriodSeconds", 30), 20)


class SmokeTest(ClusterTest):
    OVERLAY = "overlays/cpu"

    def test_cpu_overlay_runs_the_example_job(self):
        objs = self.cluster.objects
        coordinator = self.start_coordinator()
        for kind in ("readinessProbe", "livenessProbe"):
            self.assertTrue(coordinator.probe(kind)[0], kind)
        # The probes' port is plaintext health only; the API is TLS only.
        health = coordinator.ports[coordinator.container["livenessProbe"]["grpc"]["port"]]
        binary, _, _ = image_binary(m.one(objs, "Job")["spec"]["template"]["spec"]["containers"][0]["image"])
        r = subprocess.run([binary, f"--coordinator=127.0.0.1:{health}", "--insecure", "workers"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, "a pshard RPC answered on the plaintext health port")
        # It connected (plaintext) and the call itself was refused: no such
        # service there (UNIMPLEMENTED; tests/security:health_port_e2e_test
        # checks the code).
        self.assertIn("ListWorkers", r.stderr)
        self.assertNotIn("cannot reach", r.stderr)
        r = subprocess.run([PROBE, f"--addr=127.0.0.1:{coordinator.ports[7070]}", "--timeout=5s"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0, f"the TLS port answered a plaintext health check: {r.stdout}")

        sts = m.one(objs, "StatefulSet", "pshard-worker")
        workers = [self.cluster.add(sts, f"{sts['metadata']['name']}-{i}")
                   for i in range(sts["spec"]["replicas"])]
        for w in workers:
            w.start()
            self.assertIn(f"--name={w.name}", w.argv)
            self.assertIn(f"--coordinator=127.0.0.1:{coordinator.ports[7070]}", w.argv)
        for w in workers:
            w.wait_bound(30)
            w.wait_started()
            for kind in ("readinessProbe", "livenessProbe"):
                self.assertTrue(w.probe(kind)[0], f"{w.name} {kind}")

        # The pool registers under the pod names.
        def pool_idle():
            r = self.pshardctl("workers", "--output=json")
            if r.returncode != 0:
                return False
            pool = json.loads(r.stdout).get("workers", [])
            idle = {w["name"] for w in pool if w.get("state") == "IDLE"}
            return idle == {w.name for w in workers} and pool
        pool = wait_for(pool_idle, 30, "every worker to register and be idle", interval=0.2)
        # Each worker registered under the name its token's principal has,
        # at its pod's name under the headless Service (--advertise_host).
        ns = sts["metadata"]["namespace"]
        for w in pool:
            self.assertTrue(w.get("address", "").startswith(f"{w['name']}.pshard-worker.{ns}.svc:"),
                            w)

        # Access control is on: the client certificate alone, or a token the
        # servers do not know, gets nothing.
        r = self.pshardctl("workers", token=False)
        self.assertNotEqual(r.returncode, 0, "the coordinator answered a caller without a token")
        self.assertIn("credential", r.stderr)
        stranger = os.path.join(self.root, "stranger.token")
        with open(stranger, "w") as f:
            f.write("0" * 64 + "\n")
        r = self.pshardctl("workers", token=stranger)
        self.assertNotEqual(r.returncode, 0, "the coordinator took an unknown token")
        self.assertIn("not one this server knows", r.stderr)
        # A worker's token is for its worker only: not for reading jobs.
        r = self.pshardctl("list", token=self.secrets[m.WORKER_TOKENS_SECRET][workers[0].name])
        self.assertNotEqual(r.returncode, 0, "a worker's token listed jobs")
        self.assertIn("may not call", r.stderr)

        # Liveness keeps answering while the job trains.
        stop = threading.Event()
        probes = {w.name: [] for w in workers}

        def probe_liveness():
            while not stop.is_set():
                for w in workers:
                    probes[w.name].append(w.probe("livenessProbe"))
                stop.wait(0.25)
        prober = threading.Thread(target=probe_liveness, daemon=True)
        prober.start()

        job, job_id = self.run_example_job("pshard-example-mlp-abcde")
        stop.set()
        prober.join()

        # What the docs tell an operator to look at.
        r = self.pshardctl("get", job_id, "--output=json")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(got["state"], "SUCCEEDED", got)
        self.assertEqual(sorted(mb["worker_id"] for mb in got["members"]),
                         sorted(w["id"] for w in pool))
        r = self.pshardctl("shards", job_id)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("imbalance", r.stdout.lower())
        # The spec's output_dir, on the workers' output volume.
        spec_file = [a for a in job.argv[1:] if a.endswith(".json")][0]
        out_dir = json.loads(read(spec_file))["outputDir"]
        self.assertTrue(out_dir.startswith(self.root), out_dir)
        self.assertTrue(os.path.exists(os.path.join(out_dir, "params.safetensors")),
                        f"no params.safetensors in {out_dir}")

        # An upgrade of the coordinator (Recreate): the replacement opens the
        # same claim, still knows the job, and the workers come back to it.
        grace = self.grace
        status, coordinator = self.cluster.replace(coordinator, "pshard-coordinator-1", grace(coordinator))
        self.assertEqual(status, 0, "the coordinator did not exit cleanly on SIGTERM")
        coordinator.wait_bound(30)
        coordinator.wait_started()
        r = self.pshardctl("get", job_id, "--output=json")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["state"], "SUCCEEDED")
        # The workers heartbeat to the new process: a second run succeeds.
        self.run_example_job("pshard-example-mlp-fghij")

        # A restarted worker pod keeps its name, so its worker id. The
        # kubelet runs its preStop hook first: the worker drains (idle, at
        # once), and the coordinator schedules nothing more on it.
        ids = {w["name"]: w["id"] for w in pool}
        old = workers[-1]
        self.assertEqual(old.run_pre_stop(grace(old)), 0,
                         f"{old.name}'s preStop hook failed:\n{read(os.path.join(old.dir, 'pre-stop.log'))}")
        r = self.pshardctl("workers", "--output=json")
        self.assertEqual(r.returncode, 0, r.stderr)
        states = {w["name"]: w.get("state") for w in json.loads(r.stdout)["workers"]}
        self.assertEqual(states[old.name], "DRAINING", states)
        self.assertIsNone(old.process.poll(), "the hook stopped the worker: the kubelet's SIGTERM does")
        _, new = self.cluster.replace(old, old.name, grace(old), pre_stop=False)
        workers[-1] = new
        new.wait_bound(30)
        new.wait_started()

        def reregistered():
            r = self.pshardctl("workers", "--output=json")
            if r.returncode != 0:
                return None
            now = {w["name"]: w for w in json.loads(r.stdout).get("workers", [])}
            w = now.get(new.name)
            return w if w and w.get("state") == "IDLE" and w.get("incarnation") != old_incarnation else None
        old_incarnation = next(w.get("incarnation") for w in pool if w["name"] == new.name)
        w = wait_for(reregistered, 30, f"{new.name} to register again", interval=0.2)
        self.assertEqual(w["id"], ids[new.name])

        for name, results in probes.items():
            threshold = workers[0].container["livenessProbe"].get("failureThreshold", 3)
            streak = longest = 0
            for ok, _ in results:
                streak = 0 if ok else streak + 1
                longest = max(longest, streak)
            self.assertGreater(len(results), 0)
            self.assertLess(longest, threshold,
                            f"{name}: liveness failed {longest} times in a row during the job: "
                            f"{[out for ok, out in results if not ok][:3]}")

        # Kubernetes stops pods with their preStop hook (the workers' drain),
        # then SIGTERM; the hooks and the binaries exit 0.
        for pod in workers + [coordinator]:
            self.assertEqual(pod.terminate(grace(pod)), 0,
                             f"{pod.name} did not exit cleanly on SIGTERM:\n{pod.tail()}")
        for pod in workers:
            self.assertEqual(pod.pre_stop_status, 0, f"{pod.name}'s preStop hook")
        # The coordinator's state is on the claim.
        self.assertTrue(os.listdir(os.path.join(self.root, "pvc", "pshard-coordinator-state")))


class LocalRanksSmokeTest(ClusterTest):
    """overlays/cpu-local-ranks: each worker pod's pshard-worker supervises
    its --local_ranks ranks, which register as <pod>:<i> with the pod's
    token; a job is placed on the ranks of one pod; the pod's preStop hook
    drains every rank and SIGTERM stops them all."""

    OVERLAY = "overlays/cpu-local-ranks"

    def test_pods_run_their_ranks(self):
        objs = self.cluster.objects
        coordinator = self.start_coordinator()
        sts = m.one(objs, "StatefulSet", "pshard-worker")
        ranks = m.local_ranks(m.container(sts))
        self.assertGreater(ranks, 1)
        # Each pod on a node of its own: its own loopback address as its IP.
        workers = [self.cluster.add(sts, f"{sts['metadata']['name']}-{i}", ip=f"127.0.0.{2 + i}")
                   for i in range(sts["spec"]["replicas"])]
        for w in workers:
            w.start()
        for w in workers:
            w.wait_bound(60)
            w.wait_started()
            for kind in ("readinessProbe", "livenessProbe"):
                self.assertTrue(w.probe(kind)[0], f"{w.name} {kind}")
            # Every rank serves its own health port.
            for i, port in enumerate(w.rank_health_ports(30)):
                r = subprocess.run([PROBE, f"--addr=127.0.0.1:{port}", "--timeout=5s"],
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 0, f"{w.name} rank {i}: {r.stdout}")

        # Every rank registers under <pod>:<i>, on its pod's host.
        want = {f"{w.name}:{i}": w.ip for w in workers for i in range(ranks)}

        def pool_idle():
            idle = {w["name"]: w for w in self.pool() if w.get("state") == "IDLE"}
            return set(idle) == set(want) and idle
        pool = wait_for(pool_idle, 60, f"{sorted(want)} to register and be idle", interval=0.2)
        self.assertEqual({n: w["host"] for n, w in pool.items()}, want)

        # The example job (world size <= ranks) runs on the ranks of one pod.
        _, job_id = self.run_example_job("pshard-example-mlp-abcde")
        r = self.pshardctl("get", job_id, "--output=json")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        self.assertEqual(got["state"], "SUCCEEDED", got)
        names = {w["id"]: n for n, w in pool.items()}
        placed = {names[mb["worker_id"]].rsplit(":", 1)[0] for mb in got["members"]}
        self.assertEqual(len(placed), 1, f"ranks placed on {placed}, not node by node")

        # The kubelet stops a pod: its preStop hook drains every rank of it
        # (the other pod's stay IDLE), and the pod runs on until SIGTERM.
        first = workers[0]
        self.assertEqual(first.run_pre_stop(self.grace(first)), 0,
                         read(os.path.join(first.dir, "pre-stop.log")))
        states = {w["name"]: w.get("state") for w in self.pool()}
        for name, ip in want.items():
            self.assertEqual(states[name], "DRAINING" if ip == first.ip else "IDLE", (name, states))
        self.assertIsNone(first.process.poll())
        # SIGTERM reaches every rank through the supervisor: all exit 0.
        self.assertEqual(first.terminate(self.grace(first), pre_stop=False), 0, first.tail())
        for pod in workers[1:] + [coordinator]:
            self.assertEqual(pod.terminate(self.grace(pod)), 0,
                             f"{pod.name} did not exit cleanly:\n{pod.tail()}")
        for pod in workers[1:]:
            self.assertEqual(pod.pre_stop_status, 0, f"{pod.name}'s preStop hook")


if __name__ == "__main__":
    unittest.main()
