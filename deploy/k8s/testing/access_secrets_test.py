"""deploy/k8s/tools/make_access_secrets.sh: the tokens it makes, the digest
file that matches them (SHA-256, as security/tokens.cc hashes a presented
token), the roles, the Secrets it prints (names, namespace, keys), the files
--out keeps and their modes, that no token reaches standard error, and that
bad arguments are refused with exit 2 and a message naming the argument."""

import base64
import hashlib
import os
import re
import stat
import tempfile
import unittest

import manifests as m

TOKEN = re.compile(r"^[0-9a-f]{64}$")


def digest(token):
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


class AccessSecretsTest(unittest.TestCase):

    def tmp(self):
        return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def test_digest_file_matches_the_tokens(self):
        objects, data = m.access_secrets(3)
        self.assertEqual([o["metadata"]["name"] for o in objects], list(m.ACCESS_SECRETS))
        lines = m.parse_token_file(data[m.AUTH_SECRET]["tokens"])
        self.assertEqual(set(data[m.AUTH_SECRET]), {"tokens"})
        by_digest = {t: (name, roles) for t, name, roles in lines}
        self.assertEqual(len(by_digest), len(lines), "a digest given twice")
        # Only digests in the servers' file.
        for t in by_digest:
            self.assertRegex(t, r"^sha256:[0-9a-f]{64}$")
        workers = data[m.WORKER_TOKENS_SECRET]
        self.assertEqual(sorted(workers), [f"pshard-worker-{i}" for i in range(3)])
        for pod, token in workers.items():
            token = token.strip()
            self.assertRegex(token, TOKEN)
            self.assertEqual(by_digest[digest(token)], (pod, ["worker"]), pod)
        self.assertEqual(set(data[m.CLIENT_TOKEN_SECRET]), {"token"})
        client = data[m.CLIENT_TOKEN_SECRET]["token"].strip()
        self.assertRegex(client, TOKEN)
        self.assertEqual(by_digest[digest(client)], ("pshardctl", ["admin"]))
        # One line per principal, nothing else; every token different.
        self.assertEqual(len(lines), 4)
        self.assertEqual(len({t.strip() for t in workers.values()} | {client}), 4)

    def test_secrets_are_opaque_and_in_the_namespace(self):
        objects, _ = m.access_secrets(1, "--namespace=ml-prod")
        for o in objects:
            with self.subTest(secret=o["metadata"]["name"]):
                self.assertEqual(o["apiVersion"], "v1")
                self.assertEqual(o["kind"], "Secret")
                self.assertEqual(o["type"], "Opaque")
                self.assertEqual(o["metadata"]["namespace"], "ml-prod")
                self.assertEqual(o["metadata"]["labels"]["app.kubernetes.io/name"], "pshard")
                self.assertNotIn("stringData", o)
                for v in o["data"].values():
                    base64.b64decode(v, validate=True)

    def test_new_tokens_every_run(self):
        _, a = m.access_secrets(1)
        _, b = m.access_secrets(1)
        self.assertNotEqual(a[m.CLIENT_TOKEN_SECRET]["token"], b[m.CLIENT_TOKEN_SECRET]["token"])
        self.assertNotEqual(a[m.WORKER_TOKENS_SECRET]["pshard-worker-0"],
                            b[m.WORKER_TOKENS_SECRET]["pshard-worker-0"])

    def test_options(self):
        _, data = m.access_secrets(2, "--statefulset", "gpu-pool", "--client-name=ci-bot",
                                   "--client-role=submit")
        self.assertEqual(sorted(data[m.WORKER_TOKENS_SECRET]), ["gpu-pool-0", "gpu-pool-1"])
        names = {(n, tuple(r)) for _, n, r in m.parse_token_file(data[m.AUTH_SECRET]["tokens"])}
        self.assertEqual(names, {("ci-bot", ("submit",)), ("gpu-pool-0", ("worker",)),
                                 ("gpu-pool-1", ("worker",))})

    def test_out_keeps_the_files_private(self):
        out = os.path.join(self.tmp(), "access")
        r = m.run_access_secrets("--workers=2", f"--out={out}")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(out).st_mode), 0o700)
        files = ["tokens", "client.token", "worker-tokens/pshard-worker-0",
                 "worker-tokens/pshard-worker-1"]
        for f in files:
            with self.subTest(file=f):
                mode = stat.S_IMODE(os.stat(os.path.join(out, f)).st_mode)
                self.assertEqual(mode, 0o600, f"{f}: {mode:o}")
        self.assertEqual(sorted(os.listdir(os.path.join(out, "worker-tokens"))),
                         ["pshard-worker-0", "pshard-worker-1"])
        # The files are the Secrets' contents.
        secrets = {o["metadata"]["name"]: o["data"]
                   for o in m.yaml.safe_load_all(r.stdout) if o}

        def read(f):
            with open(os.path.join(out, f)) as fh:
                return fh.read()
        self.assertEqual(base64.b64decode(secrets[m.AUTH_SECRET]["tokens"]).decode(), read("tokens"))
        self.assertEqual(base64.b64decode(secrets[m.CLIENT_TOKEN_SECRET]["token"]).decode(),
                         read("client.token"))
        # An --out that already holds tokens is refused: old and new would mix.
        r = m.run_access_secrets("--workers=2", f"--out={out}")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--out", r.stderr)

    def test_no_token_on_stderr_and_no_files_left_without_out(self):
        tmpdir = self.tmp()
        r = m.subprocess.run(["bash", m.access_secrets_script(), "--workers=2"],
                             capture_output=True, text=True, timeout=60,
                             env={**os.environ, "TMPDIR": tmpdir})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.listdir(tmpdir), [], "the temporary files were left behind")
        secrets = {o["metadata"]["name"]: o["data"] for o in m.yaml.safe_load_all(r.stdout) if o}
        tokens = [base64.b64decode(v).decode().strip()
                  for name in (m.WORKER_TOKENS_SECRET, m.CLIENT_TOKEN_SECRET)
                  for v in secrets[name].values()]
        for t in tokens:
            self.assertNotIn(t, r.stderr)
            self.assertNotIn(t, r.stdout.replace(base64.b64encode((t + "\n").encode()).decode(), ""),
                             "a token in clear on standard output")
        self.assertIn("2 worker token", r.stderr)

    def test_bad_arguments_are_refused(self):
        cases = [
            ((), "--workers is required"),
            (("--workers=0",), "--workers=0"),
            (("--workers=-1",), "--workers=-1"),
            (("--workers=two",), "--workers=two"),
            (("--workers=1001",), "--workers=1001"),
            (("--workers",), "--workers needs a value"),
            (("--workers=2", "--namespace=Prod"), "--namespace=Prod"),
            (("--workers=2", "--statefulset=pool_a"), "--statefulset=pool_a"),
            (("--workers=2", "--client-name=two words"), "--client-name=two words"),
            (("--workers=2", "--client-name=pshard-worker-7"), "a worker pod's name"),
            (("--workers=2", "--client-role=worker"), "--client-role=worker"),
            (("--workers=2", "--client-role=root"), "want admin, submit or read"),
            (("--workers=2", "--tokens=x"), "unknown flag --tokens"),
            (("--workers=2", "extra"), 'unexpected argument "extra"'),
        ]
        for args, message in cases:
            with self.subTest(args=args):
                r = m.run_access_secrets(*args)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(message, r.stderr)
                self.assertEqual(r.stdout, "", "a refused run printed Secrets")

    def test_out_that_is_a_file_is_refused(self):
        f = os.path.join(self.tmp(), "file")
        open(f, "w").close()
        r = m.run_access_secrets("--workers=1", f"--out={f}")
        self.assertEqual(r.returncode, 2)
        self.assertIn("not an empty directory", r.stderr)

    def test_help(self):
        r = m.run_access_secrets("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("--workers N", r.stderr)


if __name__ == "__main__":
    unittest.main()
