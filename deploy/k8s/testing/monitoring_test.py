"""deploy/k8s/monitoring: the PodMonitor scrapes the pods the overlays make,
on the port they serve metrics on, and the Grafana dashboard charts only
series pshard exports (each one documented in docs/deploy.md), and all of
them."""

import json
import os
import re
import unittest

import manifests as m
import yaml

METRIC = re.compile(r"\bpshard_[a-z_]+\b")
# What Prometheus derives from a histogram or counter's name.
SUFFIXES = ("_bucket", "_count", "_sum")
# Where the series are defined.
SOURCES = ("common/rpc_metrics.cc", "server/coordinator_metrics.cc",
           "worker/runtime/worker_metrics.cc")


def read(path):
    with open(os.path.join(m.workspace_dir(), path)) as f:
        return f.read()


def base_name(series):
    for suffix in SUFFIXES:
        if series.endswith(suffix):
            return series[:-len(suffix)]
    return series


def documented_metrics():
    """The metric names in docs/deploy.md's Metrics table."""
    names = set()
    for line in read("docs/deploy.md").splitlines():
        cell = re.match(r"\| `(pshard_[a-z_]+)", line)
        if cell:
            names.add(cell.group(1))
    return names


def defined_metrics():
    """Every quoted pshard_* name in the sources that define the series."""
    return {name for path in SOURCES
            for name in re.findall(r'"(pshard_[a-z_]+)"', read(path))}


class DashboardTest(unittest.TestCase):

    def setUp(self):
        self.dashboard = json.loads(read("deploy/k8s/monitoring/grafana-dashboard.json"))

    def charted(self):
        return {base_name(name) for panel in self.dashboard["panels"]
                for target in panel["targets"]
                for name in METRIC.findall(target["expr"])}

    def test_every_charted_series_is_exported_and_documented(self):
        defined, documented = defined_metrics(), documented_metrics()
        self.assertTrue(defined, "no metric definitions found")
        for name in sorted(self.charted()):
            with self.subTest(metric=name):
                self.assertIn(name, defined, "charted but not exported")
                self.assertIn(name, documented, "charted but not in docs/deploy.md")

    def test_every_exported_series_is_charted_and_documented(self):
        charted, documented = self.charted(), documented_metrics()
        for name in sorted(defined_metrics()):
            with self.subTest(metric=name):
                self.assertIn(name, charted, "exported but not on the dashboard")
                self.assertIn(name, documented, "exported but not in docs/deploy.md")

    def test_panels_are_well_formed(self):
        ids = [p["id"] for p in self.dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        for panel in self.dashboard["panels"]:
            with self.subTest(panel=panel["title"]):
                self.assertTrue(panel["targets"])
                refs = [t["refId"] for t in panel["targets"]]
                self.assertEqual(len(refs), len(set(refs)))
                for target in panel["targets"]:
                    expr = target["expr"]
                    self.assertEqual(expr.count("("), expr.count(")"), expr)
                    if "_bucket" in expr:
                        self.assertIn("histogram_quantile", expr)
                        self.assertIn("by (le", expr, "a quantile needs le kept")


class PodMonitorTest(unittest.TestCase):

    def test_selects_the_coordinator_and_workers_on_their_metrics_port(self):
        monitor = yaml.safe_load(read("deploy/k8s/monitoring/podmonitor.yaml"))
        self.assertEqual(monitor["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(monitor["kind"], "PodMonitor")
        for overlay in m.DEPLOYMENTS:
            objects = m.render(overlay)
            namespace = m.one(objects, "Namespace")["metadata"]["name"]
            self.assertEqual(monitor["metadata"]["namespace"], namespace)
            for kind, name in (("Deployment", "pshard-coordinator"),
                               ("StatefulSet", "pshard-worker")):
                with self.subTest(overlay=overlay, pods=name):
                    workload = m.one(objects, kind, name)
                    labels = workload["spec"]["template"]["metadata"]["labels"]
                    self.assertTrue(m.labels_match(monitor["spec"]["selector"], labels))
                    c = m.container(workload)
                    # Every rank's --metrics_listen port (rank i: base + i),
                    # and no other port, is a target.
                    listen = next(a for a in c["args"] if a.startswith("--metrics_listen="))
                    base = int(listen.rsplit(":", 1)[1])
                    ranks = m.local_ranks(c)
                    scraped = {p["containerPort"] for p in c.get("ports", [])
                               if scraped_port(monitor, p)}
                    self.assertEqual(scraped, set(range(base, base + ranks)),
                                     f"{name} ({ranks} ranks): the PodMonitor scrapes {sorted(scraped)}")


def scraped_port(monitor, port):
    """Whether one of the PodMonitor's endpoints makes a target of the named
    container port `port`: an endpoint's `port` selects that name, and its
    keep relabelings on the port name must match it (Prometheus anchors
    relabeling regexes)."""
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        if "port" in endpoint and endpoint["port"] != port.get("name"):
            continue
        kept = True
        for r in endpoint.get("relabelings", []):
            if r.get("action") == "keep" and \
                    r["sourceLabels"] == ["__meta_kubernetes_pod_container_port_name"]:
                kept = kept and re.fullmatch(r["regex"], port.get("name", "")) is not None
        if kept:
            return True
    return False

if __name__ == "__main__":
    unittest.main()
