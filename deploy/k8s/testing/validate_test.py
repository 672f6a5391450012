"""Every rendered object of every kustomization, and the Secrets that
deploy/k8s/tools/make_access_secrets.sh prints, are valid against the current
Kubernetes API types (deploy/k8s/validate/validate.mjs), and the validator
itself rejects what it must: unknown fields, wrong types, missing required
fields, names and labels the API server refuses, unknown kinds and API
versions Kubernetes no longer serves.

The validator runs on Node.js with npm packages that
deploy/tools/setup_validator.sh installs, pinned by package-lock.json, into
deploy/k8s/validate/node_modules. Tests run without network, so they use that
installed tree: the script is run through its real path (the runfiles hold a
symlink to it), and Node resolves its imports from the node_modules beside
it. package-lock.json is a declared input, so a change of pinned versions
re-runs the test. A missing or mismatched install fails the test with the
command that fixes it; it never skips."""

import os
import shutil
import subprocess
import tempfile
import unittest

import manifests as m

TESTDATA = os.path.join(m.k8s_dir(), "validate", "testdata")


def validator():
    return os.path.realpath(os.path.join(m.k8s_dir(), "validate", "validate.mjs"))


def node():
    path = shutil.which("node") or ("/usr/bin/node" if os.path.exists("/usr/bin/node") else None)
    if path is None:
        raise RuntimeError("node is not installed (the validator runs on Node.js)")
    return path


def run_validator(*files, script=None, stdin=None):
    return subprocess.run([node(), script or validator(), *files], input=stdin,
                          capture_output=True, text=True, timeout=120)


class RenderedManifestsTest(unittest.TestCase):

    def test_every_target_is_valid(self):
        for target in m.TARGETS:
            with self.subTest(target=target):
                text = m.render_text(target)
                r = run_validator("-", stdin=text)
                self.assertEqual(r.returncode, 0, f"{target}:\n{r.stdout}{r.stderr}")
                self.assertRegex(r.stdout, r"validate: \d+ objects, 0 invalid")

    def test_access_secrets_are_valid(self):
        # What deploy/k8s/tools/make_access_secrets.sh prints for kubectl apply.
        r = m.run_access_secrets("--workers=3")
        self.assertEqual(r.returncode, 0, r.stderr)
        v = run_validator("-", stdin=r.stdout)
        self.assertEqual(v.returncode, 0, v.stdout + v.stderr)
        self.assertIn("validate: 3 objects, 0 invalid", v.stdout)

    def test_base_alone_is_valid(self):
        r = run_validator("-", stdin=m.render_text("base"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


class ValidatorTest(unittest.TestCase):

    def expect_invalid(self, name, *messages):
        r = run_validator(os.path.join(TESTDATA, name))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for msg in messages:
            self.assertIn(msg, r.stdout)

    def test_accepts_current_fields(self):
        r = run_validator(os.path.join(TESTDATA, "valid.yaml"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("validate: 2 objects, 0 invalid", r.stdout)

    def test_rejects_unknown_fields(self):
        self.expect_invalid("unknown_field.yaml",
                            "/metadata/lables: unknown field",
                            "/spec/template/spec/containers/0/livenesProbe: unknown field")

    def test_rejects_wrong_types(self):
        self.expect_invalid("wrong_type.yaml",
                            "/spec/replicas: must be integer",
                            "/spec/template/spec/containers/0/readinessProbe/grpc/port: must be integer")

    def test_rejects_missing_required_fields(self):
        self.expect_invalid("missing_required.yaml", "/spec/containers/0: must have required property name")

    def test_rejects_names_the_api_server_refuses(self):
        self.expect_invalid("bad_names.yaml",
                            '/metadata/name: "Coordinator" is not a DNS-1123 subdomain',
                            '/metadata/labels/app: invalid label value "two words"',
                            '/containers/0/name: "the_coordinator" is not a DNS-1123 label',
                            '/ports/0/name: "grpc-coordinator-port" is not an IANA service name')

    def test_rejects_unknown_kinds(self):
        self.expect_invalid("unknown_kind.yaml", 'kind "Widget": not a Kubernetes API type')

    def test_accepts_the_cert_manager_kinds_it_allows(self):
        r = run_validator(os.path.join(TESTDATA, "cert_manager_valid.yaml"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("validate: 2 objects, 0 invalid", r.stdout)

    def test_rejects_cert_manager_mistakes(self):
        r = run_validator(os.path.join(TESTDATA, "cert_manager_invalid.yaml"))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        for msg in ("Certificate/misspelled: /spec/dnsName: unknown field",
                    "Certificate/wrong-types: /spec/isCA: must be boolean",
                    "Certificate/wrong-types: /spec/duration: must match",
                    "Certificate/wrong-types: /spec/usages/0: must be one of",
                    "Certificate/no-secret: /spec: must have required property secretName",
                    "Issuer/two-kinds: /spec: must have exactly one of selfSigned, ca",
                    'kind "ClusterIssuer": not in this validator\'s cert-manager allowance',
                    "cert-manager.io/v1alpha2: pre-release API version"):
            self.assertIn(msg, r.stdout)
        # Every object of the file is refused.
        self.assertIn("validate: 6 objects, 6 invalid", r.stdout)

    def test_rejects_versions_no_longer_served(self):
        self.expect_invalid("removed_version.yaml", "policy/v1beta1: pre-release API version")

    def test_rejects_empty_input(self):
        r = run_validator("-", stdin="---\n")
        self.assertEqual(r.returncode, 1)

    def test_fails_without_its_packages(self):
        # The same script beside no node_modules: an error naming the fix.
        tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        for f in ("validate.mjs", "package.json", "package-lock.json"):
            shutil.copy(os.path.join(m.k8s_dir(), "validate", f), tmp)
        r = run_validator(os.path.join(TESTDATA, "valid.yaml"),
                          script=os.path.join(tmp, "validate.mjs"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("setup_validator.sh", r.stderr)


if __name__ == "__main__":
    unittest.main()
