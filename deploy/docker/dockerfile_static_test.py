"""Static checks of pshard's Dockerfiles that need no build output: pinned
small base images, a non-root numeric user, exec-form entrypoints that are
the binaries they copy, build contexts that send only those binaries, tidy
apt installs, and agreement with the Kubernetes manifests (image -> Dockerfile,
command = ENTRYPOINT, pod user = image user, container ports exposed).
dockerfile_outputs_test checks the copied files against the Bazel outputs."""

import os
import unittest

import dockerfiles as d
from deploy.k8s.testing import manifests as m

# The binaries the images carry: Bazel output path (relative to bazel-bin,
# the build context) -> path in the image.
BINARIES = {
    "server/pshard-coordinator": "/usr/local/bin/pshard-coordinator",
    "worker/pshard-worker": "/usr/local/bin/pshard-worker",
    "cli/pshardctl": "/usr/local/bin/pshardctl",
}


class DockerfileTest(unittest.TestCase):

    def setUp(self):
        self.files = d.load_all()

    def each(self):
        self.assertEqual(sorted(self.files), sorted(d.IMAGES.values()))
        return list(self.files.values())

    def test_base_images_are_pinned_and_small(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                for stage in df.stages:
                    self.assertRegex(stage.image, r"^[a-z0-9./-]+:[0-9][A-Za-z0-9._-]*$",
                                     f"{stage.image}: pin a versioned tag")
                if "gpu" in df.name:
                    self.assertRegex(df.final.image, r"^nvidia/cuda:13\.[0-9.]+-runtime-ubuntu[0-9.]+$")
                    self.assertRegex(df.stages[0].image, r"^debian:12\.[0-9]+-slim$")
                else:
                    self.assertEqual(len(df.stages), 1)
                    self.assertRegex(df.final.image, r"^debian:12\.[0-9]+-slim$")

    def test_runs_as_a_non_root_numeric_user(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                user = df.user()
                self.assertIsNotNone(user, "no USER: the image would run as root")
                self.assertRegex(user, r"^[1-9][0-9]*:[1-9][0-9]*$", "numeric uid:gid, not root")
                # USER comes after every RUN of the final stage: nothing runs as
                # root at run time.
                keywords = [k for k, _ in df.final.instructions]
                self.assertGreater(len(keywords) - keywords[::-1].index("USER") - 1,
                                   len(keywords) - keywords[::-1].index("RUN") - 1)
                # The user the image creates has that uid.
                self.assertRegex(" ".join(df.final.all("RUN")),
                                 r"useradd --uid %s --gid %s " % tuple(user.split(":")))

    def test_entrypoint_is_the_copied_binary(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                ep = df.entrypoint()
                copies = [c for c in df.copies(df.final) if "--from" not in c[0]]
                self.assertEqual(len(copies), 1, "the final stage copies one binary")
                _, sources, dest = copies[0]
                self.assertEqual(len(sources), 1)
                self.assertIn(sources[0], BINARIES, f"{sources[0]} is not a pshard binary")
                self.assertEqual(dest, BINARIES[sources[0]])
                self.assertEqual(ep[0], dest)
                self.assertNotIn("--config", " ".join(ep))

    def test_build_context_sends_only_the_binary(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                ignore = df.path + ".dockerignore"
                self.assertTrue(os.path.exists(ignore), f"{ignore} is missing")
                with open(ignore) as f:
                    patterns = [l.strip() for l in f if l.strip() and not l.startswith("#")]
                sources = sorted({s for stage in df.stages for flags, srcs, _ in df.copies(stage)
                                  if "--from" not in flags for s in srcs})
                self.assertEqual(patterns, ["*"] + ["!" + s for s in sources])

    def test_apt_installs_are_tidy(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                for stage in df.stages:
                    pkgs = df.apt_packages(stage)
                    if not pkgs:
                        continue
                    runs = " ".join(stage.all("RUN"))
                    self.assertIn("--no-install-recommends", runs)
                    self.assertIn("rm -rf /var/lib/apt/lists/*", runs)
                    debian = stage.image.startswith("debian:")
                    if debian:
                        self.assertEqual(pkgs, sorted(pkgs), "keep the package list sorted")
                        for p in pkgs:
                            self.assertNotIn("=", p, "Debian stable versions come with the base image tag")
                            self.assertNotRegex(p, r"-dev$", "runtime packages only")

    def test_cpu_images_carry_no_cuda(self):
        for df in self.each():
            with self.subTest(dockerfile=df.name):
                if "gpu" not in df.name:
                    text = " ".join(a for st in df.stages for _, a in st.instructions).lower()
                    self.assertNotRegex(text, r"cuda|nccl|nvidia")


class ManifestAgreementTest(unittest.TestCase):
    """The manifests run the images the Dockerfiles build, as they build them."""

    def test_every_container_matches_its_image(self):
        files = d.load_all()
        seen = set()
        for target in m.TARGETS:
            objs = m.render(target)
            for obj in objs:
                if obj["kind"] not in ("Deployment", "StatefulSet", "Job"):
                    continue
                spec = obj["spec"]["template"]["spec"]
                for c in spec["containers"]:
                    with self.subTest(target=target, container=c["name"]):
                        repo, _, tag = c["image"].rpartition(":")
                        self.assertIn(repo, d.IMAGES, f"{c['image']}: no Dockerfile builds it")
                        df = files[d.IMAGES[repo]]
                        seen.add(df.name)
                        if c["command"] + c.get("args", []) != m.IDLE_COMMAND:
                            self.assertEqual(c["command"][0], df.entrypoint()[0])
                        uid, gid = df.user().split(":")
                        sc = {**spec.get("securityContext", {}), **c.get("securityContext", {})}
                        self.assertEqual(str(sc.get("runAsUser")), uid)
                        self.assertEqual(str(sc.get("runAsGroup")), gid)
                        exposed = {int(p.split("/")[0]) for e in df.final.all("EXPOSE")
                                   for p in e.split()}
                        # A --local_ranks N pod's rank i serves each port + i.
                        served = {p + i for p in exposed for i in range(m.local_ranks(c))}
                        for port in c.get("ports", []):
                            self.assertIn(port["containerPort"], served,
                                          f"EXPOSE {sorted(exposed)}, {m.local_ranks(c)} ranks")
        self.assertEqual(seen, set(files), "a Dockerfile that no manifest uses")


if __name__ == "__main__":
    unittest.main()
