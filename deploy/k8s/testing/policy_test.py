"""Checks what pshard's rendered manifests promise, object by object and
across objects: the coordinator's rollout, state volume and probes, the worker
pool's identity, shared memory and resources, the security context of every
pod, that every reference (ConfigMap, volume, Service, $(VAR)) resolves, that
the NetworkPolicy lets exactly workers and clients in (and the kubelet to the
health port), that the flags are the ones the binaries define, TLS: no
--insecure anywhere, every TLS file in a mounted Secret that the cert-manager
example issues, probes on the plaintext health port, and access control:
every server's --auth_tokens from the Secret pshard-auth, each worker's own
token from pshard-worker-tokens under its pod name, the clients' token from
pshard-client-token, and workers advertising a name their certificate
carries."""

import hashlib
import json
import math
import os
import re
import unittest

import manifests as m

COORDINATOR = "pshard-coordinator"
WORKER = "pshard-worker"

# The flags each binary defines (the team's contract); a misspelled flag would
# stop the process at start-up.
# Every binary's transport flags (security/transport_flags.cc).
TRANSPORT_FLAGS = {
    "insecure", "tls_cert", "tls_key", "tls_ca", "tls_require_client_cert",
    "tls_server_name", "tls_reload_interval"}
# A server's access-control flags (security/server_access_flags.cc) and a
# client's token (security/client_token_flags.cc).
SERVER_ACCESS_FLAGS = {"auth_tokens", "auth_identities"}
CLIENT_TOKEN_FLAGS = {"token_file"}
FLAGS = {
    "/usr/local/bin/pshard-coordinator": {
        "listen", "port_file", "state_path", "heartbeat_interval", "worker_timeout",
        "metrics_listen", "health_listen", "health_port_file"}
        | TRANSPORT_FLAGS | SERVER_ACCESS_FLAGS,
    "/usr/local/bin/pshard-worker": {
        "coordinator", "name", "listen", "port_file", "host", "advertise_host", "device",
        "metrics_listen", "health_listen", "health_port_file", "local_ranks", "control_dir",
        "drain_and_wait", "drain_timeout"}
        | TRANSPORT_FLAGS | SERVER_ACCESS_FLAGS | CLIENT_TOKEN_FLAGS,
    "/usr/local/bin/pshardctl": {
        "coordinator", "output", "watch", "state", "limit", "include_lost", "reason",
        "connect_timeout", "rpc_timeout", "watch_timeout"} | TRANSPORT_FLAGS | CLIENT_TOKEN_FLAGS,
}


def pods(objects):
    """(object, pod template) for every object that makes pods."""
    return [(o, o["spec"]["template"]) for o in objects
            if o["kind"] in ("Deployment", "StatefulSet", "Job", "DaemonSet")]


def flag_values(args):
    flags = {}
    for a in args:
        mt = re.fullmatch(r"--([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?", a)
        if mt:
            flags[mt.group(1)] = mt.group(2)
    return flags


# The files of a kubernetes.io/tls Secret as cert-manager writes it.
SECRET_KEYS = {"tls.crt", "tls.key", "ca.crt"}
# Flags and environment variables that name a TLS file.
TLS_FILE_FLAGS = ("tls_cert", "tls_key", "tls_ca")
TLS_FILE_ENV = ("PSHARD_TLS_CA", "PSHARD_TLS_CERT", "PSHARD_TLS_KEY")
HEALTH_PORT = 8081


# Cluster-scoped kinds: no namespace.
CLUSTER_SCOPED = ("Namespace", "PriorityClass")
# Time a worker pod needs after its preStop hook to stop: SIGTERM aborts its
# job, a --local_ranks supervisor gives its ranks 20 s before SIGKILL
# (worker/local_ranks.h); the rest is slack.
STOP_AFTER_DRAIN_S = 30
# What the kubelet's resourceFieldRef cannot give (extended resources): GPUs.
GPU = "nvidia.com/gpu"
# Every pod runs as this user (the images' pshard user).
POD_USER = 65532


def duration_seconds(text):
    """An absl/Go duration flag ("540s", "9m", "1h30m") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
    parts = re.findall(r"([0-9]+(?:\.[0-9]+)?)(h|ms|us|ns|m|s)", text)
    assert parts and "".join(a + u for a, u in parts) == text, f"not a duration: {text!r}"
    return sum(float(a) * units[u] for a, u in parts)


def port_covered(rule, port):
    """Whether a NetworkPolicy ingress rule's ports include `port` (a rule
    without ports covers every port; endPort makes a range)."""
    if "ports" not in rule:
        return True
    return any(p["port"] <= port <= p.get("endPort", p["port"]) for p in rule["ports"])


def rank_ports(c, flag):
    """The ports of every local rank of container `c` for a listen flag
    (--listen, --health_listen, --metrics_listen): rank i serves base + i."""
    listen = flag_values(c.get("args", []))[flag]
    base = int(listen.rsplit(":", 1)[1])
    return list(range(base, base + m.local_ranks(c)))


def health_port(c):
    """The port of the container's --health_listen."""
    listen = flag_values(c.get("args", [])).get("health_listen")
    assert listen, f"{c['name']}: no --health_listen"
    return int(listen.rsplit(":", 1)[1])


def grpc_probe_port(c, probe):
    p = c.get(probe)
    assert p is not None, f"{c['name']}: no {probe}"
    assert set(p) & {"grpc", "httpGet", "tcpSocket", "exec"} == {"grpc"}, \
        f"{c['name']}: {probe} is not a gRPC probe"
    return p["grpc"]["port"]


class OverlayTest(unittest.TestCase):
    """The same checks on every overlay."""

    def each_overlay(self):
        """(overlay, rendered objects) of each overlay."""
        return [(overlay, m.render(overlay)) for overlay in m.DEPLOYMENTS]

    def test_renders_every_part(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                kinds = sorted(f"{o['kind']}/{o['metadata']['name']}" for o in objs)
                for part in ("Namespace/pshard", "Deployment/pshard-coordinator",
                             "Service/pshard-coordinator", "PersistentVolumeClaim/pshard-coordinator-state",
                             "PodDisruptionBudget/pshard-coordinator", "StatefulSet/pshard-worker",
                             "Service/pshard-worker", "NetworkPolicy/pshard-coordinator"):
                    self.assertIn(part, kinds)
                self.assertTrue(any(k.startswith("ConfigMap/pshard-config-") for k in kinds))
                self.assertEqual(len(kinds), len(set(kinds)), "duplicate objects")
                namespaced = [o for o in objs if o["kind"] not in CLUSTER_SCOPED]
                self.assertEqual({o["metadata"].get("namespace") for o in namespaced}, {"pshard"})

    def test_coordinator_is_one_pod_replaced_by_recreate(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                d = m.one(objs, "Deployment", COORDINATOR)
                self.assertEqual(d["spec"]["replicas"], 1)
                self.assertEqual(d["spec"]["strategy"], {"type": "Recreate"})

    def test_coordinator_state_lives_on_the_claim(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                d = m.one(objs, "Deployment", COORDINATOR)
                c = m.container(d)
                env = m.container_env(objs, c, {"name": "p", "namespace": "pshard", "ip": "10.0.0.9"})
                state_path = m.expand(flag_values(c["args"])["state_path"], env)
                claims = {v["name"]: v["persistentVolumeClaim"]["claimName"]
                          for v in m.pod_spec(d)["volumes"] if "persistentVolumeClaim" in v}
                mount = next((vm for vm in c["volumeMounts"]
                              if state_path.startswith(vm["mountPath"].rstrip("/") + "/")), None)
                self.assertIsNotNone(mount, f"--state_path={state_path} is on no volume")
                self.assertIn(mount["name"], claims, "the state volume is not a PVC")
                pvc = m.one(objs, "PersistentVolumeClaim", claims[mount["name"]])
                self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteOnce"])
                self.assertFalse(mount.get("readOnly", False))

    def test_coordinator_service_and_probes(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                d = m.one(objs, "Deployment", COORDINATOR)
                c = m.container(d)
                self.assertEqual(flag_values(c["args"])["listen"], "0.0.0.0:7070")
                # The kubelet's gRPC probes cannot speak TLS: they go to the
                # plaintext health-only port, which the container declares.
                self.assertEqual(health_port(c), HEALTH_PORT)
                self.assertIn(HEALTH_PORT, [p["containerPort"] for p in c["ports"]])
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertEqual(grpc_probe_port(c, probe), health_port(c))
                svc = m.one(objs, "Service", COORDINATOR)
                self.assertEqual(svc["spec"].get("type", "ClusterIP"), "ClusterIP")
                self.assertNotEqual(svc["spec"].get("clusterIP"), "None")
                labels = d["spec"]["template"]["metadata"]["labels"]
                self.assertTrue(m.labels_match({"matchLabels": svc["spec"]["selector"]}, labels))
                # The Service's selector must not also pick the workers.
                sts = m.one(objs, "StatefulSet", WORKER)
                self.assertFalse(m.labels_match({"matchLabels": svc["spec"]["selector"]},
                                                sts["spec"]["template"]["metadata"]["labels"]))
                port = svc["spec"]["ports"][0]
                self.assertEqual(port["port"], 7070)
                named = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(named.get(port["targetPort"], port["targetPort"]), 7070)

    def test_pod_disruption_budgets_select_their_pods(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                pdbs = m.find(objs, "PodDisruptionBudget")
                for name in (COORDINATOR, WORKER):
                    kind = "Deployment" if name == COORDINATOR else "StatefulSet"
                    labels = m.one(objs, kind, name)["spec"]["template"]["metadata"]["labels"]
                    self.assertTrue(any(m.labels_match(p["spec"]["selector"], labels) for p in pdbs),
                                    f"no PodDisruptionBudget selects {name}")

    def test_workers_are_a_stateful_set_with_a_headless_service(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                self.assertGreaterEqual(sts["spec"]["replicas"], 2)
                svc = m.one(objs, "Service", sts["spec"]["serviceName"])
                self.assertEqual(svc["spec"]["clusterIP"], "None")
                labels = sts["spec"]["template"]["metadata"]["labels"]
                self.assertTrue(m.labels_match(sts["spec"]["selector"], labels))
                self.assertTrue(m.labels_match({"matchLabels": svc["spec"]["selector"]}, labels))

    def test_worker_name_is_the_pod_name(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                c = m.container(sts)
                env = m.container_env(objs, c, {"name": "pshard-worker-3", "namespace": "pshard", "ip": "10.0.0.9"})
                args = flag_values([m.expand(a, env) for a in c["args"]])
                self.assertEqual(args["name"], "pshard-worker-3")
                # Gloo's address is the pod IP, which every pod can reach.
                self.assertEqual(args["host"], "10.0.0.9")

    def test_worker_reaches_the_coordinator_service(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                c = m.container(m.one(objs, "StatefulSet", WORKER))
                env = m.container_env(objs, c, {"name": "w", "namespace": "pshard", "ip": "10.0.0.9"})
                target = flag_values([m.expand(a, env) for a in c["args"]])["coordinator"]
                host, port = target.rsplit(":", 1)
                svc = m.one(objs, "Service", host.split(".")[0])
                self.assertIn(int(port), [p["port"] for p in svc["spec"]["ports"]])

    def test_worker_probes_and_status_port(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                c = m.container(m.one(objs, "StatefulSet", WORKER))
                self.assertEqual(flag_values(c["args"])["listen"], "0.0.0.0:7071")
                self.assertIn(7071, [p["containerPort"] for p in c["ports"]])
                self.assertEqual(health_port(c), HEALTH_PORT)
                self.assertIn(HEALTH_PORT, [p["containerPort"] for p in c["ports"]])
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    self.assertEqual(grpc_probe_port(c, probe), health_port(c))
                # A busy worker (a long step) must not be killed: liveness gives
                # at least 30 s before a restart.
                live = c["livenessProbe"]
                self.assertGreaterEqual(live["periodSeconds"] * live["failureThreshold"], 30)

    def test_worker_has_memory_backed_dev_shm(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                c = m.container(sts)
                mount = next(vm for vm in c["volumeMounts"] if vm["mountPath"] == "/dev/shm")
                vol = next(v for v in m.pod_spec(sts)["volumes"] if v["name"] == mount["name"])
                self.assertEqual(vol["emptyDir"]["medium"], "Memory")
                size = m.quantity(vol["emptyDir"]["sizeLimit"])
                # At least 1 GiB a rank (the runtime's default is 64 MiB),
                # and it counts against the container's memory limit.
                self.assertGreaterEqual(size, m.local_ranks(c) * 2**30)
                self.assertLess(size, m.quantity(c["resources"]["limits"]["memory"]))

    def test_gpu_only_in_the_gpu_overlay(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                c = m.container(m.one(objs, "StatefulSet", WORKER))
                env = m.container_env(objs, c, {"name": "w", "namespace": "pshard", "ip": "10.0.0.9"})
                device = flag_values([m.expand(a, env) for a in c["args"]])["device"]
                limits = c["resources"]["limits"]
                if m.is_gpu(overlay):
                    self.assertGreaterEqual(int(limits.get(GPU, 0)), 1)
                    self.assertTrue(device.startswith("cuda:") or device == "auto", device)
                    self.assertIn("/worker-gpu:", c["image"])
                else:
                    self.assertNotIn("nvidia.com/gpu", limits)
                    self.assertEqual(device, "cpu")
                    self.assertIn("/worker-cpu:", c["image"])

    def test_network_policy_admits_only_workers_and_clients(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                coord_labels = m.one(objs, "Deployment", COORDINATOR)["spec"]["template"]["metadata"]["labels"]
                worker_labels = m.one(objs, "StatefulSet", WORKER)["spec"]["template"]["metadata"]["labels"]
                client_labels = m.one(m.render(m.EXAMPLE), "Job")["spec"]["template"]["metadata"]["labels"]
                toolbox_labels = m.one(m.render(m.TOOLBOX), "Deployment")["spec"]["template"]["metadata"]["labels"]
                policies = [p for p in m.find(objs, "NetworkPolicy")
                            if m.labels_match(p["spec"]["podSelector"], coord_labels)]
                self.assertEqual(len(policies), 1)
                spec = policies[0]["spec"]
                self.assertIn("Ingress", spec["policyTypes"])

                def admitted(labels, port=7070):
                    for rule in spec.get("ingress", []):
                        if not port_covered(rule, port):
                            continue
                        if "from" not in rule:
                            return True  # from everywhere
                        for peer in rule["from"]:
                            self.assertIn(set(peer), ({"podSelector"},
                                                      {"podSelector", "namespaceSelector"}),
                                          "only pod selectors expected")
                            if m.labels_match(peer["podSelector"], labels):
                                return True
                    return False

                self.assertTrue(admitted(worker_labels), "workers cannot reach the coordinator")
                self.assertTrue(admitted(client_labels), "the example client cannot reach the coordinator")
                self.assertTrue(admitted(toolbox_labels), "the pshardctl pod cannot reach the coordinator")
                self.assertFalse(admitted({"app": "something-else"}), "an unlabelled pod gets in")
                self.assertFalse(admitted({**client_labels, "pshard.io/client": "false"}))
                # Prometheus reaches the metrics port only.
                scraper = {"pshard.io/metrics-scraper": "true"}
                self.assertTrue(admitted(scraper, 9090), "Prometheus cannot scrape")
                self.assertFalse(admitted(scraper, 7070), "the scraper reaches the API")
                self.assertFalse(admitted({"app": "something-else"}, 9090))
                # The kubelet's probes reach the plaintext health port from
                # the node (no pod labels at all), and only that port.
                c = m.container(m.one(objs, "Deployment", COORDINATOR))
                self.assertTrue(admitted({}, health_port(c)), "the kubelet cannot probe")
                self.assertFalse(admitted({}, 7070))

    def test_worker_network_policy_lets_peers_talk(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                worker_labels = m.one(objs, "StatefulSet", WORKER)["spec"]["template"]["metadata"]["labels"]
                for p in m.find(objs, "NetworkPolicy"):
                    if not m.labels_match(p["spec"]["podSelector"], worker_labels):
                        continue
                    peers_all_ports = [r for r in p["spec"]["ingress"]
                                       if "ports" not in r and any(
                                           m.labels_match(f["podSelector"], worker_labels)
                                           for f in r.get("from", []))]
                    self.assertTrue(peers_all_ports, "collective traffic between workers is blocked")

    def test_worker_network_policy_admits_the_kubelet_to_the_health_ports_only(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                worker_labels = sts["spec"]["template"]["metadata"]["labels"]
                health = rank_ports(m.container(sts), "health_listen")
                rules = [r for p in m.find(objs, "NetworkPolicy")
                         if m.labels_match(p["spec"]["podSelector"], worker_labels)
                         for r in p["spec"]["ingress"]]
                open_rules = [r for r in rules if "from" not in r]
                self.assertTrue(open_rules, "the kubelet cannot probe the workers")
                for r in open_rules:
                    # Every rank's health port (rank i: base + i), nothing else.
                    self.assertEqual([(p["port"], p.get("endPort", p["port"])) for p in r.get("ports", [])],
                                     [(health[0], health[-1])],
                                     "a rule from everywhere opens more than the ranks' health ports")

    def test_worker_network_policy_admits_every_rank(self):
        # A --local_ranks pod serves each rank's status (pshardctl logs
        # dials it) and metrics on ports of its own: clients and Prometheus
        # must reach all of them.
        client_labels = m.one(m.render(m.TOOLBOX), "Deployment")["spec"]["template"]["metadata"]["labels"]
        scraper = {"pshard.io/metrics-scraper": "true"}
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                c = m.container(sts)
                labels = sts["spec"]["template"]["metadata"]["labels"]
                rules = [r for p in m.find(objs, "NetworkPolicy")
                         if m.labels_match(p["spec"]["podSelector"], labels)
                         for r in p["spec"]["ingress"]]

                def admitted(peer, port):
                    return any(port_covered(r, port) and any(
                        m.labels_match(f["podSelector"], peer) for f in r.get("from", []))
                        for r in rules)
                for port in rank_ports(c, "listen"):
                    self.assertTrue(admitted(client_labels, port), f"clients cannot reach status port {port}")
                for port in rank_ports(c, "metrics_listen"):
                    self.assertTrue(admitted(scraper, port), f"Prometheus cannot scrape port {port}")
                # Nothing past the last rank.
                self.assertFalse(admitted(client_labels, rank_ports(c, "listen")[-1] + 1))
                self.assertFalse(admitted(scraper, rank_ports(c, "metrics_listen")[-1] + 1))

    def test_servers_have_guaranteed_qos(self):
        # requests == limits for every resource of every container, CPU and
        # memory given: the pod's QoS class is Guaranteed.
        for overlay, objs in self.each_overlay():
            for kind, name in (("Deployment", COORDINATOR), ("StatefulSet", WORKER)):
                for c in m.pod_spec(m.one(objs, kind, name))["containers"]:
                    with self.subTest(overlay=overlay, container=c["name"]):
                        requests = c.get("resources", {}).get("requests", {})
                        limits = c.get("resources", {}).get("limits", {})
                        for key in ("cpu", "memory"):
                            self.assertIn(key, limits, f"{c['name']}: no {key} limit")
                        self.assertEqual(set(requests), set(limits),
                                         f"{c['name']}: requests and limits name different resources")
                        for key, limit in limits.items():
                            self.assertEqual(m.quantity(requests[key]), m.quantity(limit),
                                             f"{c['name']}: {key} request {requests[key]} != limit {limit}")

    def test_disruption_budgets_allow_a_node_drain(self):
        # `kubectl drain` evicts through the budgets: one that allows no
        # disruption (maxUnavailable 0, minAvailable = replicas) blocks it
        # forever. The workers go one at a time.
        for overlay, objs in self.each_overlay():
            for pdb in m.find(objs, "PodDisruptionBudget"):
                with self.subTest(overlay=overlay, budget=pdb["metadata"]["name"]):
                    selected = [o for o, t in pods(objs)
                                if m.labels_match(pdb["spec"]["selector"], t["metadata"]["labels"])]
                    self.assertEqual(len(selected), 1, "a budget selects one workload")
                    replicas = selected[0]["spec"].get("replicas", 1)
                    self.assertEqual(allowed_disruptions(pdb["spec"], replicas),
                                     1, f"{pdb['metadata']['name']}: {pdb['spec']} with {replicas} replicas")
                    # A crash-looping pod never blocks a drain either.
                    self.assertEqual(pdb["spec"].get("unhealthyPodEvictionPolicy"), "AlwaysAllow")

    def test_worker_pre_stop_drains_within_the_grace_period(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                spec = m.pod_spec(sts)
                c = m.container(sts)
                hook = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
                self.assertTrue(hook, "the worker has no preStop exec hook")
                # The worker's own binary, drain mode, the worker's control
                # directory. The kubelet expands no $(VAR) in a hook.
                self.assertEqual(hook[0], c["command"][0])
                self.assertFalse([a for a in hook if "$(" in a], f"a $(VAR) in the hook: {hook}")
                flags = flag_values(hook[1:])
                self.assertIn("drain_and_wait", flags)
                self.assertIsNone(flags["drain_and_wait"])
                self.assertEqual(flags.get("control_dir"), flag_values(c["args"]).get("control_dir"),
                                 "the hook and the worker use different --control_dir")
                # On a volume of the pod's own that the worker can write.
                mount = next((vm for vm in c["volumeMounts"]
                              if vm["mountPath"].rstrip("/") == flags["control_dir"].rstrip("/")), None)
                self.assertIsNotNone(mount, f"--control_dir={flags['control_dir']} is not a mounted volume")
                self.assertFalse(mount.get("readOnly", False))
                volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
                self.assertIn("emptyDir", volume, "the control directory is the pod's own (emptyDir)")
                # The drain ends before the grace period does, with time left
                # to stop after it.
                drain = duration_seconds(flags["drain_timeout"])
                grace = spec.get("terminationGracePeriodSeconds", 30)
                self.assertLess(drain, grace)
                self.assertGreaterEqual(grace - drain, STOP_AFTER_DRAIN_S,
                                        f"--drain_timeout={flags['drain_timeout']} leaves "
                                        f"{grace - drain:g} s of the {grace} s grace period to stop")

    def test_every_gpu_of_the_pod_has_a_rank(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                c = m.container(m.one(objs, "StatefulSet", WORKER))
                ranks = m.local_ranks(c)
                self.assertTrue(1 <= ranks <= 64, f"--local_ranks={ranks}")
                env = m.container_env(objs, c, {"name": "w", "namespace": "pshard", "ip": "10.0.0.9"})
                device = flag_values([m.expand(a, env) for a in c["args"]])["device"]
                if m.is_gpu(overlay):
                    self.assertEqual(int(c["resources"]["limits"][GPU]), ranks,
                                     f"{GPU} limit != --local_ranks={ranks}")
                    # Rank i on cuda:i; one cuda:K cannot serve several ranks.
                    if ranks > 1:
                        self.assertEqual(device, "auto")
                else:
                    self.assertEqual(device, "cpu")

    def test_gpu_workers_are_one_pod_per_node(self):
        for overlay, objs in self.each_overlay():
            if not m.is_gpu(overlay):
                continue
            with self.subTest(overlay=overlay):
                sts = m.one(objs, "StatefulSet", WORKER)
                labels = sts["spec"]["template"]["metadata"]["labels"]
                terms = (m.pod_spec(sts).get("affinity", {}).get("podAntiAffinity", {})
                         .get("requiredDuringSchedulingIgnoredDuringExecution", []))
                self.assertTrue(any(t["topologyKey"] == "kubernetes.io/hostname"
                                    and m.labels_match(t["labelSelector"], labels)
                                    and not t.get("namespaces") for t in terms),
                                "no required anti-affinity keeps worker pods on separate nodes")

    def test_ranks_share_the_pod_cpus(self):
        # Each rank's BLAS threads times the ranks fit the pod's CPUs.
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                c = m.container(m.one(objs, "StatefulSet", WORKER))
                env = m.container_env(objs, c, {"name": "w", "namespace": "pshard", "ip": "10.0.0.9"})
                threads = int(env["OPENBLAS_NUM_THREADS"])
                cpus = m.quantity(c["resources"]["limits"]["cpu"])
                self.assertGreaterEqual(threads, 1)
                self.assertLessEqual(threads * m.local_ranks(c), cpus,
                                     f"{m.local_ranks(c)} ranks x {threads} threads > {cpus:g} CPUs")

    def test_priority_classes_are_set_and_shipped(self):
        for overlay, objs in self.each_overlay():
            with self.subTest(overlay=overlay):
                classes = {p["metadata"]["name"]: p for p in m.find(objs, "PriorityClass")}
                value = {}
                for kind, name in (("Deployment", COORDINATOR), ("StatefulSet", WORKER)):
                    pc = m.pod_spec(m.one(objs, kind, name)).get("priorityClassName")
                    self.assertIn(pc, classes, f"{name}: priorityClassName {pc!r} is not shipped")
                    value[name] = classes[pc]["value"]
                for pc in classes.values():
                    self.assertFalse(pc.get("globalDefault", False), "pshard's class is the cluster's default")
                    # User classes stay at or below 1e9 (above is the system's).
                    self.assertLessEqual(pc["value"], 10**9)
                # Without the coordinator nothing runs: it outranks its workers.
                self.assertGreater(value[COORDINATOR], value[WORKER])


def allowed_disruptions(spec, replicas):
    """How many of `replicas` healthy pods a PodDisruptionBudget lets be
    evicted at once (percentages round up, as the disruption controller
    rounds them)."""
    def count(v):
        if isinstance(v, str) and v.endswith("%"):
            return math.ceil(replicas * int(v[:-1]) / 100)
        return int(v)
    if "maxUnavailable" in spec:
        return count(spec["maxUnavailable"])
    return replicas - count(spec["minAvailable"])


class SharedStorageTest(unittest.TestCase):
    """components/shared-storage: one ReadWriteMany claim, mounted at the
    same path in the coordinator and every worker (output_dir and
    checkpoints: ranks write shards, the coordinator the manifest)."""

    def test_mounts_one_rwx_claim_at_the_same_path_everywhere(self):
        for target in m.WITH_SHARED_STORAGE:
            with self.subTest(target=target):
                objs = m.render(target)
                workloads = [m.one(objs, "Deployment", COORDINATOR), m.one(objs, "StatefulSet", WORKER)]
                rwx = [p for p in m.find(objs, "PersistentVolumeClaim")
                       if "ReadWriteMany" in p["spec"]["accessModes"]]
                self.assertEqual(len(rwx), 1, "one ReadWriteMany claim")
                claim = rwx[0]["metadata"]["name"]
                self.assertEqual(rwx[0]["metadata"].get("namespace"), "pshard")
                paths = set()
                for w in workloads:
                    spec = m.pod_spec(w)
                    volumes = [v for v in spec["volumes"]
                               if v.get("persistentVolumeClaim", {}).get("claimName") == claim]
                    self.assertEqual(len(volumes), 1, f"{w['metadata']['name']} does not mount {claim}")
                    self.assertEqual(set(volumes[0]) - {"name"}, {"persistentVolumeClaim"})
                    for c in spec["containers"]:
                        mounts = [vm for vm in c["volumeMounts"] if vm["name"] == volumes[0]["name"]]
                        self.assertEqual(len(mounts), 1, f"{c['name']}: {claim} not mounted once")
                        self.assertFalse(mounts[0].get("readOnly", False))
                        self.assertNotIn("subPath", mounts[0])
                        paths.add(mounts[0]["mountPath"])
                        # Nothing else is mounted at or over that path.
                        others = [vm["mountPath"] for vm in c["volumeMounts"] if vm is not mounts[0]
                                  and (vm["mountPath"] + "/").startswith(mounts[0]["mountPath"] + "/")]
                        self.assertEqual(others, [], c["name"])
                self.assertEqual(len(paths), 1, f"{claim} is mounted at {sorted(paths)}")
                # The path the workers' output volume had without it, which
                # docs/deploy.md tells job specs to use.
                plain = m.container(m.one(m.render(m.overlay_of(target)), "StatefulSet", WORKER))
                output = next(vm["mountPath"] for vm in plain["volumeMounts"] if vm["name"] == "output")
                self.assertEqual(paths, {output})


class EveryObjectTest(unittest.TestCase):
    """Checks on every pod-making object of every target."""

    def each_pod(self):
        """(all objects, object, pod template) of each pod-making object."""
        return [(objs, obj, template) for objs in map(m.render, m.TARGETS)
                for obj, template in pods(objs)]

    def test_security_context(self):
        for _, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                spec = template["spec"]
                pod_sc = spec.get("securityContext", {})
                self.assertFalse(spec.get("hostNetwork", False) or spec.get("hostPID", False)
                                 or spec.get("hostIPC", False))
                self.assertFalse(spec.get("automountServiceAccountToken", True),
                                 "pshard needs no Kubernetes API token")
                self.assertEqual(pod_sc.get("seccompProfile", {}).get("type"), "RuntimeDefault")
                for c in spec["containers"] + spec.get("initContainers", []):
                    sc = c.get("securityContext", {})
                    self.assertTrue(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")), c["name"])
                    self.assertNotEqual(sc.get("runAsUser", pod_sc.get("runAsUser")), 0)
                    self.assertIs(sc.get("readOnlyRootFilesystem"), True, c["name"])
                    self.assertIs(sc.get("allowPrivilegeEscalation"), False, c["name"])
                    self.assertFalse(sc.get("privileged", False))
                    self.assertEqual(sc.get("capabilities", {}).get("drop"), ["ALL"], c["name"])
                    self.assertFalse(sc.get("capabilities", {}).get("add"))

    def test_resources_requests_and_limits(self):
        for _, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                for c in template["spec"]["containers"]:
                    res = c.get("resources", {})
                    for key in ("cpu", "memory"):
                        self.assertIn(key, res.get("requests", {}), c["name"])
                        self.assertIn(key, res.get("limits", {}), c["name"])

    def test_images_are_pinned(self):
        for _, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                for c in template["spec"]["containers"]:
                    image = c["image"]
                    self.assertRegex(image, r"^pshard/[a-z0-9-]+:[0-9][0-9A-Za-z.+-]*$|@sha256:",
                                     f"{image}: no version tag")
                    self.assertNotEqual(c.get("imagePullPolicy"), "Always")

    def test_references_resolve(self):
        for objs, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                spec = template["spec"]
                volumes = {v["name"]: v for v in spec.get("volumes", [])}
                for v in volumes.values():
                    if "configMap" in v:
                        m.one(objs, "ConfigMap", v["configMap"]["name"])
                    if "persistentVolumeClaim" in v:
                        m.one(objs, "PersistentVolumeClaim", v["persistentVolumeClaim"]["claimName"])
                for c in spec["containers"]:
                    for vm in c.get("volumeMounts", []):
                        self.assertIn(vm["name"], volumes, f"{c['name']}: no volume {vm['name']}")
                    # Every $(VAR) in command and args is defined, so Kubernetes
                    # expands it (it would pass an undefined one through as is).
                    env = m.container_env(objs, c, {"name": "pod", "namespace": "pshard", "ip": "10.0.0.9"})
                    missing = []
                    for a in c.get("command", []) + c.get("args", []):
                        m.expand(a, env, missing)
                    self.assertEqual(missing, [], f"{c['name']}: undefined $(VAR)")
                    # Servers get a writable /tmp on their read-only root
                    # (clients write nothing).
                    if template["metadata"]["labels"].get("app.kubernetes.io/component") != "client":
                        writable = [vm["mountPath"] for vm in c.get("volumeMounts", [])
                                    if not vm.get("readOnly")]
                        self.assertIn("/tmp", writable, f"{c['name']}: no writable /tmp")

    def test_no_plaintext_anywhere(self):
        for objs, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                for c in template["spec"]["containers"]:
                    args = c.get("command", []) + c.get("args", [])
                    self.assertFalse([a for a in args if a.split("=")[0] == "--insecure"],
                                     f"{c['name']}: --insecure")
                    env = m.container_env(objs, c, {"name": "pod", "namespace": "pshard", "ip": "10.0.0.9"})
                    self.assertNotIn("PSHARD_INSECURE", env, c["name"])

    def test_tls_files_are_in_mounted_secrets(self):
        for objs, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                spec = template["spec"]
                secrets = {v["name"]: v["secret"] for v in spec.get("volumes", []) if "secret" in v}
                for c in spec["containers"]:
                    env = m.container_env(objs, c, {"name": "pod", "namespace": "pshard", "ip": "10.0.0.9"})
                    flags = flag_values([m.expand(a, env) for a in c.get("args", [])])
                    paths = {f"--{f}": flags[f] for f in TLS_FILE_FLAGS if flags.get(f)}
                    paths.update({f"${e}": env[e] for e in TLS_FILE_ENV if env.get(e)})
                    if c["command"] + c.get("args", []) != m.IDLE_COMMAND:
                        # Every pshard process has a CA to check its peers
                        # with, and a certificate (mutual TLS).
                        self.assertTrue({"--tls_ca", "$PSHARD_TLS_CA"} & set(paths), c["name"])
                        self.assertIn("--tls_cert", paths, c["name"])
                        self.assertIn("--tls_key", paths, c["name"])
                    for what, path in paths.items():
                        mount = next((vm for vm in c.get("volumeMounts", [])
                                      if path.startswith(vm["mountPath"].rstrip("/") + "/")), None)
                        self.assertIsNotNone(mount, f"{c['name']}: {what}={path} is on no volume")
                        self.assertIn(mount["name"], secrets,
                                      f"{c['name']}: {what}={path} is not in a Secret volume")
                        self.assertTrue(mount.get("readOnly"), f"{c['name']}: {mount['name']} is writable")
                        # The whole Secret: a subPath mount is never updated,
                        # so a renewed certificate would not reach the process.
                        self.assertNotIn("subPath", mount)
                        self.assertIn(os.path.relpath(path, mount["mountPath"]), SECRET_KEYS, what)
                        # Not readable by other users of the node's files.
                        mode = secrets[mount["name"]].get("defaultMode", 0o644)
                        self.assertEqual(mode & 0o007, 0, f"{mount['name']}: mode {mode:o}")
                        if not mode & 0o004:
                            self.assertEqual(spec.get("securityContext", {}).get("fsGroup"), 65532,
                                             "the Secret is readable by its group only: fsGroup")

    def test_secrets_are_the_ones_cert_manager_or_the_access_script_makes(self):
        certificates = {c["spec"]["secretName"]: c
                        for c in m.find(m.render(m.CERT_MANAGER), "Certificate")}
        _, access = m.access_secrets(1)
        self.assertEqual(set(access), set(m.ACCESS_SECRETS))
        for objs, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                for v in template["spec"].get("volumes", []):
                    if "secret" in v:
                        self.assertIn(v["secret"]["secretName"], set(certificates) | set(access))
                        # A pod without its Secret waits instead of starting
                        # without TLS or tokens.
                        self.assertIs(v["secret"].get("optional", False), False, v["name"])


    def test_flags_are_the_binaries_flags(self):
        for _, obj, template in self.each_pod():
            with self.subTest(object=obj['metadata']['name']):
                for c in template["spec"]["containers"]:
                    self.assertIn("command", c, "the command must be explicit (the smoke test runs it)")
                    if c["command"] + c.get("args", []) == m.IDLE_COMMAND:
                        continue
                    binary = c["command"][0]
                    self.assertIn(binary, FLAGS)
                    for a in c["command"][1:] + c.get("args", []):
                        if a.startswith("--"):
                            name = a[2:].split("=", 1)[0]
                            self.assertIn(name, FLAGS[binary], f"{binary}: unknown flag --{name}")


def secret_mount(test, template, c, path, secret):
    """The volume mount of container `c` that holds `path`, checked to be the
    whole Secret `secret`, read-only, not readable by others; the key of
    `path` in it."""
    spec = template["spec"]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mount = next((vm for vm in c.get("volumeMounts", [])
                  if path.startswith(vm["mountPath"].rstrip("/") + "/")), None)
    test.assertIsNotNone(mount, f"{c['name']}: {path} is on no volume")
    v = volumes[mount["name"]]
    test.assertIn("secret", v, f"{c['name']}: {path} is not in a Secret volume")
    test.assertEqual(v["secret"]["secretName"], secret, path)
    test.assertTrue(mount.get("readOnly"), f"{c['name']}: {mount['name']} is writable")
    test.assertNotIn("subPath", mount)
    # Every key (a pod name must find its own), and mandatory.
    test.assertNotIn("items", v["secret"])
    test.assertIs(v["secret"].get("optional"), False, f"{v['name']}: optional must be false")
    mode = v["secret"].get("defaultMode", 0o644)
    test.assertEqual(mode & 0o007, 0, f"{v['name']}: mode {mode:o}")
    test.assertEqual(mode & 0o222, 0, f"{v['name']}: mode {mode:o}")
    if not mode & 0o004:
        test.assertEqual(spec.get("securityContext", {}).get("fsGroup"), 65532,
                         "the Secret is readable by its group only: fsGroup")
    key = os.path.relpath(path, mount["mountPath"])
    test.assertNotIn("/", key, path)
    return key


def worker_pods(sts, namespace="pshard"):
    """(pod name, downward-API metadata) of each replica of the StatefulSet."""
    return [(f"{sts['metadata']['name']}-{i}",
             {"name": f"{sts['metadata']['name']}-{i}", "namespace": namespace, "ip": f"10.0.0.{10 + i}"})
            for i in range(sts["spec"]["replicas"])]


class AccessTest(unittest.TestCase):
    """Access control: tokens from Secrets, never in a manifest."""

    def test_every_server_reads_the_digest_file_from_pshard_auth(self):
        _, access = m.access_secrets(2)
        for overlay in m.DEPLOYMENTS:
            objs = m.render(overlay)
            for kind, name in (("Deployment", COORDINATOR), ("StatefulSet", WORKER)):
                with self.subTest(overlay=overlay, server=name):
                    workload = m.one(objs, kind, name)
                    c = m.container(workload)
                    env = m.container_env(objs, c, {"name": "p", "namespace": "pshard", "ip": "10.0.0.9"})
                    flags = flag_values([m.expand(a, env) for a in c["args"]])
                    self.assertEqual(flags.get("auth_tokens"), "/etc/pshard/auth/tokens")
                    key = secret_mount(self, workload["spec"]["template"], c, flags["auth_tokens"],
                                       m.AUTH_SECRET)
                    self.assertIn(key, access[m.AUTH_SECRET])
                    # Digests only: the Secret every server mounts holds
                    # nothing a reader could present.
                    for token, _, _ in m.parse_token_file(access[m.AUTH_SECRET][key]):
                        self.assertRegex(token, r"^sha256:[0-9a-f]{64}$")

    def test_each_worker_presents_its_own_token(self):
        made = {}  # replicas -> the Secrets for that many pods (made once)
        for overlay in m.DEPLOYMENTS:
            objs = m.render(overlay)
            sts = m.one(objs, "StatefulSet", WORKER)
            replicas = sts["spec"]["replicas"]
            if replicas not in made:
                made[replicas] = m.access_secrets(replicas)[1]
            access = made[replicas]
            principals = {t: (n, r) for t, n, r in m.parse_token_file(access[m.AUTH_SECRET]["tokens"])}
            c = m.container(sts)
            seen = set()
            for pod, meta in worker_pods(sts):
                with self.subTest(overlay=overlay, pod=pod):
                    env = m.container_env(objs, c, meta)
                    flags = flag_values([m.expand(a, env) for a in c["args"]])
                    self.assertEqual(flags.get("token_file"), f"/etc/pshard/worker-tokens/{pod}")
                    key = secret_mount(self, sts["spec"]["template"], c, flags["token_file"],
                                       m.WORKER_TOKENS_SECRET)
                    self.assertEqual(key, pod)
                    token = access[m.WORKER_TOKENS_SECRET][key].strip()
                    seen.add(token)
                    # The principal the coordinator finds for it is the
                    # worker's --name, with role worker: it may act as this
                    # worker only.
                    digest = "sha256:" + hashlib.sha256(token.encode()).hexdigest()
                    self.assertEqual(principals.get(digest), (flags["name"], ["worker"]))
            self.assertEqual(len(seen), sts["spec"]["replicas"], "workers share a token")

    def test_workers_advertise_a_name_their_certificate_carries(self):
        certs = {c["spec"]["secretName"]: c for c in m.find(m.render(m.CERT_MANAGER), "Certificate")}
        for overlay in m.DEPLOYMENTS:
            objs = m.render(overlay)
            sts = m.one(objs, "StatefulSet", WORKER)
            svc = m.one(objs, "Service", sts["spec"]["serviceName"])
            self.assertEqual(svc["spec"].get("clusterIP"), "None", "per-pod DNS needs a headless Service")
            tls_secret = next(v["secret"]["secretName"] for v in m.pod_spec(sts)["volumes"]
                              if v["name"] == "tls")
            names = certs[tls_secret]["spec"]["dnsNames"]
            c = m.container(sts)
            for pod, meta in worker_pods(sts, namespace=sts["metadata"]["namespace"]):
                with self.subTest(overlay=overlay, pod=pod):
                    env = m.container_env(objs, c, meta)
                    host = flag_values([m.expand(a, env) for a in c["args"]])["advertise_host"]
                    # The pod's DNS name under the headless Service.
                    self.assertEqual(host, f"{pod}.{svc['metadata']['name']}."
                                           f"{svc['metadata']['namespace']}.svc")
                    self.assertTrue(any(m.dns_name_matches(n, host) for n in names),
                                    f"{host} is not covered by the pool certificate {names}")

    def test_clients_read_their_token_from_pshard_client_token(self):
        _, access = m.access_secrets(1)
        for target in (m.EXAMPLE, m.TOOLBOX):
            objs = m.render(target)
            for obj, template in pods(objs):
                for c in template["spec"]["containers"]:
                    with self.subTest(target=target, container=c["name"]):
                        env = m.container_env(objs, c, {"name": "p", "namespace": "pshard", "ip": "10.0.0.9"})
                        self.assertIn("PSHARD_TOKEN_FILE", env)
                        key = secret_mount(self, template, c, env["PSHARD_TOKEN_FILE"],
                                           m.CLIENT_TOKEN_SECRET)
                        self.assertIn(key, access[m.CLIENT_TOKEN_SECRET])

    def test_no_token_in_any_manifest(self):
        for objs in map(m.render, m.TARGETS):
            self.assertEqual(m.find(objs, "Secret"), [], "Secrets come from make_access_secrets.sh")
            for obj, template in pods(objs):
                for c in template["spec"]["containers"]:
                    with self.subTest(object=obj["metadata"]["name"], container=c["name"]):
                        names = {e["name"] for e in c.get("env", [])}
                        self.assertNotIn("PSHARD_TOKEN", names, "a token in the manifest")
                        self.assertFalse([a for a in c.get("args", []) if a.startswith("--token=")])


class TlsTest(unittest.TestCase):
    """The servers' TLS settings and the certificates that match them."""

    def test_servers_require_client_certificates(self):
        for overlay in m.DEPLOYMENTS:
            objs = m.render(overlay)
            for kind, name in (("Deployment", COORDINATOR), ("StatefulSet", WORKER)):
                with self.subTest(overlay=overlay, server=name):
                    args = m.container(m.one(objs, kind, name))["args"]
                    self.assertIn("--tls_require_client_cert", args)

    def test_certificates_name_what_clients_dial(self):
        certs = {c["spec"]["secretName"]: c for c in m.find(m.render(m.CERT_MANAGER), "Certificate")}
        objs = m.render(m.OVERLAYS[0])

        def secret_of(workload):
            return next(v["secret"]["secretName"] for v in m.pod_spec(workload)["volumes"]
                        if "secret" in v)

        coordinator = certs[secret_of(m.one(objs, "Deployment", COORDINATOR))]
        # What workers and clients dial: $PSHARD_COORDINATOR's host (and the
        # Service's longer DNS names); none of them sets --tls_server_name.
        c = m.container(m.one(objs, "StatefulSet", WORKER))
        env = m.container_env(objs, c, {"name": "w", "namespace": "pshard", "ip": "10.0.0.9"})
        dialled = flag_values([m.expand(a, env) for a in c["args"]])["coordinator"].rsplit(":", 1)[0]
        self.assertNotIn("tls_server_name", flag_values(c["args"]))
        names = coordinator["spec"]["dnsNames"]
        for name in (dialled, f"{COORDINATOR}.pshard.svc", f"{COORDINATOR}.pshard.svc.cluster.local"):
            self.assertIn(name, names)
        self.assertIn("server auth", coordinator["spec"]["usages"])
        # Workers are servers (WorkerStatus) and clients (of the coordinator).
        worker = certs[secret_of(m.one(objs, "StatefulSet", WORKER))]
        self.assertTrue({"server auth", "client auth"} <= set(worker["spec"]["usages"]))
        self.assertIn(f"*.{WORKER}.pshard.svc.cluster.local", worker["spec"]["dnsNames"])
        client = certs[secret_of(m.one(m.render(m.EXAMPLE), "Job"))]
        self.assertIn("client auth", client["spec"]["usages"])

    def test_cert_manager_chain(self):
        objs = m.render(m.CERT_MANAGER)
        issuers = {i["metadata"]["name"]: i for i in m.find(objs, "Issuer")}
        ca_issuers = {n for n, i in issuers.items() if "ca" in i["spec"]}
        self.assertEqual(len(ca_issuers), 1)
        ca_issuer = issuers[ca_issuers.pop()]
        ca_cert = next(c for c in m.find(objs, "Certificate")
                       if c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"])
        self.assertIs(ca_cert["spec"].get("isCA"), True)
        self.assertIn("selfSigned", issuers[ca_cert["spec"]["issuerRef"]["name"]]["spec"])
        for cert in m.find(objs, "Certificate"):
            if cert is ca_cert:
                continue
            with self.subTest(certificate=cert["metadata"]["name"]):
                # Issued by the CA Issuer, which writes ca.crt into the Secret.
                self.assertEqual(cert["spec"]["issuerRef"]["name"], ca_issuer["metadata"]["name"])
                self.assertFalse(cert["spec"].get("isCA", False))
                # Renewed well before it expires, with a new key.
                self.assertIn("renewBefore", cert["spec"])
                self.assertEqual(cert["spec"].get("privateKey", {}).get("rotationPolicy"), "Always")
        self.assertEqual({o["metadata"]["namespace"] for o in objs}, {"pshard"})


class ExampleJobTest(unittest.TestCase):

    def test_submits_the_spec_from_its_config_map_and_watches(self):
        objs = m.render(m.EXAMPLE)
        job = m.one(objs, "Job")
        c = m.container(job)
        argv = c["command"] + c.get("args", [])
        self.assertEqual(argv[:2], ["/usr/local/bin/pshardctl", "submit"])
        self.assertIn("--watch", argv)
        spec_path = [a for a in argv[2:] if not a.startswith("--")]
        self.assertEqual(len(spec_path), 1)
        spec_path = spec_path[0]
        mount = next(vm for vm in c["volumeMounts"]
                     if spec_path.startswith(vm["mountPath"].rstrip("/") + "/"))
        vol = next(v for v in m.pod_spec(job)["volumes"] if v["name"] == mount["name"])
        data = m.config_map_data(objs, vol["configMap"]["name"])
        spec = json.loads(data[os.path.relpath(spec_path, mount["mountPath"])])
        self.assertEqual(spec["optimizer"]["kind"], "ADAM")
        # The job fits the smallest worker pool of the overlays.
        pool = min(m.one(m.render(o), "StatefulSet", WORKER)["spec"]["replicas"]
                   for o in m.DEPLOYMENTS)
        self.assertLessEqual(spec["worldSize"], pool)

    def test_client_reaches_the_coordinator_service(self):
        job = m.one(m.render(m.EXAMPLE), "Job")
        c = m.container(job)
        env = m.container_env([], c, {"name": "p", "namespace": "pshard", "ip": "10.0.0.9"})
        svc = m.one(m.render(m.OVERLAYS[0]), "Service", COORDINATOR)
        self.assertEqual(env["PSHARD_COORDINATOR"],
                         f"{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}")
        self.assertEqual(job["metadata"]["namespace"], svc["metadata"]["namespace"])
        self.assertEqual(job["spec"]["template"]["metadata"]["labels"]["pshard.io/client"], "true")

    def test_never_submits_twice(self):
        job = m.one(m.render(m.EXAMPLE), "Job")
        self.assertEqual(job["spec"]["backoffLimit"], 0)
        self.assertEqual(m.pod_spec(job)["restartPolicy"], "Never")


if __name__ == "__main__":
    unittest.main()
