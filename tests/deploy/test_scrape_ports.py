"""Every tailhound process's metrics port is scraped, by name, by each way deploy/prometheus offers: the
Prometheus Operator's monitors (ServiceMonitor -> Service -> targetPort, or PodMonitor -> pod port) and plain
Prometheus' pod discovery (prometheus-kubernetes.yml's relabelling). The port comes from the process's own
configuration in the manifests (its listen address), its name from the container's ports."""

from __future__ import annotations

import pytest

from .helpers import K8S_DIR
from .test_observability import (
    PROCESSES,
    PROM_DIR,
    SCRAPE_K8S,
    _k8s,
    _load,
    _pod_target,
    _process_port,
    _relabel,
)


def _port_name(process: str) -> str:
    """The name of the container port the process serves /metrics on."""
    kind, name = PROCESSES[process]
    (c,) = _k8s(kind, name)["spec"]["template"]["spec"]["containers"]
    (named,) = [p["name"] for p in c["ports"] if p["containerPort"] == _process_port(process)]
    return named


def _operator_reaches(process: str) -> list[str]:
    """The Prometheus Operator monitors in deploy/prometheus that scrape the process's metrics port."""
    kind, name = PROCESSES[process]
    workload = _k8s(kind, name)
    pod_labels = workload["spec"]["template"]["metadata"]["labels"].items()
    namespace = workload["metadata"]["namespace"]
    services = [d for p in K8S_DIR.glob("*.yaml") for d in _load(p) if d.get("kind") == "Service"]
    port_name, reached = _port_name(process), []
    for path in PROM_DIR.glob("*monitor*.yaml"):
        for mon in _load(path):
            spec = mon["spec"]
            if namespace not in spec["namespaceSelector"]["matchNames"]:
                continue
            wanted = spec["selector"]["matchLabels"].items()
            if mon["kind"] == "PodMonitor" and wanted <= pod_labels:
                reached += [mon["metadata"]["name"] for ep in spec["podMetricsEndpoints"] if ep["port"] == port_name]
            elif mon["kind"] == "ServiceMonitor":
                for svc in services:
                    if not (
                        wanted <= svc["metadata"].get("labels", {}).items()
                        and svc["spec"]["selector"].items() <= pod_labels
                    ):
                        continue
                    targets = {p["name"]: p.get("targetPort", p["port"]) for p in svc["spec"]["ports"]}
                    reached += [
                        mon["metadata"]["name"]
                        for ep in spec["endpoints"]
                        if targets.get(ep["port"]) in (port_name, _process_port(process))
                    ]
    return reached


@pytest.mark.parametrize("process", sorted(PROCESSES))
def test_the_scrape_configs_reach_every_process_metrics_port_by_name(process):
    """Operator monitors (selector -> Service -> targetPort, or PodMonitor -> pod port) and pod discovery
    (prometheus-kubernetes.yml's relabelling) both land on the container port the process serves /metrics on,
    each exactly once, with the job the alerts select."""
    assert len(_operator_reaches(process)) == 1, f"{process}: scraped by {_operator_reaches(process)}"
    kind, name = PROCESSES[process]
    workload = _k8s(kind, name)
    (sc,) = _load(SCRAPE_K8S)[0]["scrape_configs"]
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    kept = [p["name"] for p in c["ports"] if _relabel(sc["relabel_configs"], _pod_target(workload, p["name"]))]
    assert kept == [_port_name(process)], f"{process}: pod discovery keeps ports {kept}"
    target = _relabel(sc["relabel_configs"], _pod_target(workload, _port_name(process)))
    assert target is not None and target["job"] == f"tailhound-{process}"
