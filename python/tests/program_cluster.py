"""The real pshard-coordinator and pshard-workers on free loopback ports,
driven through the real pshardctl: the cluster of the program-job tests."""

import hashlib
import json
import os
import secrets
import signal
import subprocess
import time

# The runfiles tree, where the binaries are. Under `bazel test` it is named
# by TEST_SRCDIR: this module may be imported from the source tree (Python
# puts the script's resolved directory first on sys.path).
if "TEST_SRCDIR" in os.environ:
    ROOT = os.path.join(os.environ["TEST_SRCDIR"],
                        os.environ.get("TEST_WORKSPACE", "pshard"))
else:
    ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "python", "tests")


def binary(path):
    return os.path.join(ROOT, path)


def wait_until(predicate, timeout, what):
    """Polls `predicate` until it returns a true value (returned) or
    `timeout` seconds pass (AssertionError naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.05)


def read_file(path):
    """The file's text, or "" while it does not exist."""
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes (its parent has not reaped it yet).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        # Gone between the kill and the read (a read of a vanished
        # process's /proc file raises ESRCH).
        return False


def write_access_files(directory, roles):
    """A token for each principal of `roles` (name -> role) in
    directory/NAME.token, and directory/tokens, the servers' --auth_tokens,
    naming each by its SHA-256 (security/tokens.h). Returns name -> path."""
    paths = {}
    lines = []
    for name, role in roles.items():
        token = secrets.token_hex(32)
        paths[name] = os.path.join(directory, f"{name}.token")
        with open(paths[name], "w") as f:
            f.write(token + "\n")
        digest = hashlib.sha256(token.encode()).hexdigest()
        lines.append(f"sha256:{digest} {name} {role}\n")
    with open(os.path.join(directory, "tokens"), "w") as f:
        f.writelines(lines)
    return paths


class Cluster:
    """The real coordinator and `workers` real workers on free loopback
    ports, driven through pshardctl."""

    def __init__(self, workers, tmp, worker_timeout="2s", blame_window="2s",
                 tls=False):
        """`tls`: mutual TLS with a CA made for the cluster in tmp/tls (a
        certificate each for the coordinator, every worker and pshardctl)
        and access control, as a secure cluster runs: each worker presents
        its own token (role worker), so its program's ranks call the
        coordinator with it; pshardctl an admin token. Otherwise plaintext on
        loopback."""
        self.tmp = tmp
        self.processes = []
        self.logs = []
        names = ["pshard-coordinator", "pshardctl"] + [
            f"worker-{i}" for i in range(workers)]
        if tls:
            tls_dir = os.path.join(tmp, "tls")
            subprocess.run([binary("tests/testing/make_certificates"),
                            f"--dir={tls_dir}", "--names=" + ",".join(names)],
                           check=True, timeout=60)

        tokens = {}
        if tls:
            tokens = write_access_files(
                tls_dir, {"admin": "admin", **{
                    f"worker-{i}": "worker" for i in range(workers)}})

        def security(name, server=True):
            if not tls:
                return ["--insecure"]
            flags = [f"--tls_cert={tls_dir}/{name}.crt",
                     f"--tls_key={tls_dir}/{name}.key",
                     f"--tls_ca={tls_dir}/ca.crt"]
            if server:
                flags += ["--tls_require_client_cert",
                          f"--auth_tokens={tls_dir}/tokens"]
            if name in tokens:
                flags.append(f"--token_file={tokens[name]}")
            return flags

        self.client_flags = security("pshardctl", server=False) + (
            [f"--token_file={tokens['admin']}"] if tls else [])
        port_file = os.path.join(tmp, "coordinator.port")
        self._start("coordinator", [
            binary("server/pshard-coordinator"), "--listen=127.0.0.1:0",
            *security("pshard-coordinator"),
            f"--port_file={port_file}",
            f"--state_path={os.path.join(tmp, 'state.db')}",
            "--heartbeat_interval=100ms", f"--worker_timeout={worker_timeout}",
            f"--blame_window={blame_window}"])
        self.address = f"127.0.0.1:{self._port(port_file)}"
        for i in range(workers):
            port_file = os.path.join(tmp, f"worker{i}.port")
            self._start(f"worker{i}", [
                binary("worker/pshard-worker"), f"--coordinator={self.address}",
                f"--name=worker-{i}", "--listen=127.0.0.1:0",
                *security(f"worker-{i}"),
                f"--port_file={port_file}", "--host=127.0.0.1",
                f"--log_dir={os.path.join(tmp, f'logs{i}')}"])
            self._port(port_file)
        wait_until(lambda: self.idle_workers() == workers, 30,
                   f"{workers} idle workers")

    def _start(self, name, argv):
        log = os.path.join(self.tmp, f"{name}.log")
        self.logs.append(log)
        with open(log, "w") as out:
            self.processes.append(subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT))

    def _port(self, port_file):
        def read():
            text = read_file(port_file).strip()
            return int(text) if text.isdigit() else None
        return wait_until(read, 30, port_file)

    def ctl(self, *args):
        """pshardctl --output=json ARGS, parsed."""
        result = subprocess.run(
            [binary("cli/pshardctl"), f"--coordinator={self.address}", *self.client_flags,
             "--output=json", *args],
            capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"pshardctl {' '.join(args)} exited "
                                 f"{result.returncode}: {result.stderr}")
        return json.loads(result.stdout)

    def events(self, job_id):
        """The job's events (pshardctl watch --output=json: one JobEvent per
        line, from the first; it returns when the job has ended)."""
        result = subprocess.run(
            [binary("cli/pshardctl"), f"--coordinator={self.address}", *self.client_flags,
             "--output=json", "watch", job_id],
            capture_output=True, text=True, timeout=60)
        return [json.loads(line) for line in result.stdout.splitlines()
                if line.strip()]

    def idle_workers(self):
        workers = self.ctl("workers").get("workers", [])
        return sum(1 for w in workers if w.get("state") == "IDLE")

    def signal_worker_of_rank(self, job, rank, sig):
        """Sends `sig` to the worker process holding `rank` of `job` (a
        pshardctl get); returns its worker id. SIGKILL is waited for."""
        worker_id = next(m["worker_id"] for m in job["members"]
                         if int(m.get("rank", 0)) == rank)
        name = next(w["name"] for w in self.ctl("workers")["workers"]
                    if w["id"] == worker_id)
        process = self.processes[1 + int(name.rsplit("-", 1)[1])]
        process.send_signal(sig)  # processes[0] is the coordinator
        if sig == signal.SIGKILL:
            process.wait()
        return worker_id

    def submit(self, spec):
        path = os.path.join(self.tmp, f"job-{time.monotonic_ns()}.json")
        with open(path, "w") as f:
            json.dump(spec, f)
        return self.ctl("submit", path)["id"]

    def wait_for_end(self, job_id, timeout):
        return wait_until(
            lambda: (lambda job: job if job["state"] in (
                "SUCCEEDED", "FAILED", "CANCELLED") else None)(
                    self.ctl("get", job_id)),
            timeout, f"job {job_id} ends")

    def tail(self):
        text = []
        for log in self.logs:
            text.append(f"--- {log}\n{read_file(log)[-3000:]}")
        return "\n".join(text)

    def stop(self):
        for p in self.processes[:0:-1]:  # workers first, then coordinator
            p.send_signal(signal.SIGCONT)  # a frozen one, too
            p.send_signal(signal.SIGTERM)
        for p in self.processes[:0:-1]:
            self._reap(p)
        self.processes[0].send_signal(signal.SIGTERM)
        self._reap(self.processes[0])

    @staticmethod
    def _reap(p):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
