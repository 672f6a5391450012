"""Renders pshard's kustomizations with `kubectl kustomize` and finds objects.

Shared by the manifest tests. The kustomizations are read from the test's
runfiles (so Bazel knows every input), copied to a temporary directory first:
kustomize refuses a kustomization.yaml that is a symlink, which is what a
runfiles tree holds.
"""

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

# What can be applied: the two overlays, the example Job, the pod to run
# pshardctl in, and the cert-manager objects that issue the TLS Secrets.
OVERLAYS = ("overlays/cpu", "overlays/gpu")
EXAMPLE = "examples/mlp-job"
TOOLBOX = "examples/pshardctl"
CERT_MANAGER = "examples/cert-manager"
TARGETS = OVERLAYS + (EXAMPLE, TOOLBOX, CERT_MANAGER)

# The command of a container that only idles, for `kubectl exec`.
IDLE_COMMAND = ["/bin/sleep", "infinity"]

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


def render_text(target):
    """`kubectl kustomize` output (YAML) for a target such as "overlays/cpu"."""
    result = subprocess.run([kubectl(), "kustomize", os.path.join(_copied_tree(), target)],
                            capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {target} failed: {result.stderr.strip()}")
    return result.stdout


_rendered = {}


def render(target):
    """The rendered objects of `target`, as dicts (a fresh copy each call)."""
    if target not in _rendered:
        _rendered[target] = render_text(target)
    return [d for d in yaml.safe_load_all(_rendered[target]) if d is not None]


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
