"""deploy/kubernetes: every manifest parsed and cross-checked (kustomization, CLI, settings, rules, secrets)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from tailhound.notifier.config import parse_config
from tailhound.notifier.receiver_set import build_receivers
from tailhound.settings import load_settings

from .helpers import (
    K8S_DIR,
    NOTIFIER_EXAMPLE,
    RECEIVER_SECRET_ENV,
    ROOT,
    RULES_DIR,
    SECRET_ENV,
    SECRETISH,
    check_cli_args,
    check_settings_env_name,
    cli_command_names,
    notifier_secret_refs,
    quantity,
)

KUSTOMIZATION = K8S_DIR / "kustomization.yaml"
SECRET_EXAMPLE = K8S_DIR / "secret.example.yaml"
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "RuntimeClass",
    "PriorityClass",
    "CustomResourceDefinition",
    "StorageClass",
    "PersistentVolume",
}
WORKLOAD_KINDS = {"Deployment", "DaemonSet", "StatefulSet", "Job"}


def _load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


MANIFEST_FILES = sorted(p for p in K8S_DIR.glob("*.y*ml") if p != KUSTOMIZATION)
DOCS = [(p.name, d) for p in MANIFEST_FILES for d in _load(p)]


@pytest.fixture(scope="module")
def kustomization() -> dict:
    return _load(KUSTOMIZATION)[0]


@pytest.fixture(scope="module")
def applied(kustomization) -> list[dict]:
    """The documents `kubectl apply -k` creates (the secret example is not among them)."""
    return [d for f in kustomization["resources"] for d in _load(K8S_DIR / f)]


def by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def workloads(docs):
    return [d for d in docs if d["kind"] in WORKLOAD_KINDS]


def containers(workload: dict) -> list[dict]:
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def one(docs, kind, name):
    found = by_kind(docs, kind)
    assert name in found, f"no {kind} {name} (have {sorted(found)})"
    return found[name]


# --- every document ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("file", "doc"), DOCS, ids=[f"{f}:{d.get('kind')}" for f, d in DOCS])
def test_document_shape(file, doc):
    assert doc.get("apiVersion"), f"{file}: no apiVersion"
    assert doc.get("kind"), f"{file}: no kind"
    assert doc.get("metadata", {}).get("name"), f"{file}: no metadata.name"
    if doc["kind"] not in CLUSTER_SCOPED:
        assert doc["metadata"].get("namespace") == "tailhound", f"{file}: {doc['kind']} not in namespace tailhound"
    else:
        assert "namespace" not in doc["metadata"]


def test_kustomization_lists_every_manifest_but_the_secret_example(kustomization):
    assert kustomization["kind"] == "Kustomization"
    assert kustomization.get("namespace") == "tailhound"
    resources = kustomization["resources"]
    assert len(resources) == len(set(resources)), "duplicate resources"
    for r in resources:
        assert (K8S_DIR / r).is_file(), f"kustomization lists missing file {r}"
    expected = {p.name for p in MANIFEST_FILES} - {SECRET_EXAMPLE.name}
    assert set(resources) == expected, f"unlisted: {expected - set(resources)}; extra: {set(resources) - expected}"
    assert SECRET_EXAMPLE.name not in resources, "the example Secret (placeholders) must not be applied"


def test_unique_names_per_kind(applied):
    seen = set()
    for d in applied:
        key = (d["kind"], d["metadata"]["name"])
        assert key not in seen, f"duplicate {key}"
        seen.add(key)


def test_images_are_retargeted_by_kustomize(kustomization, applied):
    names = {i["name"] for i in kustomization.get("images", [])}
    for w in workloads(applied):
        for c in containers(w):
            assert c["image"].split(":")[0] in names, f"{c['image']} is not covered by kustomization images"


# --- workloads ---------------------------------------------------------------------------------------
def test_expected_objects_exist(applied):
    assert by_kind(applied, "Namespace").keys() == {"tailhound"}
    one(applied, "StatefulSet", "tailhound-worker")
    one(applied, "DaemonSet", "tailhound-agent")
    one(applied, "ConfigMap", "tailhound-rules")
    one(applied, "ConfigMap", "tailhound-settings")
    one(applied, "ConfigMap", "tailhound-agent-config")


def test_selectors_match_template_labels(applied):
    for w in workloads(applied):
        selector = w["spec"]["selector"]["matchLabels"]
        labels = w["spec"]["template"]["metadata"]["labels"]
        assert selector and selector.items() <= labels.items(), f"{w['metadata']['name']}: selector/labels mismatch"
    other = [(n, w["spec"]["selector"]["matchLabels"]) for w in workloads(applied) for n in [w["metadata"]["name"]]]
    for i, (n1, s1) in enumerate(other):
        for n2, s2 in other[i + 1 :]:
            assert s1 != s2, f"{n1} and {n2} select the same pods"
    for pdb in by_kind(applied, "PodDisruptionBudget").values():
        sel = pdb["spec"]["selector"]["matchLabels"]
        assert any(sel.items() <= w["spec"]["template"]["metadata"]["labels"].items() for w in workloads(applied)), (
            f"PDB {pdb['metadata']['name']} selects no workload"
        )


def test_volume_mounts_reference_declared_volumes(applied):
    configmaps = by_kind(applied, "ConfigMap")
    for w in workloads(applied):
        spec = w["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for c in containers(w):
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, f"{w['metadata']['name']}/{c['name']}: undeclared volume {m['name']}"
        for v in volumes.values():
            if "configMap" in v:
                assert v["configMap"]["name"] in configmaps, f"volume {v['name']}: unknown ConfigMap"
            assert "hostPath" not in v, "no hostPath volumes"


def test_config_and_service_account_references_exist(applied):
    configmaps = by_kind(applied, "ConfigMap")
    accounts = by_kind(applied, "ServiceAccount")
    for w in workloads(applied):
        spec = w["spec"]["template"]["spec"]
        if "serviceAccountName" in spec:
            assert spec["serviceAccountName"] in accounts
        for c in containers(w):
            for ef in c.get("envFrom", []):
                if "configMapRef" in ef:
                    assert ef["configMapRef"]["name"] in configmaps
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
                if ref:
                    assert ref["key"] in configmaps[ref["name"]]["data"], f"{e['name']}: no key {ref['key']}"


def test_workloads_are_unprivileged(applied):
    for w in workloads(applied):
        spec = w["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
        for c in containers(w):
            sc = c["securityContext"]
            assert sc.get("privileged", False) is False
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["readOnlyRootFilesystem"] is True
            assert "ALL" in sc["capabilities"]["drop"]


def test_requests_do_not_exceed_limits(applied):
    for w in workloads(applied):
        for c in containers(w):
            res = c["resources"]
            for kind in ("cpu", "memory"):
                req, lim = quantity(res["requests"][kind]), quantity(res["limits"][kind])
                assert 0 < req <= lim, f"{w['metadata']['name']}/{c['name']}: {kind} request {req} > limit {lim}"


def test_worker_statefulset(applied):
    sts = one(applied, "StatefulSet", "tailhound-worker")
    assert sts["spec"]["replicas"] == 2
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    args = list(c.get("command", [])[1:] if c.get("command") else []) + list(c.get("args", []))
    assert args[0] == "worker"
    assert args[0] in cli_command_names()
    check_cli_args(args)
    # scaling starts and stops workers together; a rollout replaces one pod at a time, under its own name
    assert sts["spec"]["podManagementPolicy"] == "Parallel"
    assert sts["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert "strategy" not in sts["spec"], "a Deployment's field: a StatefulSet has updateStrategy"
    assert not by_kind(applied, "Deployment").get("tailhound-worker"), "the worker is a StatefulSet now"
    # drains: at least one worker stays up, and a drain can still evict one
    pdb = one(applied, "PodDisruptionBudget", "tailhound-worker")
    assert pdb["spec"]["selector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    if "maxUnavailable" in pdb["spec"]:
        assert 1 <= pdb["spec"]["maxUnavailable"] < sts["spec"]["replicas"]
    else:
        assert 1 <= pdb["spec"]["minAvailable"] < sts["spec"]["replicas"]


def _ports(c: dict) -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}


def _probe_port(c: dict, probe: dict) -> int:
    port = probe["httpGet"]["port"]
    return _ports(c)[port] if isinstance(port, str) else port


def test_worker_serves_its_endpoint_on_the_named_port_and_is_probed_there(applied):
    """TAILHOUND_STREAMS__WEB_LISTEN binds the pod's interfaces on the port named `metrics`; liveness (and
    startup) on /-/healthy, readiness on /-/ready (tailhound/worker/web.py), all through that name."""
    from tailhound.worker import web as worker_web

    sts = one(applied, "StatefulSet", "tailhound-worker")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    env = _container_env(applied, c)
    assert "TAILHOUND_STREAMS__WEB_LISTEN" in {e["name"] for e in c["env"]}, "the worker env must name the listen"
    check_settings_env_name("TAILHOUND_STREAMS__WEB_LISTEN")
    host, _, port = env["TAILHOUND_STREAMS__WEB_LISTEN"].rpartition(":")
    assert host in ("0.0.0.0", "[::]", ""), f"{host}: the kubelet and Prometheus cannot reach a loopback listen"
    assert _ports(c).get("metrics") == int(port) == 9096
    assert {p["protocol"] for p in c["ports"]} == {"TCP"}
    paths = {"livenessProbe": "/-/healthy", "startupProbe": "/-/healthy", "readinessProbe": "/-/ready"}
    app_paths = {
        r.resource.canonical
        for r in worker_web.make_app(None, None, None, lambda: (True, "")).router.routes()
        if r.method == "GET"
    }  # type: ignore[arg-type]
    for kind, path in paths.items():
        probe = c[kind]
        assert probe["httpGet"]["path"] == path and path in app_paths and path in worker_web.OPEN_PATHS
        assert probe["httpGet"]["port"] == "metrics" and _probe_port(c, probe) == int(port)
        assert probe["timeoutSeconds"] < probe["periodSeconds"]
    # the endpoint comes up only after the first table recovery (Faust starts app tasks then): the startup
    # probe must allow minutes for it, or a pod with a large changelog would be killed before it serves
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 300
    annotations = sts["spec"]["template"]["metadata"].get("annotations", {})
    assert annotations.get("prometheus.io/port") == port and annotations.get("prometheus.io/path") == "/metrics"


def test_worker_service_exposes_the_metrics_port_of_every_worker(applied):
    svc = one(applied, "Service", "tailhound-worker")
    sts = one(applied, "StatefulSet", "tailhound-worker")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    (port,) = svc["spec"]["ports"]
    assert port["name"] == "metrics" and port["targetPort"] == "metrics" and port["port"] == _ports(c)["metrics"]
    assert svc["spec"].get("clusterIP") == "None", "headless: Prometheus scrapes each worker, nothing balances"
    assert svc["spec"].get("publishNotReadyAddresses") is True, "a recovering (not ready) worker must be scraped"
    labels = svc["metadata"]["labels"]
    assert labels.get("app.kubernetes.io/component") == "worker"  # what the ServiceMonitor selects


def test_worker_statefulset_is_governed_by_a_headless_service(applied):
    """`serviceName` names a headless Service of this namespace that selects the worker pods (it gives each pod
    its stable DNS name); it is not the Service that Prometheus scrapes through, which stays as it was."""
    sts = one(applied, "StatefulSet", "tailhound-worker")
    name = sts["spec"].get("serviceName")
    assert name, "a StatefulSet needs serviceName"
    svc = one(applied, "Service", name)
    assert svc["metadata"]["namespace"] == sts["metadata"]["namespace"]
    assert svc["spec"].get("clusterIP") == "None", f"{name} must be headless"
    assert svc["spec"].get("publishNotReadyAddresses") is True, "a recovering worker's name must resolve too"
    assert svc["spec"]["selector"] == sts["spec"]["selector"]["matchLabels"]
    assert svc["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
    assert name != "tailhound-worker", "keep the metrics Service (the ServiceMonitor's) apart from the governing one"
    one(applied, "Service", "tailhound-worker")


def _worker_env_entries(applied) -> tuple[dict, dict[str, dict]]:
    sts = one(applied, "StatefulSet", "tailhound-worker")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    return c, {e["name"]: e for e in c.get("env", [])}


def test_worker_instance_id_is_the_pod_name(applied):
    """Static membership: each worker's group.instance.id is its pod name, from the downward API (stable across
    restarts for a StatefulSet, and unique per pod), never a literal or a ConfigMap value shared by every pod."""
    c, env = _worker_env_entries(applied)
    name = "TAILHOUND_STREAMS__INSTANCE_ID"
    check_settings_env_name(name)
    assert name in env, "the worker sets no static-membership id"
    assert "value" not in env[name], "one literal id for every replica: the broker would fence all but one"
    assert env[name]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert name not in _container_env(applied, c), "the id must not come from a ConfigMap (one value for all pods)"


def test_the_instance_ids_the_pods_get_validate(applied, monkeypatch):
    """The names a StatefulSet gives its pods (<name>-<ordinal>) are valid streams.instance_id values, with the
    rest of the worker's settings, and distinct."""
    from tailhound.streams_settings import StreamsSettings

    sts = one(applied, "StatefulSet", "tailhound-worker")
    c, _ = _worker_env_entries(applied)
    ids = []
    for ordinal in range(sts["spec"]["replicas"] + 1):  # one more: a scale-out must validate too
        pod = f"{sts['metadata']['name']}-{ordinal}"
        assert len(pod) <= 63, f"{pod}: a pod's host name is one DNS label"
        assert StreamsSettings(instance_id=pod).instance_id == pod
        for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
            monkeypatch.delenv(key)
        for k, v in _container_env(applied, c).items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("TAILHOUND_STREAMS__INSTANCE_ID", pod)
        ids.append(load_settings().streams.instance_id)
    assert ids[0] == "tailhound-worker-0"
    assert len(set(ids)) == len(ids)


def test_worker_keeps_standby_replicas_and_a_session_timeout_for_static_members(applied, monkeypatch):
    """At least one standby copy of every table partition (a failover resumes from it), which needs another
    worker to hold it; no more workers than telemetry partitions (the rest would sit idle); and a session
    timeout long enough for a restarted pod to rejoin as the member it was."""
    sts = one(applied, "StatefulSet", "tailhound-worker")
    c, _ = _worker_env_entries(applied)
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for k, v in _container_env(applied, c).items():
        monkeypatch.setenv(k, v)
    settings = load_settings()
    replicas = sts["spec"]["replicas"]
    assert settings.streams.standby_replicas >= 1
    assert replicas >= settings.streams.standby_replicas + 1, "a standby lives on another worker"
    assert replicas <= settings.partitions, "replicas beyond TAILHOUND_PARTITIONS would process nothing"
    # a pod's stop, reschedule and start takes well over the 10 s default; a lost worker's partitions wait this long
    assert 20 <= settings.streams.session_timeout_s <= 120
    assert settings.streams.heartbeat_interval_s * 3 <= settings.streams.session_timeout_s


def _commented_alternative(path: Path) -> dict:
    """The commented-out block at the end of a manifest, uncommented and parsed."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = next(
        i
        for i, ln in enumerate(lines)
        if re.match(
            r"\s*# (persistentVolumeClaimRetentionPolicy|"
            r"volumeClaimTemplates):",
            ln,
        )
    )
    indent = len(lines[start]) - len(lines[start].lstrip())
    rest = [ln for ln in lines[start:] if ln.strip()]
    assert all(ln[: indent + 2] == " " * indent + "# " for ln in rest), "the block must end the file, commented"
    return yaml.safe_load("\n".join(ln[indent + 2 :] for ln in rest))


def test_worker_data_dir_volume_claim_alternative_for_rocksdb(applied):
    """The documented alternative to the emptyDir (streams.store rocksdb): a volumeClaimTemplate that, once
    uncommented, replaces the `data` volume at the same mount, one ReadWriteOnce volume per worker."""
    from tailhound.streams_settings import StreamsSettings

    sts = one(applied, "StatefulSet", "tailhound-worker")
    assert "volumeClaimTemplates" not in sts["spec"], "the default keeps the tables in memory, the data dir an emptyDir"
    alt = _commented_alternative(K8S_DIR / "worker-statefulset.yaml")
    (claim,) = alt["volumeClaimTemplates"]
    spec = sts["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    data_dir = PurePosixPath(_container_env(applied, c)["TAILHOUND_STREAMS__DATA_DIR"])
    mount = next(m for m in c["volumeMounts"] if PurePosixPath(m["mountPath"]) in (data_dir, *data_dir.parents))
    assert claim["metadata"]["name"] == mount["name"], "the claim must take the data dir's volume's place"
    assert "emptyDir" in {v["name"]: v for v in spec["volumes"]}[mount["name"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert quantity(claim["spec"]["resources"]["requests"]["storage"]) >= quantity("1Gi")
    policy = alt["persistentVolumeClaimRetentionPolicy"]
    assert set(policy.values()) <= {"Retain", "Delete"} and set(policy) == {"whenDeleted", "whenScaled"}
    assert StreamsSettings(store="rocksdb").store == "rocksdb"


def test_agent_metrics_port_is_exposed_and_probed(applied):
    ds = one(applied, "DaemonSet", "tailhound-agent")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    assert _ports(c) == {"metrics": 9464}
    assert c["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}
    annotations = ds["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == "9464" and annotations["prometheus.io/scrape"] == "true"


def _container_env(applied, c) -> dict[str, str]:
    """Literal env of a container: envFrom ConfigMaps, then env values / configMapKeyRefs."""
    configmaps = by_kind(applied, "ConfigMap")
    env: dict[str, str] = {}
    for ef in c.get("envFrom", []):
        if "configMapRef" in ef:
            env.update({k: str(v) for k, v in configmaps[ef["configMapRef"]["name"]]["data"].items()})
    for e in c.get("env", []):
        ref = (e.get("valueFrom") or {}).get("configMapKeyRef")
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif ref:
            env[e["name"]] = str(configmaps[ref["name"]]["data"][ref["key"]])
    return env


def test_worker_mounts_rules_and_writable_data_dir(applied):
    sts = one(applied, "StatefulSet", "tailhound-worker")
    spec = sts["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    env = _container_env(applied, c)
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    rules_mount = mounts[env["TAILHOUND_RULES_DIR"]]
    assert volumes[rules_mount["name"]]["configMap"]["name"] == "tailhound-rules"
    assert rules_mount.get("readOnly") is True
    data_dir = PurePosixPath(env["TAILHOUND_STREAMS__DATA_DIR"])
    writable = [m for p, m in mounts.items() if data_dir == PurePosixPath(p) or PurePosixPath(p) in data_dir.parents]
    assert writable, "the streams data dir is not on a volume (the root filesystem is read-only)"
    assert "emptyDir" in volumes[writable[0]["name"]] and not writable[0].get("readOnly")


def test_settings_env_names_are_real_and_values_validate(applied, monkeypatch):
    names = set()
    for cm in by_kind(applied, "ConfigMap").values():
        if cm["metadata"]["name"] == "tailhound-settings":
            names |= set(cm["data"])
    for w in workloads(applied):
        for c in containers(w):
            for e in c.get("env", []):
                if (e.get("valueFrom") or {}).get("secretKeyRef"):
                    continue
                names.add(e["name"])
    for name in names:
        if name.startswith("TAILHOUND_"):
            assert name not in SECRET_ENV, f"{name} must come from a secretKeyRef"
            check_settings_env_name(name)
    for w in workloads(applied):
        for c in containers(w):
            for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
                monkeypatch.delenv(key)
            for k, v in _container_env(applied, c).items():
                if k.startswith("TAILHOUND_"):
                    monkeypatch.setenv(k, v)
            settings = load_settings()
            assert settings.broker, f"{w['metadata']['name']}: TAILHOUND_BROKER not set"


def test_rules_configmap_equals_rules_dir(applied):
    cm = one(applied, "ConfigMap", "tailhound-rules")
    files = sorted(p for p in RULES_DIR.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    assert files
    expected = {p.name: p.read_bytes().decode("utf-8") for p in files}
    assert set(cm["data"]) == set(expected), "rule files differ: run `python deploy/sync_rules.py`"
    for name, text in expected.items():
        assert cm["data"][name] == text, f"{name} drifted from rules/: run `python deploy/sync_rules.py`"
    assert "binaryData" not in cm


def test_sync_rules_script_is_up_to_date():
    r = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "sync_rules.py"), "--check"], capture_output=True, text=True, timeout=30
    )
    assert r.returncode == 0, r.stderr


# --- secrets -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def secret_example() -> dict:
    (doc,) = _load(SECRET_EXAMPLE)
    assert doc["kind"] == "Secret"
    return doc


def test_secrets_only_via_optional_secret_key_refs(applied, secret_example):
    keys = set(secret_example.get("stringData", {})) | set(secret_example.get("data", {}))
    seen = set()
    for w in workloads(applied):
        for c in containers(w):
            for ef in c.get("envFrom", []):
                if "secretRef" in ef:
                    assert ef["secretRef"]["name"] == secret_example["metadata"]["name"]
                    assert ef["secretRef"].get("optional") is True
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if e["name"] in SECRET_ENV or SECRETISH.search(e["name"]):
                    assert ref, f"{e['name']} must come from a secretKeyRef"
                    assert "value" not in e
                if ref:
                    assert ref["name"] == secret_example["metadata"]["name"]
                    assert ref["key"] in keys, f"{e['name']}: key {ref['key']} not in the example Secret"
                    assert ref.get("optional") is True, f"{e['name']}: mark the secretKeyRef optional"
                    seen.add(e["name"])
    assert seen >= SECRET_ENV, f"worker lacks {SECRET_ENV - seen}"


def test_no_secret_values_in_configmaps_or_literal_env(applied, secret_example):
    values = [str(v) for v in (secret_example.get("stringData") or {}).values()]
    assert values
    for cm in by_kind(applied, "ConfigMap").values():
        for k, v in (cm.get("data") or {}).items():
            assert not SECRETISH.search(k) or cm["metadata"]["name"] == "tailhound-rules", f"{k} in a ConfigMap"
            assert not any(s in str(v) for s in values), f"a secret value is in ConfigMap {cm['metadata']['name']}"
    for w in workloads(applied):
        for c in containers(w):
            for e in c.get("env", []):
                assert not any(s in str(e.get("value", "")) for s in values)
    # ... nor anywhere else in the applied manifests or the compose file.
    texts = [(K8S_DIR / f).read_text(encoding="utf-8") for f in _load(KUSTOMIZATION)[0]["resources"]]
    texts.append((ROOT / "docker-compose.yml").read_text(encoding="utf-8"))
    for s in values:
        assert not any(s in t for t in texts), f"secret placeholder {s!r} leaked outside secret.example.yaml"


def test_secret_example_holds_placeholders_only(secret_example):
    for k, v in (secret_example.get("stringData") or {}).items():
        assert "REPLACE-ME" in str(v), f"{k}: the example must hold a placeholder, not a real value"
    assert "data" not in secret_example, "use stringData placeholders, not base64 data"


# --- notifier ----------------------------------------------------------------------------------------
def _notifier_mount(applied) -> tuple[dict, PurePosixPath, dict]:
    """(the worker container, the config path it reads, the ConfigMap mounted there)."""
    sts = one(applied, "StatefulSet", "tailhound-worker")
    spec = sts["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    env = _container_env(applied, c)
    assert "TAILHOUND_NOTIFIER__CONFIG" in env, "the worker does not say where its notifier config is"
    path = PurePosixPath(env["TAILHOUND_NOTIFIER__CONFIG"])
    mount = next((m for m in c["volumeMounts"] if PurePosixPath(m["mountPath"]) == path.parent), None)
    assert mount, f"nothing is mounted at {path.parent}"
    assert mount.get("readOnly") is True
    volume = {v["name"]: v for v in spec["volumes"]}[mount["name"]]
    cm = one(applied, "ConfigMap", volume["configMap"]["name"])
    assert path.name in cm["data"], f"ConfigMap {cm['metadata']['name']} has no key {path.name}"
    return c, path, cm


def test_notifier_config_is_mounted_where_the_setting_points(applied):
    c, path, cm = _notifier_mount(applied)
    assert cm["metadata"]["name"] == "tailhound-notifier"
    assert path == PurePosixPath("/etc/tailhound/notifier/notifier.yaml")


def test_notifier_configmap_is_the_production_example_and_loads(applied):
    _, path, cm = _notifier_mount(applied)
    text = cm["data"][path.name]
    assert text == NOTIFIER_EXAMPLE.read_text(encoding="utf-8"), (
        "notifier-configmap.yaml drifted from tailhound/examples/notifier-production.yaml: "
        "paste the file into the ConfigMap"
    )
    cfg = parse_config(text, origin=f"notifier-configmap.yaml:{path.name}")
    assert {r.type for r in cfg.receivers} >= {"slack", "pagerduty", "webhook"}


def test_every_notifier_secret_comes_from_the_secret(applied, secret_example):
    c, path, cm = _notifier_mount(applied)
    refs = notifier_secret_refs(parse_config(cm["data"][path.name]))
    assert refs, "the production example should use secrets"
    keys = set(secret_example.get("stringData", {}))
    env = {e["name"]: e for e in c.get("env", [])}
    for where, ref in refs.items():
        assert ref.env is not None, f"{where} reads a file; the worker mounts no secret files"
        assert ref.env in env, f"{where} needs {ref.env}, which the worker does not get"
        key_ref = (env[ref.env].get("valueFrom") or {}).get("secretKeyRef")
        assert key_ref, f"{ref.env} must come from the Secret"
        assert key_ref["name"] == secret_example["metadata"]["name"] and key_ref["key"] in keys


async def test_the_worker_can_build_every_receiver(applied, monkeypatch):
    """What the worker does at start: settings from the manifests, secrets from the Secret (dummies
    here), every receiver built: a webhook host off the allow-list or a missing secret would fail."""
    c, path, cm = _notifier_mount(applied)
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for k, v in _container_env(applied, c).items():
        monkeypatch.setenv(k, v)
    for e in c.get("env", []):
        if (e.get("valueFrom") or {}).get("secretKeyRef"):
            monkeypatch.setenv(e["name"], f"dummy-{e['name'].lower()}")
    settings = load_settings()
    assert settings.notifier.enabled and str(settings.notifier.config) == str(path)
    cfg = parse_config(cm["data"][path.name])
    receivers = build_receivers(settings, cfg)
    try:
        assert set(receivers) == {r.name for r in cfg.receivers}
    finally:
        for r in receivers.values():
            await r.close()


async def test_without_the_secret_the_worker_starts_with_receivers_disabled(applied, monkeypatch, caplog):
    """The first `kubectl apply -k`, before the Secret exists: every secretKeyRef is optional, so the env
    variables are simply unset; the worker must not crash-loop. Each receiver that needs a secret is
    disabled with a warning naming it and the variable, exported as tailhound_notifier_receiver_disabled,
    and its routes go to the top-level receiver, or the console when that one is disabled too."""
    from prometheus_client import CollectorRegistry

    from tailhound.notifier.service import NotifierService
    from tailhound.notifier.stages.route import receivers_for

    c, path, cm = _notifier_mount(applied)
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for k, v in _container_env(applied, c).items():
        monkeypatch.setenv(k, v)
    secret_envs = [e["name"] for e in c["env"] if (e.get("valueFrom") or {}).get("secretKeyRef")]
    for name in secret_envs:
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    cfg = parse_config(cm["data"][path.name])
    caplog.set_level("WARNING", logger="tailhound.notifier.receiver_set")
    receivers = build_receivers(settings, cfg)
    registry = CollectorRegistry()
    service = NotifierService(settings, cfg, receivers, registry=registry)
    try:
        needing = {where.split(".")[0]: ref.env for where, ref in notifier_secret_refs(cfg).items()}
        assert set(receivers.disabled) == set(needing) == {"slack", "pagerduty", "remediate"}
        assert receivers.fallback == "console" and set(receivers) == {"console"}
        for name, env in needing.items():
            assert env in receivers.disabled[name]
            assert any(
                name in r.getMessage() and env in r.getMessage() and "DISABLED" in r.getMessage()
                for r in caplog.records
            ), f"no warning names receiver {name!r} and {env}"
            assert registry.get_sample_value("tailhound_notifier_receiver_disabled", {"receiver": name}) == 1.0
        assert registry.get_sample_value("tailhound_notifier_receiver_disabled", {"receiver": "console"}) == 0.0
        for labels in (
            {"severity": "critical", "transient": "false", "root_cause": "gpu-thermal-throttle"},
            {"severity": "warning", "transient": "false", "root_cause": "capacity"},
        ):
            assert set(receivers_for(service.config.route, labels)) == {"console"}
    finally:
        await service._producer.stop()
        for r in receivers.values():
            await r.close()


async def test_a_route_to_a_disabled_receiver_falls_back_to_the_top_level_one(applied, monkeypatch):
    """Only PagerDuty's key is missing: critical incidents still reach Slack (the top-level receiver)."""
    from tailhound.notifier.service import NotifierService
    from tailhound.notifier.stages.route import receivers_for

    c, path, cm = _notifier_mount(applied)
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    for k, v in _container_env(applied, c).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("TAILHOUND_SLACK_BOT_TOKEN", "xoxb-dummy")
    monkeypatch.setenv("TAILHOUND_WEBHOOK_SECRET", "dummy")
    monkeypatch.delenv("TAILHOUND_PAGERDUTY_ROUTING_KEY", raising=False)
    cfg = parse_config(cm["data"][path.name])
    receivers = build_receivers(load_settings(), cfg)
    service = NotifierService(load_settings(), cfg, receivers)
    try:
        assert set(receivers.disabled) == {"pagerduty"} and receivers.fallback == cfg.route.receiver == "slack"
        critical = {"severity": "critical", "transient": "false", "root_cause": "gpu-thermal-throttle"}
        assert receivers_for(cfg.route, critical) == ["pagerduty", "slack"]
        assert set(receivers_for(service.config.route, critical)) == {"slack"}
        capacity = {"severity": "warning", "transient": "false", "root_cause": "capacity"}
        assert set(receivers_for(service.config.route, capacity)) == {"remediate", "slack"}
        assert (
            service.registry.get_sample_value("tailhound_notifier_receiver_disabled", {"receiver": "pagerduty"}) == 1.0
        )
    finally:
        await service._producer.stop()
        for r in receivers.values():
            await r.close()


def test_notifier_check_secrets_stays_strict_about_a_missing_secret(applied, tmp_path):
    """`tailhound notifier check --secrets` reports what the worker only warns about: exit 1, each missing
    secret named at its receiver."""
    from typer.testing import CliRunner

    from tailhound.cli import app

    _, path, cm = _notifier_mount(applied)
    f = tmp_path / path.name
    f.write_text(cm["data"][path.name], encoding="utf-8")
    env = {k: "" for k in RECEIVER_SECRET_ENV} | {
        "TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS": one(applied, "ConfigMap", "tailhound-settings")["data"][
            "TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS"
        ]
    }
    result = CliRunner().invoke(app, ["notifier", "check", str(f), "--secrets"], env=env)
    assert result.exit_code == 1, result.output
    for name in RECEIVER_SECRET_ENV:
        assert f"secret env {name} is not set" in result.output


# --- node agent ---------------------------------------------------------------------------------------
def test_agent_daemonset(applied):
    ds = one(applied, "DaemonSet", "tailhound-agent")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert any(t.get("key") == "nvidia.com/gpu" and t.get("effect") == "NoSchedule" for t in spec["tolerations"])
    assert spec.get("hostNetwork", False) is False
    assert spec["runtimeClassName"] == "nvidia"
    (c,) = spec["containers"]
    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert {p["name"]: p["containerPort"] for p in c["ports"]}.get("metrics") == 9464
    assert c["securityContext"].get("privileged", False) is False
    res = c["resources"]
    assert quantity(res["requests"]["cpu"]) == quantity("50m") and quantity(res["limits"]["cpu"]) == quantity("200m")
    # the memory limit is sized in tests/deploy/test_agent_memory.py
    assert quantity(res["requests"]["memory"]) <= quantity(res["limits"]["memory"])
    assert "TAILHOUND_BROKER" in _container_env(applied, c)


@pytest.fixture
def node_env(monkeypatch):
    """What the DaemonSet's downward API gives the agent."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.setenv("NODE_IP", "10.0.0.11")


def test_agent_config_is_mounted_where_the_command_reads_it_and_validates(applied, node_env):
    """The ConfigMap's agent.yaml is valid AgentConfig once NODE_NAME / NODE_IP are substituted."""
    from tailhound.agents.config import parse_agent_config
    from tailhound.agents.runtime import build_collectors

    ds = one(applied, "DaemonSet", "tailhound-agent")
    spec = ds["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    args = c["args"]
    assert args[0] == "agent"
    config = PurePosixPath(args[args.index("--config") + 1])
    volumes = {v["name"]: v for v in spec["volumes"]}
    mount = next(m for m in c["volumeMounts"] if PurePosixPath(m["mountPath"]) == config.parent)
    cm = one(applied, "ConfigMap", volumes[mount["name"]]["configMap"]["name"])
    cfg = parse_agent_config(cm["data"][config.name], origin=f"agent-configmap.yaml:{config.name}")
    assert cfg.node == "gpu-node-1" and cfg.listen == "0.0.0.0:9464"
    assert cfg.scrape and all(t.url.startswith("http://10.0.0.11:") for t in cfg.scrape)
    assert cfg.nvml is not None and cfg.nvml.enabled and cfg.procnet is not None and cfg.tcp_connect is not None
    jobs = [c.job for c in build_collectors(cfg)]
    assert set(jobs) >= {"vllm", "nvml", "node", "netprobe"}
    # one GPU source and one TCP-counter source: dcgm-exporter OR nvml, node_exporter OR procnet (docs/agent.md)
    assert "dcgm" not in jobs and not any(t.job == "node" for t in cfg.scrape), jobs
    spill = cfg.publish.buffer.spill_file  # the root filesystem is read-only: it must be on a writable emptyDir
    on = [m for m in c["volumeMounts"] if spill and PurePosixPath(m["mountPath"]) in PurePosixPath(str(spill)).parents]
    assert spill is None or on, f"{spill} is not on a volume"
    assert all(not m.get("readOnly") and "emptyDir" in volumes[m["name"]] for m in on)


def test_agent_command_is_a_real_cli_command(applied):
    (c,) = one(applied, "DaemonSet", "tailhound-agent")["spec"]["template"]["spec"]["containers"]
    assert c["args"][:3] == ["agent", "--config", "/etc/tailhound/agent/agent.yaml"] and "command" not in c
    assert c["args"][0] in cli_command_names()
    check_cli_args(c["args"])


def test_agent_configmap_variables_are_set_by_the_daemonset(applied):
    text = one(applied, "ConfigMap", "tailhound-agent-config")["data"]["agent.yaml"]
    referenced = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-[^}]*)?\}", text))
    assert referenced >= {"NODE_NAME", "NODE_IP"}
    (c,) = one(applied, "DaemonSet", "tailhound-agent")["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in c["env"]}
    assert referenced <= env, f"agent.yaml references {sorted(referenced - env)}, which the DaemonSet does not set"
