"""deploy/grafana and deploy/prometheus: tailhound watched like a Prometheus component (issue 15).

Every PromQL expression of the dashboard and the self-alerts names only metrics the code defines (read
from the real collectors, not from a list kept here) and passes `promtool check rules`; the alerts pass
their `promtool test rules` unit tests; the scrape configs, the ServiceMonitor and the PodMonitor point
at ports and labels the Kubernetes manifests really have; docs/operations.md describes every metric and
every alert."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.conftest import require_tool

from .helpers import K8S_DIR, ROOT

GRAFANA_DIR = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA_DIR / "tailhound-dashboard.json"
PROM_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROM_DIR / "tailhound-alerts.yaml"
ALERT_TESTS = PROM_DIR / "tailhound-alerts.test.yaml"
SCRAPE_STATIC = PROM_DIR / "prometheus.yml"
SCRAPE_K8S = PROM_DIR / "prometheus-kubernetes.yml"
OPERATIONS = ROOT / "docs" / "operations.md"

WORKER_JOB, AGENT_JOB, INGEST_JOB = "tailhound-worker", "tailhound-agent", "tailhound-ingest"
JOBS = {WORKER_JOB, AGENT_JOB, INGEST_JOB}
#: metric prefix -> the only job that exposes it
JOB_OF_PREFIX = {"tailhound_agent_": AGENT_JOB, "tailhound_ingest_": INGEST_JOB}
#: series Prometheus writes itself for every target
SYNTHETIC = {
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
}
#: what the alerts must cover (issue 15)
REQUIRED_ALERTS = {
    "TailhoundWorkerNotReady",
    "TailhoundConsumerLagGrowing",
    "TailhoundRuleReloadFailed",
    "TailhoundDeadLetterFailures",
    "TailhoundNotificationsDeadLettered",
    "TailhoundAgentBrokerDown",
}


def _load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


# --- the metrics the code defines ----------------------------------------------------------------------
RULE = """groups:
  - name: t
    rules:
      - name: hot
        scope: gpu
        when: {signal: gpu.temperature, above: 85}
        severity: critical
        root_cause: gpu-thermal-throttle
"""


def _registries(tmp: Path) -> list[CollectorRegistry]:
    """Every registry tailhound serves, built from the real classes: the worker's (pipeline, intake,
    coverage, reloads, consumer lag and readiness, the notifier inside it) and the agent's."""
    from tailhound.agents.metrics import AgentMetrics
    from tailhound.notifier.config import parse_config
    from tailhound.notifier.receiver_set import build_receivers
    from tailhound.notifier.service import NotifierService
    from tailhound.settings import Settings
    from tailhound.streams.coverage_watch import CoverageWatch
    from tailhound.streams.intake_stats import IntakeStats, StatsCollector
    from tailhound.streams.pipeline_metrics import PipelineMetrics
    from tailhound.streams.reload import RuleReloader
    from tailhound.streams.ruleset.rulefile import load_rules
    from tailhound.worker.metrics import ConsumerLagCollector

    (tmp / "t.yaml").write_text(RULE, encoding="utf-8")
    rules = load_rules(tmp)
    worker = CollectorRegistry()
    PipelineMetrics(worker)
    worker.register(StatsCollector(IntakeStats()))
    CoverageWatch(rules, registry=worker)
    RuleReloader(tmp, rules, lambda _new: None, registry=worker)
    worker.register(ConsumerLagCollector(SimpleNamespace(should_stop=False), "tailhound.telemetry"))

    async def notifier() -> None:
        settings = Settings(broker="kafka://127.0.0.1:1")
        cfg = parse_config("route: {receiver: console}\nreceivers: [{type: console, name: console}]\n")
        service = NotifierService(settings, cfg, build_receivers(settings, cfg), registry=worker)
        await service._producer.stop()

    asyncio.run(notifier())
    return [worker, AgentMetrics().registry]


def _families(tmp: Path) -> dict[str, str]:
    """name -> type of every metric family (prometheus_client's family name: a counter's without _total)."""
    out = {}
    for registry in _registries(tmp):
        for family in registry.collect():
            out[family.name] = family.type
    return out


_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, str]:
    return _families(tmp_path_factory.mktemp("rules"))


def _ingest_families() -> dict[str, str]:
    """The Prometheus ingest's registry (its families are described in docs/prometheus.md)."""
    from tailhound.ingest.metrics import IngestMetrics

    metrics = IngestMetrics()
    metrics.watch(lambda: {"late_samples": 0}, lambda: {"pending_samples": 0.0, "open_scrapes": 0.0})
    return {family.name: family.type for family in metrics.registry.collect()}


@pytest.fixture(scope="module")
def defined(families) -> set[str]:
    """Every series name the code can expose (worker, agent, ingest)."""
    every = families | _ingest_families()
    return {name + suffix for name, kind in every.items() for suffix in _SUFFIXES.get(kind, ("",))}


def documented_name(name: str, kind: str) -> str:
    return name + "_total" if kind == "counter" else name


def test_the_metrics_of_issue_15_are_defined(defined):
    expected = set(
        """tailhound_snapshots_total tailhound_snapshot_processing_seconds_bucket
    tailhound_stage_seconds_total
    tailhound_model_stage_seconds_total tailhound_incident_events_total tailhound_incidents_open
    tailhound_detection_lag_seconds_bucket tailhound_consumer_lag_messages tailhound_worker_ready
    tailhound_telemetry_accepted_total tailhound_telemetry_rejected_total tailhound_telemetry_redelivered_total
    tailhound_deadletter_failed_total tailhound_nodes_expired_total tailhound_rule_blind tailhound_rule_partial
    tailhound_signals_present tailhound_rules_reloads_total tailhound_rules_last_reload_successful
    tailhound_rules_last_reload_success_timestamp_seconds tailhound_rules_info tailhound_rules_loaded
    tailhound_notifications_total tailhound_notification_delivery_seconds_sum tailhound_notifier_active
    tailhound_notifier_groups tailhound_notifier_incidents_ingested_total tailhound_notifier_receiver_disabled
    tailhound_agent_collections_total tailhound_agent_broker_up tailhound_agent_outbox_fill_ratio""".split()
    )
    missing = expected - defined
    assert not missing, sorted(missing)


# --- PromQL -----------------------------------------------------------------------------------------------
PROMQL_WORDS = set(
    """
sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
by without on ignoring group_left group_right bool and or unless offset atan2 inf nan start end
abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year
days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
histogram_stddev histogram_stdvar histogram_sum holt_winters double_exponential_smoothing hour idelta increase
irate label_join label_replace ln log2 log10 minute month predict_linear rate resets round scalar sgn sort
sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year avg_over_time min_over_time
max_over_time sum_over_time count_over_time quantile_over_time stddev_over_time stdvar_over_time
last_over_time present_over_time mad_over_time acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh
deg pi rad info
""".split()
)

GRAFANA_VARS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def grafana_to_promql(expr: str) -> str:
    """A Grafana target's expression as plain PromQL: interval macros as durations, $var / ${var} as `.*`."""
    for macro, value in GRAFANA_VARS.items():
        expr = expr.replace(macro, value)
    return re.sub(r"\$\{?[A-Za-z_]\w*\}?", ".*", expr)


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: identifiers left once strings, label matchers, ranges and
    grouping clauses are taken out, minus PromQL's functions and keywords."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", "{}", text)
    text = re.sub(r"\[[^\]]*\]", "[]", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    idents = re.findall(r"(?<![\w:.])[A-Za-z_:][\w:]*", text)
    return {i for i in idents if i.lower() not in PROMQL_WORDS}


def test_the_promql_name_extraction():
    assert promql_metric_names('sum by (le) (rate(a_bucket{job=~"$job"}[5m]))') == {"a_bucket"}
    assert promql_metric_names("histogram_quantile(0.99, sum by (le, x) (increase(b[1h]))) > 1e3") == {"b"}
    assert promql_metric_names('c / on (instance) group_left (v) d{x="sum(e)"} or vector(0)') == {"c", "d"}
    assert promql_metric_names("time() - f offset 5m") == {"f"}


def promtool_check_exprs(exprs: dict[str, str], tmp_path: Path) -> None:
    """`promtool check rules` on `exprs` (record name -> PromQL) wrapped as recording rules."""
    promtool = require_tool("promtool", "apt-get install prometheus")
    rules = {"groups": [{"name": "exprs", "rules": [{"record": k, "expr": v} for k, v in exprs.items()]}]}
    f = tmp_path / "exprs.yaml"
    f.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    proc = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --- the dashboard ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text(encoding="utf-8"))


def all_panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))  # panels of a collapsed row
    return out


def targets(dashboard: dict) -> list[tuple[str, dict]]:
    return [(f"{p['id']}:{p['title']}:{t['refId']}", t) for p in all_panels(dashboard) for t in p.get("targets", [])]


def variables(dashboard: dict) -> dict[str, dict]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def variable_query(v: dict) -> str:
    q = v.get("query")
    return q.get("query", "") if isinstance(q, dict) else str(q or "")


def test_dashboard_shape_and_variables(dashboard):
    assert dashboard["schemaVersion"] >= 36
    assert dashboard["uid"] == "tailhound", "the notifier examples link https://grafana.example.com/d/tailhound"
    assert dashboard["title"] and "tailhound" in dashboard["tags"]
    var = variables(dashboard)
    assert var["datasource"]["type"] == "datasource" and var["datasource"]["query"] == "prometheus"
    for name in ("job", "instance", "agent_job", "agent_instance"):
        assert var[name]["type"] == "query", name
        assert var[name]["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert re.fullmatch(r"label_values\(.+, (job|instance)\)", variable_query(var[name])), name
    assert "$job" in variable_query(var["instance"]) and "$agent_job" in variable_query(var["agent_instance"])
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for p in all_panels(dashboard):
        pos = p["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24 and pos["h"] > 0, p["title"]
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
            assert p.get("targets") and p.get("description"), p["title"]
            assert all(t["datasource"]["uid"] == "${datasource}" for t in p["targets"]), p["title"]


def test_dashboard_rows(dashboard):
    rows = [p["title"].lower() for p in dashboard["panels"] if p["type"] == "row"]
    for word in ("health", "incidents", "notifier", "agents"):
        assert any(word in r for r in rows), f"no {word} row in {rows}"


def test_dashboard_panels_do_not_overlap(dashboard):
    taken: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"panel {p['title']!r} overlaps another"
        taken |= cells


def test_every_dashboard_expr_names_only_defined_metrics(dashboard, defined):
    used = set()
    for where, t in targets(dashboard):
        names = promql_metric_names(grafana_to_promql(t["expr"]))
        assert names, f"{where}: no metric in {t['expr']!r}"
        assert names <= defined, f"{where}: {sorted(names - defined)} are not metrics tailhound defines"
        assert "$job" in t["expr"] or "$agent_job" in t["expr"], f"{where}: not filtered by the job variable"
        used |= names
    for name, v in variables(dashboard).items():
        if v["type"] != "query":
            continue
        selector = re.fullmatch(r"label_values\((.+), \w+\)", variable_query(v)).group(1)
        assert promql_metric_names(grafana_to_promql(selector)) <= defined, name
    required = {
        "tailhound_worker_ready",
        "tailhound_snapshots_total",
        "tailhound_snapshot_processing_seconds_bucket",
        "tailhound_stage_seconds_total",
        "tailhound_consumer_lag_messages",
        "tailhound_telemetry_rejected_total",
        "tailhound_deadletter_failed_total",
        "tailhound_rules_last_reload_successful",
        "tailhound_rules_info",
        "tailhound_rule_blind",
        "tailhound_incidents_open",
        "tailhound_incident_events_total",
        "tailhound_detection_lag_seconds_bucket",
        "tailhound_notifications_total",
        "tailhound_notification_delivery_seconds_sum",
        "tailhound_notifier_active",
        "tailhound_agent_collections_total",
        "tailhound_agent_collect_errors_total",
        "tailhound_agent_outbox_fill_ratio",
        "tailhound_agent_broker_up",
        "tailhound_agent_send_latency_seconds_bucket",
    }
    assert required <= used, f"the dashboard does not show {sorted(required - used)}"


def test_every_dashboard_expr_is_valid_promql(dashboard, tmp_path):
    exprs = {
        f"grafana:panel_{where.split(':')[0]}_{t['refId']}": grafana_to_promql(t["expr"])
        for where, t in targets(dashboard)
    }
    promtool_check_exprs(exprs, tmp_path)


# --- the self-alerts ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def alert_groups() -> list[dict]:
    return _load(ALERTS)[0]["groups"]


def alert_rules(groups: list[dict]) -> dict[str, dict]:
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def test_alerts_pass_promtool_check_and_their_unit_tests():
    promtool = require_tool("promtool", "apt-get install prometheus")
    check = subprocess.run([promtool, "check", "rules", str(ALERTS)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    unit = subprocess.run(
        [promtool, "test", "rules", ALERT_TESTS.name], cwd=PROM_DIR, capture_output=True, text=True, timeout=120
    )
    assert unit.returncode == 0, unit.stdout + unit.stderr
    tests = _load(ALERT_TESTS)[0]
    assert tests["rule_files"] == [ALERTS.name]
    tested = {a["alertname"] for t in tests["tests"] for a in t.get("alert_rule_test", [])}
    assert len(tested) >= 2 and tested <= set(alert_rules(_load(ALERTS)[0]["groups"]))


def test_alerts_cover_tailhound_and_name_only_defined_metrics(alert_groups, defined):
    rules = alert_rules(alert_groups)
    assert not REQUIRED_ALERTS - set(rules), sorted(REQUIRED_ALERTS - set(rules))
    for name, rule in rules.items():
        names = promql_metric_names(rule["expr"])
        assert names and names <= defined | SYNTHETIC, f"{name}: {sorted(names - defined - SYNTHETIC)} undefined"
        jobs = set(re.findall(r'job="([^"]+)"', rule["expr"]))
        assert jobs and jobs <= JOBS, f"{name}: select the scrape configs' job ({jobs})"
        for prefix, job in JOB_OF_PREFIX.items():
            if any(n.startswith(prefix) for n in names):
                assert jobs == {job}, f"{name}: {prefix}* metrics come from job {job} only"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        ann = rule["annotations"]
        assert ann.get("summary") and ann.get("description"), name
        assert ann["runbook_url"].endswith("docs/operations.md#" + name.lower()), name


def test_every_scraped_job_has_a_down_alert(alert_groups):
    """A process Prometheus cannot reach says nothing about itself: `up == 0` is the only alert that sees it."""
    ups = {
        j
        for r in alert_rules(alert_groups).values()
        for j in re.findall(r'^up\{job="([^"]+)"\} == 0$', r["expr"].strip())
    }
    assert ups == JOBS, f"no `up == 0` alert for {sorted(JOBS - ups)}"


def test_the_prometheusrule_holds_the_same_groups(alert_groups):
    (doc,) = _load(PROM_DIR / "prometheusrule.yaml")
    assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["namespace"] == "tailhound"
    assert doc["spec"]["groups"] == alert_groups, (
        "prometheusrule.yaml drifted from tailhound-alerts.yaml: paste the groups into its spec"
    )


# --- scrape configs --------------------------------------------------------------------------------------------
def _k8s(kind: str, name: str) -> dict:
    for path in K8S_DIR.glob("*.yaml"):
        for d in _load(path):
            if d.get("kind") == kind and d["metadata"]["name"] == name:
                return d
    raise AssertionError(f"no {kind} {name} in deploy/kubernetes")


def _metrics_port(workload: dict) -> int:
    (c,) = workload["spec"]["template"]["spec"]["containers"]
    return {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"]


def promtool_check_config(path: Path, tmp_path: Path) -> str:
    """`promtool check config`; a promtool built without Kubernetes discovery (Debian's) checks the file
    with that block swapped for static targets, the rest is checked all the same."""
    promtool = require_tool("promtool", "apt-get install prometheus")
    proc = subprocess.run(
        [promtool, "check", "config", path.name], cwd=path.parent, capture_output=True, text=True, timeout=60
    )
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and "kubernetes_sd_configs not found" in out:
        cfg = _load(path)[0]
        for sc in cfg["scrape_configs"]:
            if sc.pop("kubernetes_sd_configs", None) is not None:
                sc["static_configs"] = [{"targets": ["10.0.0.1:9096"]}]
        copy = tmp_path / path.name
        copy.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        for rule_file in cfg.get("rule_files", []):
            (tmp_path / rule_file).write_text((path.parent / rule_file).read_text(encoding="utf-8"), encoding="utf-8")
        proc = subprocess.run(
            [promtool, "check", "config", copy.name], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return out


def test_static_scrape_config(tmp_path):
    from tailhound.agents.config import parse_agent_config
    from tailhound.streams_settings import StreamsSettings

    promtool_check_config(SCRAPE_STATIC, tmp_path)
    cfg = _load(SCRAPE_STATIC)[0]
    assert cfg["rule_files"] == [ALERTS.name]
    jobs = {sc["job_name"]: sc for sc in cfg["scrape_configs"]}
    assert set(jobs) == JOBS
    worker_port = int(StreamsSettings().web_listen.rpartition(":")[2])
    assert worker_port == 9096 == _metrics_port(_k8s("StatefulSet", "tailhound-worker"))
    agent_yaml = _k8s("ConfigMap", "tailhound-agent-config")["data"]["agent.yaml"]
    agent_listen = parse_agent_config(
        agent_yaml.replace("${NODE_NAME}", "n").replace("${NODE_IP}", "10.0.0.1"), origin="agent-configmap.yaml"
    ).listen
    agent_port = int(agent_listen.rpartition(":")[2])
    assert agent_port == 9464 == _metrics_port(_k8s("DaemonSet", "tailhound-agent"))
    ingest_port = _process_port("ingest")
    for job, port in ((WORKER_JOB, worker_port), (AGENT_JOB, agent_port), (INGEST_JOB, ingest_port)):
        sc = jobs[job]
        assert sc.get("metrics_path", "/metrics") == "/metrics" and not sc.get("honor_labels")
        targets_ = [t for s in sc["static_configs"] for t in s["targets"]]
        assert targets_ and all(t.endswith(f":{port}") for t in targets_), job


def _relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str] | None:
    """Prometheus' relabelling (replace, keep, drop) of one target; None when it is dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(labels.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            labels[r["target_label"]] = m.expand(r.get("replacement", "$1").replace("$", "\\"))
    return labels


def _pod_target(workload: dict, port_name: str = "metrics") -> dict[str, str]:
    """The meta labels Kubernetes pod discovery gives a workload's port `port_name`."""
    tmpl = workload["spec"]["template"]
    (c,) = tmpl["spec"]["containers"]
    (port,) = [p for p in c["ports"] if p["name"] == port_name]
    labels = {
        f"__meta_kubernetes_pod_label_{re.sub(r'[^A-Za-z0-9_]', '_', k)}": v
        for k, v in tmpl["metadata"]["labels"].items()
    }
    return labels | {
        "__meta_kubernetes_pod_container_port_name": port["name"],
        "__meta_kubernetes_namespace": workload["metadata"]["namespace"],
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_name": "p",
        "__meta_kubernetes_pod_node_name": "gpu-node-1",
        "__address__": f"10.0.0.9:{port['containerPort']}",
        "job": "tailhound",
    }


def test_kubernetes_sd_scrape_config(tmp_path):
    promtool_check_config(SCRAPE_K8S, tmp_path)
    cfg = _load(SCRAPE_K8S)[0]
    assert cfg["rule_files"] == [ALERTS.name]
    (sc,) = cfg["scrape_configs"]
    (sd,) = sc["kubernetes_sd_configs"]
    assert sd["role"] == "pod" and sd["namespaces"]["names"] == ["tailhound"]
    worker, agent = _k8s("StatefulSet", "tailhound-worker"), _k8s("DaemonSet", "tailhound-agent")
    for workload, job in ((worker, WORKER_JOB), (agent, AGENT_JOB)):
        target = _relabel(sc["relabel_configs"], _pod_target(workload))
        assert target is not None, f"{job}: its pods are not scraped"
        assert target["job"] == job and target["node"] == "gpu-node-1" and target["namespace"] == "tailhound"
    other_port = _pod_target(worker) | {"__meta_kubernetes_pod_container_port_name": "http"}
    assert _relabel(sc["relabel_configs"], other_port) is None


# --- Prometheus Operator -------------------------------------------------------------------------------------
def test_operator_kustomization_lists_the_monitors_and_the_rule():
    (k,) = _load(PROM_DIR / "kustomization.yaml")
    assert k["namespace"] == "tailhound"
    assert set(k["resources"]) == {
        "servicemonitor.yaml",
        "servicemonitor-ingest.yaml",
        "podmonitor.yaml",
        "prometheusrule.yaml",
    }
    for f in k["resources"]:
        (doc,) = _load(PROM_DIR / f)
        assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["metadata"]["namespace"] == "tailhound"
    kube = _load(K8S_DIR / "kustomization.yaml")[0]["resources"]
    assert not set(k["resources"]) & set(kube), "CRD objects would break kubectl apply -k"


def _relabelings_job(rules: list[dict]) -> str | None:
    for r in rules:
        if r.get("targetLabel") == "job" and not r.get("sourceLabels"):
            return r["replacement"]
    return None


def test_servicemonitor_selects_the_worker_service():
    (sm,) = _load(PROM_DIR / "servicemonitor.yaml")
    assert sm["kind"] == "ServiceMonitor"
    svc = _k8s("Service", "tailhound-worker")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert svc["metadata"]["namespace"] in sm["spec"]["namespaceSelector"]["matchNames"]
    (ep,) = sm["spec"]["endpoints"]
    assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]} and ep["path"] == "/metrics"
    assert _relabelings_job(ep["relabelings"]) == WORKER_JOB


def test_servicemonitor_selects_no_other_service():
    """Every worker is scraped once: the StatefulSet's governing (headless) Service selects the same pods, so
    the ServiceMonitor must not select it too."""
    (sm,) = _load(PROM_DIR / "servicemonitor.yaml")
    wanted = sm["spec"]["selector"]["matchLabels"].items()
    services = [d for p in K8S_DIR.glob("*.yaml") for d in _load(p) if d.get("kind") == "Service"]
    selected = {d["metadata"]["name"] for d in services if wanted <= d["metadata"].get("labels", {}).items()}
    assert selected == {"tailhound-worker"}, f"the ServiceMonitor selects {sorted(selected)}"
    governing = _k8s("StatefulSet", "tailhound-worker")["spec"]["serviceName"]
    assert governing in {d["metadata"]["name"] for d in services} - selected


def test_podmonitor_selects_the_agent_pods():
    (pm,) = _load(PROM_DIR / "podmonitor.yaml")
    assert pm["kind"] == "PodMonitor"
    ds = _k8s("DaemonSet", "tailhound-agent")
    assert pm["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert pm["spec"]["selector"]["matchLabels"] == ds["spec"]["selector"]["matchLabels"]
    assert ds["metadata"]["namespace"] in pm["spec"]["namespaceSelector"]["matchNames"]
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    assert ep["port"] == "metrics" and _metrics_port(ds) == 9464 and ep["path"] == "/metrics"
    assert _relabelings_job(ep["relabelings"]) == AGENT_JOB


# --- every process's metrics port, by name -------------------------------------------------------------------------
#: process -> (workload kind, name): where each process runs in deploy/kubernetes
PROCESSES = {
    "worker": ("StatefulSet", "tailhound-worker"),
    "agent": ("DaemonSet", "tailhound-agent"),
    "ingest": ("Deployment", "tailhound-ingest"),
}


def _process_port(process: str) -> int:
    """The port the process serves /metrics on, from its own configuration in the manifests."""
    from tailhound.agents.config import parse_agent_config
    from tailhound.ingest.config import parse_ingest_config

    if process == "worker":
        (c,) = _k8s("StatefulSet", "tailhound-worker")["spec"]["template"]["spec"]["containers"]
        listen = {e["name"]: e.get("value") for e in c["env"]}["TAILHOUND_STREAMS__WEB_LISTEN"]
    elif process == "agent":
        text = _k8s("ConfigMap", "tailhound-agent-config")["data"]["agent.yaml"]
        listen = parse_agent_config(
            text.replace("${NODE_NAME}", "n").replace("${NODE_IP}", "10.0.0.1"), origin="agent-configmap.yaml"
        ).listen
    else:
        text = _k8s("ConfigMap", "tailhound-ingest-config")["data"]["ingest.yaml"]
        listen = parse_ingest_config(text, origin="ingest-configmap.yaml").listen
    return int(listen.rpartition(":")[2])


# --- docs -----------------------------------------------------------------------------------------------------------
def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors."""
    out = set()
    for line in markdown.splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_operations_doc_lists_every_metric_and_alert(families, alert_groups):
    text = OPERATIONS.read_text(encoding="utf-8")
    missing = [
        documented_name(n, k)
        for n, k in sorted(families.items())
        if not re.search(rf"`{re.escape(documented_name(n, k))}(\{{[^`]*\}})?`", text)
    ]
    assert not missing, f"docs/operations.md does not describe {missing}"
    anchors = _anchors(text)
    for name in alert_rules(alert_groups):
        assert name.lower() in anchors, f"docs/operations.md has no section for alert {name}"


def test_operations_doc_links_resolve_and_readme_links_it():
    text = OPERATIONS.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if not re.match(r"[a-z]+://", link)]
    for link in local:
        assert (OPERATIONS.parent / link).exists(), f"docs/operations.md links a missing {link}"
    linked = {(OPERATIONS.parent / link).resolve() for link in local}
    for needed in (DASHBOARD, ALERTS, SCRAPE_STATIC, SCRAPE_K8S, PROM_DIR / "servicemonitor.yaml"):
        assert needed.resolve() in linked, f"docs/operations.md does not link {needed.relative_to(ROOT)}"
    assert "(docs/operations.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "operations.md" in (ROOT / "deploy" / "README.md").read_text(encoding="utf-8")
