"""Reads pshard's Dockerfiles (deploy/docker/*.Dockerfile) into stages and
instructions, enough for the static checks in the tests beside it (the
images are checked against the repository and the manifests without being
built) and for make_base_image.sh (`--cpu_packages`)."""

import ast
import json
import os
import re
import shlex

# Image name in the manifests -> Dockerfile.
IMAGES = {
    "pshard/coordinator": "coordinator.Dockerfile",
    "pshard/worker-cpu": "worker-cpu.Dockerfile",
    "pshard/worker-gpu": "worker-gpu.Dockerfile",
    "pshard/pshardctl": "pshardctl.Dockerfile",
}


def workspace_dir():
    """The root of this repository in the test's runfiles (Bazel's
    TEST_SRCDIR/TEST_WORKSPACE); the source tree when run by hand. Not derived
    from __file__: Python resolves the main script's symlink, so modules
    beside it are imported from the source tree, not the runfiles."""
    if os.environ.get("TEST_SRCDIR"):
        return os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "pshard"))
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def docker_dir():
    """deploy/docker in the runfiles."""
    return os.path.join(workspace_dir(), "deploy", "docker")


class Stage:
    def __init__(self, image, name):
        self.image = image
        self.name = name
        self.instructions = []  # (KEYWORD, argument text)

    def all(self, keyword):
        return [arg for k, arg in self.instructions if k == keyword]


class Dockerfile:
    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        self.args = {}
        self.stages = []
        with open(path) as f:
            self._parse(f.read())

    def _parse(self, text):
        logical = []
        current = ""
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.startswith("#") and not current:
                continue
            if stripped.startswith("#"):
                continue  # a comment inside a continued instruction
            if stripped.endswith("\\"):
                current += stripped[:-1] + " "
                continue
            current += stripped
            if current.strip():
                logical.append(current.strip())
            current = ""
        if current.strip():
            logical.append(current.strip())
        for inst in logical:
            keyword, _, arg = inst.partition(" ")
            keyword = keyword.upper()
            arg = arg.strip()
            if keyword == "ARG" and not self.stages:
                k, _, v = arg.partition("=")
                self.args[k] = v
            elif keyword == "FROM":
                parts = arg.split()
                image = self.expand(parts[0])
                name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
                self.stages.append(Stage(image, name))
            else:
                if not self.stages:
                    raise ValueError(f"{self.name}: {keyword} before FROM")
                self.stages[-1].instructions.append((keyword, arg))

    def expand(self, s):
        return re.sub(r"\$\{(\w+)\}|\$(\w+)",
                      lambda m: self.args.get(m.group(1) or m.group(2), m.group(0)), s)

    @property
    def final(self):
        return self.stages[-1]

    def copies(self, stage):
        """(flags, sources, destination) of each COPY/ADD of a stage."""
        out = []
        for k, arg in stage.instructions:
            if k not in ("COPY", "ADD"):
                continue
            assert k == "COPY", f"{self.name}: use COPY, not ADD"
            words = shlex.split(arg)
            flags = {w.split("=", 1)[0]: w.split("=", 1)[1] if "=" in w else ""
                     for w in words if w.startswith("--")}
            paths = [w for w in words if not w.startswith("--")]
            out.append((flags, paths[:-1], paths[-1]))
        return out

    def entrypoint(self):
        eps = self.final.all("ENTRYPOINT")
        assert len(eps) == 1, f"{self.name}: expected one ENTRYPOINT"
        return json.loads(eps[0])  # exec form only

    def env(self):
        """ENV of the final stage (KEY=VALUE form), in order."""
        env = {}
        for arg in self.final.all("ENV"):
            for word in shlex.split(arg):
                k, sep, v = word.partition("=")
                assert sep, f"{self.name}: use ENV KEY=VALUE"
                env[k] = re.sub(r"\$\{?(\w+)\}?", lambda mt: env.get(mt.group(1), ""), v)
        return env

    def binary_source(self):
        """The Bazel output path (relative to bazel-bin) of the ENTRYPOINT."""
        ep = self.entrypoint()[0]
        for flags, sources, dest in self.copies(self.final):
            if "--from" not in flags and dest == ep:
                return sources[0]
        raise AssertionError(f"{self.name}: ENTRYPOINT {ep} is not copied from the context")

    def user(self):
        users = self.final.all("USER")
        return users[-1] if users else None

    def apt_packages(self, stage):
        """Packages of `apt-get install` in a stage's RUN instructions; a
        `$packages` argument stands for the RUN's `packages="..."` list."""
        pkgs = []
        for run in stage.all("RUN"):
            listed = re.search(r'\bpackages="([^"]*)"', run)
            for command in re.split(r"&&|;", run):
                words = command.split()
                if "apt-get" in words and "install" in words:
                    for w in words[words.index("install") + 1:]:
                        if w == "$packages" and listed:
                            pkgs += listed.group(1).split()
                        elif not w.startswith("-"):
                            pkgs.append(w)
        return pkgs


def load_all():
    d = docker_dir()
    return {f: Dockerfile(os.path.join(d, f)) for f in sorted(os.listdir(d))
            if f.endswith(".Dockerfile")}


def source_root():
    """The source tree (the runfiles hold symlinks into it). BUILD files of
    other packages are not visible to the tests as data, so they are read
    from there."""
    return os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.realpath(os.path.join(docker_dir(), "coordinator.Dockerfile")))))


def cc_binaries(package):
    """Names of the cc_binary targets of a package of this repository (name ->
    testonly), read from its BUILD file (Starlark that Python's parser reads);
    None when the package has no BUILD file."""
    for build in ("BUILD.bazel", "BUILD"):
        path = os.path.join(source_root(), package, build)
        if os.path.exists(path):
            break
    else:
        return None
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "cc_binary":
            kw = {k.arg: k.value for k in node.keywords}
            if isinstance(kw.get("name"), ast.Constant):
                testonly = isinstance(kw.get("testonly"), ast.Constant) and kw["testonly"].value
                names[kw["name"].value] = bool(testonly)
    return names


def cpu_image_packages():
    """Every Debian package the CPU images install: what a base image made by
    make_base_image.sh must hold so that no image build needs a registry."""
    pkgs = set()
    for name, df in load_all().items():
        if "gpu" not in name:
            for stage in df.stages:
                pkgs.update(df.apt_packages(stage))
    return sorted(pkgs)


if __name__ == "__main__":
    import sys
    if sys.argv[1:] != ["--cpu_packages"]:
        sys.exit("usage: dockerfiles.py --cpu_packages")
    print(" ".join(cpu_image_packages()))
