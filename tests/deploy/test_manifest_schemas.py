"""Every manifest of deploy/ against the Kubernetes API's own schemas (kubernetes-validate, strict: unknown
fields are errors, as `kubectl apply --validate=strict` makes them), without a cluster.

The custom resources (Prometheus Operator monitors and rules, KEDA's ScaledObject) have no schema there: the
parts of them that are Kubernetes types (label selectors, the HPA behaviour) are validated as those types,
and the rest is checked against the fields their CRDs define."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate  # the dev extra
import pytest
import yaml

from .helpers import K8S_DIR, ROOT

#: the oldest Kubernetes the manifests support (persistentVolumeClaimRetentionPolicy in the worker's
#: commented alternative needs 1.27) and the newest kubernetes-validate ships schemas for
VERSIONS = ("1.27.0", kubernetes_validate.utils.latest_version())
PROM_DIR = ROOT / "deploy" / "prometheus"
KEDA_DIR = ROOT / "deploy" / "keda"
#: kustomize's own files: not API objects (tests/deploy/test_kubernetes.py checks what they list)
NOT_API_OBJECTS = {"Kustomization"}
DNS_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

#: the fields the CRDs define (monitoring.coreos.com/v1, keda.sh/v1alpha1) for the parts deploy/ uses
MONITOR_SPEC = {
    "selector",
    "namespaceSelector",
    "endpoints",
    "podMetricsEndpoints",
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
    "sampleLimit",
    "targetLimit",
    "attachMetadata",
}
ENDPOINT = {
    "port",
    "targetPort",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
    "params",
    "tlsConfig",
    "authorization",
    "basicAuth",
    "bearerTokenSecret",
    "followRedirects",
    "enableHttp2",
    "filterRunning",
    "proxyUrl",
}
RELABELING = {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}
RELABEL_ACTIONS = {
    "replace",
    "keep",
    "drop",
    "hashmod",
    "labelmap",
    "labeldrop",
    "labelkeep",
    "lowercase",
    "uppercase",
    "keepequal",
    "dropequal",
}
RULE_GROUP = {"name", "interval", "rules", "limit", "partial_response_strategy"}
RULE = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
SCALEDOBJECT_SPEC = {
    "scaleTargetRef",
    "minReplicaCount",
    "maxReplicaCount",
    "pollingInterval",
    "cooldownPeriod",
    "idleReplicaCount",
    "initialCooldownPeriod",
    "fallback",
    "advanced",
    "triggers",
}
TRIGGER = {"type", "name", "metadata", "metricType", "authenticationRef", "useCachedMetrics"}


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def _manifests(folder: Path) -> list[tuple[str, int, dict]]:
    return [
        (p.name, i, d)
        for p in sorted(folder.glob("*.yaml"))
        for i, d in enumerate(_docs(p))
        if d.get("kind") not in NOT_API_OBJECTS
    ]


def _validate(doc: dict, version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = "/".join(map(str, exc.path)) or "(root)"
        raise AssertionError(f"{doc['kind']} {doc['metadata']['name']}: {where}: {exc.message}") from None


K8S = _manifests(K8S_DIR)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("file", "index", "doc"), K8S, ids=[f"{f}#{i}" for f, i, _ in K8S])
def test_kubernetes_manifests_validate_strictly(file, index, doc, version):
    _validate(doc, version)


def test_every_kubernetes_manifest_has_a_schema():
    """Nothing in deploy/kubernetes is a custom resource: `kubectl apply -k` must work without CRDs."""
    for file, _, doc in K8S:
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)  # SchemaNotFoundError for a CRD
        assert doc["kind"] == "Namespace" or doc["metadata"].get("namespace") == "tailhound", file


def _selector(selector: dict) -> None:
    """A LabelSelector, validated as the one of a NetworkPolicy's podSelector (the same type)."""
    _validate(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "x"},
            "spec": {"podSelector": selector},
        },
        VERSIONS[-1],
    )


def _relabelings(rules: list[dict], where: str) -> None:
    for r in rules:
        assert set(r) <= RELABELING, f"{where}: unknown relabeling fields {sorted(set(r) - RELABELING)}"
        assert r.get("action", "replace") in RELABEL_ACTIONS, where
        if "regex" in r:
            re.compile(r["regex"])


def _metadata(doc: dict, where: str) -> None:
    meta = doc["metadata"]
    assert DNS_1123.fullmatch(meta["name"]) and len(meta["name"]) <= 253, where
    assert DNS_1123.fullmatch(meta["namespace"]), where
    assert set(meta) <= {"name", "namespace", "labels", "annotations"}, where
    assert all(isinstance(v, str) for v in meta.get("labels", {}).values()), f"{where}: label values are strings"


@pytest.mark.parametrize("path", sorted(PROM_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_operator_objects_match_their_crds(path):
    for doc in _docs(path):
        if doc.get("kind") in NOT_API_OBJECTS or "groups" in doc or "rule_files" in doc:
            continue  # kustomization, plain Prometheus rule files and their tests (promtool checks those)
        if "scrape_configs" in doc or "remote_write" in doc:
            continue  # prometheus.yml fragments (promtool check config, tests/deploy/test_observability.py)
        where = f"{path.name}: {doc['kind']} {doc['metadata']['name']}"
        assert doc["apiVersion"] == "monitoring.coreos.com/v1", where
        _metadata(doc, where)
        spec = doc["spec"]
        if doc["kind"] == "PrometheusRule":
            for group in spec["groups"]:
                assert set(group) <= RULE_GROUP, where
                for rule in group["rules"]:
                    assert set(rule) <= RULE and ("alert" in rule) != ("record" in rule), where
            continue
        assert doc["kind"] in {"ServiceMonitor", "PodMonitor"}, where
        assert set(spec) <= MONITOR_SPEC, f"{where}: unknown spec fields {sorted(set(spec) - MONITOR_SPEC)}"
        _selector(spec["selector"])
        assert set(spec["namespaceSelector"]) <= {"any", "matchNames"}, where
        endpoints = spec["endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"]
        assert endpoints, where
        for ep in endpoints:
            assert set(ep) <= ENDPOINT, f"{where}: unknown endpoint fields {sorted(set(ep) - ENDPOINT)}"
            assert isinstance(ep["port"], str), f"{where}: the port goes by name"
            for key in ("interval", "scrapeTimeout"):
                assert re.fullmatch(r"([0-9]+(ms|s|m|h))+", ep.get(key, "30s")), f"{where}: {key}"
            _relabelings(ep.get("relabelings", []), where)


def test_the_scaledobject_matches_its_crd_and_its_hpa_parts_validate():
    (doc,) = _docs(KEDA_DIR / "vllm-scaledobject.yaml")
    where = f"ScaledObject {doc['metadata']['name']}"
    assert doc["apiVersion"] == "keda.sh/v1alpha1" and doc["kind"] == "ScaledObject"
    _metadata(doc, where)
    spec = doc["spec"]
    assert set(spec) <= SCALEDOBJECT_SPEC, f"{where}: unknown spec fields {sorted(set(spec) - SCALEDOBJECT_SPEC)}"
    assert set(spec["advanced"]) <= {
        "horizontalPodAutoscalerConfig",
        "restoreToOriginalReplicaCount",
        "scalingModifiers",
    }, where
    hpa_config = spec["advanced"]["horizontalPodAutoscalerConfig"]
    assert set(hpa_config) <= {"name", "behavior"}, where
    ref = spec["scaleTargetRef"]
    # what KEDA hands the HPA it creates: the same scale target and behaviour, validated as autoscaling/v2
    _validate(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "x"},
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": ref.get("apiVersion", "apps/v1"),
                    "kind": ref["kind"],
                    "name": ref["name"],
                },
                "minReplicas": spec["minReplicaCount"],
                "maxReplicas": spec["maxReplicaCount"],
                "behavior": hpa_config["behavior"],
            },
        },
        VERSIONS[-1],
    )
    for trigger in spec["triggers"]:
        assert set(trigger) <= TRIGGER, where
        assert trigger.get("metricType", "AverageValue") in {"AverageValue", "Value", "Utilization"}, where
        assert all(isinstance(v, str) for v in trigger["metadata"].values()), f"{where}: trigger metadata are strings"
