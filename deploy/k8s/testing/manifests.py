"""Renders pshard's kustomizations with `kubectl kustomize` and finds objects.

Shared by the manifest tests. The kustomizations are read from the test's
runfiles (so Bazel knows every input), copied to a temporary directory first:
kustomize refuses a kustomization.yaml that is a symlink, which is what a
runfiles tree holds.
"""

import base64
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # A Python without PyYAML: Debian's has it (python3-yaml).
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    raise

# What can be applied: the overlays, each also with the shared-storage
# component (as an operator's own overlay composes them: "OVERLAY+COMPONENT"
# renders a kustomization with the overlay as its resource and the
# component), the example Job, the pod to run pshardctl in, and the
# cert-manager objects that issue the TLS Secrets.
OVERLAYS = ("overlays/cpu", "overlays/cpu-local-ranks", "overlays/gpu")
GPU_OVERLAYS = ("overlays/gpu",)
SHARED_STORAGE = "components/shared-storage"
WITH_SHARED_STORAGE = tuple(f"{o}+{SHARED_STORAGE}" for o in OVERLAYS)
DEPLOYMENTS = OVERLAYS + WITH_SHARED_STORAGE
EXAMPLE = "examples/mlp-job"
TOOLBOX = "examples/pshardctl"
CERT_MANAGER = "examples/cert-manager"
TARGETS = DEPLOYMENTS + (EXAMPLE, TOOLBOX, CERT_MANAGER)

# The command of a container that only idles, for `kubectl exec`.
IDLE_COMMAND = ["/bin/sleep", "infinity"]

# The Secrets deploy/k8s/tools/make_access_secrets.sh prints (not part of
# any kustomization: they hold tokens).
AUTH_SECRET = "pshard-auth"
WORKER_TOKENS_SECRET = "pshard-worker-tokens"
CLIENT_TOKEN_SECRET = "pshard-client-token"
ACCESS_SECRETS = (AUTH_SECRET, WORKER_TOKENS_SECRET, CLIENT_TOKEN_SECRET)

_copy = None


def workspace_dir():
    """The root of this repository in the test's runfiles (Bazel's
    TEST_SRCDIR/TEST_WORKSPACE); the source tree when run by hand. Not derived
    from __file__: Python resolves the main script's symlink, so modules
    beside it are imported from the source tree, not the runfiles."""
    if os.environ.get("TEST_SRCDIR"):
        return os.path.join(os.environ["TEST_SRCDIR"], os.environ.get("TEST_WORKSPACE", "pshard"))
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def k8s_dir():
    """deploy/k8s in the runfiles."""
    return os.path.join(workspace_dir(), "deploy", "k8s")


def kubectl():
    path = shutil.which("kubectl") or (
        "/usr/bin/kubectl" if os.path.exists("/usr/bin/kubectl") else None)
    if path is None:
        raise RuntimeError("kubectl is not installed (it renders the kustomizations)")
    return path


def _copied_tree():
    global _copy
    if _copy is None:
        tmp = tempfile.mkdtemp(prefix="pshard-k8s-", dir=os.environ.get("TEST_TMPDIR"))
        _copy = os.path.join(tmp, "k8s")
        # Dereferences the runfiles symlinks; leaves node_modules behind.
        shutil.copytree(k8s_dir(), _copy, symlinks=False,
                        ignore=shutil.ignore_patterns("node_modules", "testing", "*.py", "*.mjs"))
    return _copy


def overlay_of(target):
    """The overlay a deployment target starts from ("overlays/gpu" of
    "overlays/gpu+components/shared-storage")."""
    return target.split("+")[0]


def is_gpu(target):
    return overlay_of(target) in GPU_OVERLAYS


def _kustomization_dir(target):
    """The directory `kubectl kustomize` renders for `target`: the target's
    own, or for "OVERLAY+COMPONENT..." one made beside the copied tree whose
    kustomization.yaml has the overlay as resource and the components."""
    root = _copied_tree()
    overlay, *components = target.split("+")
    if not components:
        return os.path.join(root, target)
    d = os.path.join(root, "composed", re.sub(r"[^A-Za-z0-9]+", "-", target))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "kustomization.yaml"), "w") as f:
        yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                        "resources": [os.path.join("..", "..", overlay)],
                        "components": [os.path.join("..", "..", c) for c in components]}, f)
    return d


def render_text(target):
    """`kubectl kustomize` output (YAML) for a target such as "overlays/cpu"
    or "overlays/cpu+components/shared-storage"."""
    result = subprocess.run([kubectl(), "kustomize", _kustomization_dir(target)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {target} failed: {result.stderr.strip()}")
    return result.stdout


_rendered = {}


def render(target):
    """The rendered objects of `target`, as dicts (a fresh copy each call)."""
    if target not in _rendered:
        _rendered[target] = render_text(target)
    # libyaml's parser where PyYAML has it (Debian's does): many times faster.
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for d in yaml.load_all(_rendered[target], Loader=loader) if d is not None]


def find(objects, kind, name=None):
    found = [o for o in objects
             if o.get("kind") == kind and (name is None or o["metadata"]["name"] == name)]
    return found


def one(objects, kind, name=None):
    found = find(objects, kind, name)
    if len(found) != 1:
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def container(workload, name=None):
    containers = pod_spec(workload)["containers"]
    if name is None:
        assert len(containers) == 1, "expected one container"
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def local_ranks(c):
    """The ranks container `c` runs: its pshard-worker --local_ranks (1
    without one)."""
    values = [a.split("=", 1)[1] for a in c.get("args", []) if a.startswith("--local_ranks=")]
    assert len(values) <= 1, f"{c['name']}: --local_ranks given {len(values)} times"
    return int(values[0]) if values else 1


def config_map_data(objects, name):
    return one(objects, "ConfigMap", name).get("data", {})


def container_env(objects, c, pod_metadata):
    """The environment Kubernetes gives container `c`: envFrom ConfigMaps,
    then env entries (later wins), with fieldRefs resolved from pod_metadata
    (a dict with "name", "namespace" and, where used, "ip")."""
    env = {}
    for source in c.get("envFrom", []):
        ref = source.get("configMapRef")
        if ref is None:
            raise AssertionError(f"unsupported envFrom {source}")
        prefix = source.get("prefix", "")
        for k, v in config_map_data(objects, ref["name"]).items():
            env[prefix + k] = v
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif "valueFrom" in e:
            vf = e["valueFrom"]
            if "fieldRef" in vf:
                path = vf["fieldRef"]["fieldPath"]
                key = {"metadata.name": "name", "metadata.namespace": "namespace",
                       "status.podIP": "ip"}.get(path)
                if key is None or key not in pod_metadata:
                    raise AssertionError(f"unsupported fieldRef {path}")
                env[e["name"]] = pod_metadata[key]
            elif "resourceFieldRef" in vf:
                env[e["name"]] = resource_field(c, vf["resourceFieldRef"])
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                env[e["name"]] = config_map_data(objects, ref["name"])[ref["key"]]
            else:
                raise AssertionError(f"unsupported valueFrom {vf}")
        else:
            env[e["name"]] = ""
    return env


_QUANTITY = re.compile(r"^([0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_SUFFIX = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(q):
    """A Kubernetes quantity ("500m", "2", "4Gi") as a number."""
    mt = _QUANTITY.match(str(q))
    if not mt:
        raise AssertionError(f"unsupported quantity {q!r}")
    return float(mt.group(1)) * _SUFFIX[mt.group(2)]


def resource_field(c, ref):
    """The downward API's resourceFieldRef: the container's request or limit
    divided by the divisor, rounded up (what the kubelet does)."""
    assert ref.get("containerName", c["name"]) == c["name"], "other containers unsupported"
    kind, _, resource = ref["resource"].partition(".")
    value = c.get("resources", {}).get(kind, {}).get(resource)
    if value is None:
        raise AssertionError(f"{c['name']}: no {ref['resource']} to expose")
    return str(math.ceil(quantity(value) / quantity(ref.get("divisor", "1"))))


_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(s, env, missing=None):
    """Kubernetes' $(VAR) expansion of command, args and env values: $(VAR)
    becomes VAR's value when VAR is defined and stays as it is otherwise; $$
    is a literal $. Undefined names are appended to `missing` if given."""

    def sub(m):
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        if name in env:
            return env[name]
        if missing is not None:
            missing.append(name)
        return m.group(0)

    return _VAR.sub(sub, s)


def labels_match(selector, labels):
    """matchLabels-only selector against a label dict."""
    assert set(selector) <= {"matchLabels"}, f"unsupported selector {selector}"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def access_secrets_script():
    """deploy/k8s/tools/make_access_secrets.sh in the runfiles."""
    return os.path.join(k8s_dir(), "tools", "make_access_secrets.sh")


def run_access_secrets(*args, timeout=60):
    """Runs make_access_secrets.sh with `args`; the CompletedProcess (text)."""
    return subprocess.run(["bash", access_secrets_script(), *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, "TMPDIR": os.environ.get("TEST_TMPDIR", "/tmp")})


def access_secrets(workers, *args):
    """The Secrets make_access_secrets.sh prints for `workers` worker pods:
    (objects as parsed, {secret name: {key: decoded bytes as str}})."""
    r = run_access_secrets(f"--workers={workers}", *args)
    if r.returncode != 0:
        raise RuntimeError(f"make_access_secrets.sh failed ({r.returncode}): {r.stderr.strip()}")
    objects = [d for d in yaml.safe_load_all(r.stdout) if d is not None]
    data = {o["metadata"]["name"]: {k: base64.b64decode(v, validate=True).decode()
                                    for k, v in o.get("data", {}).items()}
            for o in objects}
    return objects, data


def parse_token_file(text):
    """A --auth_tokens file: [(token or sha256:digest, name, [roles])]."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        assert len(fields) == 3, f"bad token line {line!r}"
        out.append((fields[0], fields[1], fields[2].split(",")))
    return out


def dns_name_matches(pattern, host):
    """A certificate's DNS name (a leading "*." matches one label) against
    the host a client dials, as TLS checks it."""
    pattern, host = pattern.lower(), host.lower()
    if pattern.startswith("*."):
        label, _, rest = host.partition(".")
        return bool(label) and rest == pattern[2:]
    return pattern == host
