"""`tailhound notifier routes test`: the route paths and receivers of a label set (or of each incident of a
file), the routing tree, --verify-receivers for CI tests of routing, and hints for unknown labels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.errors import TailhoundError
from tailhound.incident import Scope
from tailhound.notifier.config import load_config
from tailhound.notifier.matchers import incident_labels
from tailhound.notifier.route_trace import load_tree, read_incidents, receivers, render_tree, trace
from tailhound.notifier.stages.route import receivers_for

from .factories import incident_event

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "tailhound" / "examples" / "notifier-production.yaml"
runner = CliRunner()

NESTED = """\
route:
  receiver: default
  routes:
    - matchers: ['team="ml-platform"']
      routes:
        - matchers: ['severity="critical"']
          receiver: pager
          continue: true
        - matchers: ['root_cause=~"gpu-.*"']
          receiver: hardware
    - matchers: ['severity="info"']
      receiver: quiet
receivers:
  - {type: console, name: default}
  - {type: console, name: pager}
  - {type: console, name: hardware}
  - {type: console, name: quiet}
"""


def routes(*args: str):
    return runner.invoke(app, ["notifier", "routes", "test", *args], catch_exceptions=False)


@pytest.fixture
def nested(tmp_path) -> Path:
    path = tmp_path / "nested.yaml"
    path.write_text(NESTED)
    return path


LABEL_SETS = [
    dict(severity="critical", transient="false"),
    dict(severity="critical", transient="true", root_cause="ingress-saturation"),
    dict(severity="warning", root_cause="capacity"),
    dict(severity="critical", transient="false", root_cause="capacity"),
    dict(severity="info", team="ml-platform", root_cause="gpu-thermal-throttle"),
    dict(),
]


@pytest.mark.parametrize("path", [PRODUCTION, "nested"])
@pytest.mark.parametrize("labels", LABEL_SETS, ids=lambda d: ",".join(f"{k}={v}" for k, v in d.items()) or "none")
def test_trace_gives_what_the_route_stage_gives(path, labels, nested):
    path = nested if path == "nested" else path
    paths = trace(load_tree(path), labels)
    assert receivers(paths) == list(dict.fromkeys(receivers_for(load_config(path).route, labels)))


def test_trace_records_the_path_and_lines(nested):
    tree = load_tree(nested)
    paths = trace(tree, dict(team="ml-platform", severity="critical", root_cause="gpu-thermal-throttle"))
    assert [p.describe() for p in paths] == [
        'route (line 1) > routes[0] {team="ml-platform"} (line 4) > routes[0] {severity="critical"} '
        "(line 6, continue) -> pager",
        'route (line 1) > routes[0] {team="ml-platform"} (line 4) > routes[1] {root_cause=~"gpu-.*"} (line 9) '
        "-> hardware",
    ]
    inherited = trace(tree, dict(team="ml-platform", severity="warning", root_cause="capacity"))
    assert [p.describe() for p in inherited] == [
        'route (line 1) > routes[0] {team="ml-platform"} (line 4) -> default (inherited)'
    ]
    assert render_tree(tree) == [
        "route (line 1) -> default",
        '  routes[0] {team="ml-platform"} (line 4) -> default (inherited)',
        '    routes[0] {severity="critical"} (line 6, continue) -> pager',
        '    routes[1] {root_cause=~"gpu-.*"} (line 9) -> hardware',
        '  routes[1] {severity="info"} (line 11) -> quiet',
    ]


# --- the command on the production example -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["severity=critical", "transient=false"], "pagerduty, slack"),
        (["severity=critical", "transient=true", "root_cause=ingress-saturation"], "slack"),
        (["severity=warning", "root_cause=capacity"], "remediate, slack"),
        (["severity=critical", "transient=false", "root_cause=capacity"], "pagerduty, remediate, slack"),
        (['severity="warning"'], "slack"),
    ],
)
def test_routes_test_on_the_production_example(labels, expected):
    out = routes("--config", str(PRODUCTION), *labels)
    assert out.exit_code == 0
    assert out.stdout.splitlines()[-1] == f"  receivers: {expected}"
    assert routes("--config", str(PRODUCTION), *labels, "--verify-receivers", expected.replace(" ", "")).exit_code == 0


def test_routes_test_prints_each_route_path_with_its_line_and_matchers():
    out = routes("--config", str(PRODUCTION), "severity=critical", "transient=false")
    assert out.stdout.splitlines() == [
        'severity="critical", transient="false"',
        '  route (line 35) > routes[0] {severity="critical", transient="false"} (line 41, continue) -> pagerduty',
        "  route (line 35) > routes[2] {} (line 49) -> slack",
        "  receivers: pagerduty, slack",
    ]


def test_routes_test_as_json_and_yaml_for_scripts():
    import yaml

    out = routes("--config", str(PRODUCTION), "severity=critical", "transient=false", "--tree", "-o", "json")
    [case] = json.loads(out.stdout)  # one document: the tree is left out
    assert case["labels"] == {"severity": "critical", "transient": "false"}
    assert case["receivers"] == ["pagerduty", "slack"]
    assert [(r["route"], r["receiver"]) for r in case["routes"]] == [
        ("route.routes[0]", "pagerduty"),
        ("route.routes[2]", "slack"),
    ]
    as_yaml = yaml.safe_load(routes("--config", str(PRODUCTION), "severity=warning", "-o", "yaml").stdout)
    assert as_yaml[0]["receivers"] == ["slack"]
    with pytest.raises(TailhoundError, match="--output 'csv'"):
        routes("--config", str(PRODUCTION), "-o", "csv")


def test_verify_receivers_fails_when_they_differ():
    ok = routes("--config", str(PRODUCTION), "root_cause=capacity", "--verify-receivers", "slack,remediate")
    assert ok.exit_code == 0  # any order
    bad = routes("--config", str(PRODUCTION), "root_cause=capacity", "--verify-receivers", "pagerduty,slack")
    assert bad.exit_code == 1
    assert "receivers differ: expected pagerduty, slack, got remediate, slack" in bad.stderr


def test_tree_prints_the_routing_tree():
    out = routes("--config", str(PRODUCTION), "--tree")
    assert out.exit_code == 0
    assert out.stdout.splitlines() == [
        "route (line 35) -> slack",
        '  routes[0] {severity="critical", transient="false"} (line 41, continue) -> pagerduty',
        '  routes[1] {root_cause="capacity"} (line 45, continue) -> remediate',
        "  routes[2] {} (line 49) -> slack",
    ]


def test_unknown_labels_and_values_get_the_checkers_hints():
    with pytest.raises(TailhoundError) as err:
        routes("--config", str(PRODUCTION), "severty=critcal", "node=gpu-node-1", "root_cause=capacty")
    assert str(err.value).splitlines() == [
        "label severty=critcal: no incident carries the label 'severty' (did you mean 'severity'?)",
        "label severty=critcal: 'critcal' is not a valid severity (did you mean 'critical'?)",
        "label root_cause=capacty: 'capacty' is not a valid root_cause (did you mean 'capacity'?)",
    ]
    with pytest.raises(TailhoundError, match="write LABEL=VALUE"):
        routes("--config", str(PRODUCTION), "severity")


def test_rules_option_makes_a_custom_label_known(tmp_path):
    with pytest.raises(TailhoundError, match="no incident carries the label 'owner'"):
        routes("--config", str(PRODUCTION), "owner=gpu-team")
    (tmp_path / "r.yaml").write_text(
        "groups:\n  - name: g\n    rules:\n      - name: hot\n        labels: {owner: gpu-team}\n"
    )
    assert routes("--config", str(PRODUCTION), "--rules", str(tmp_path), "owner=gpu-team").exit_code == 0


def test_default_config_is_the_setting_else_the_bundled_one(monkeypatch, nested):
    monkeypatch.delenv("TAILHOUND_CONFIG", raising=False)
    monkeypatch.delenv("TAILHOUND_NOTIFIER__CONFIG", raising=False)
    assert routes("severity=critical").stdout.splitlines()[-1] == "  receivers: console"
    monkeypatch.setenv("TAILHOUND_NOTIFIER__CONFIG", str(nested))
    assert routes("severity=info").stdout.splitlines()[-1] == "  receivers: quiet"


# --- incidents from a file ---------------------------------------------------------------------------------------
def test_incident_file_routes_each_incident_once(tmp_path):
    critical = incident_event(incident_id="inc-00000000000000c1", severity="critical")
    capacity = incident_event(
        incident_id="inc-00000000000000c2",
        root_cause="capacity",
        transient=True,
        scope=Scope(node="gpu-node-1", endpoint="api.example.com"),
    )
    resolved = incident_event(
        incident_id="inc-00000000000000c2",
        event="resolved",
        sequence=2,
        root_cause="capacity",
        transient=True,
        scope=Scope(node="gpu-node-1", endpoint="api.example.com"),
    )
    jsonl = tmp_path / "incidents.jsonl"
    jsonl.write_text("".join(e.model_dump_json() + "\n" for e in (critical, capacity, resolved)))
    out = routes("--config", str(PRODUCTION), "--incident", str(jsonl))
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    heads = [line for line in lines if line.startswith("inc-")]
    assert [h.split(":")[0] for h in heads] == ["inc-00000000000000c1 #1 opened", "inc-00000000000000c2 #1 opened"]
    assert 'root_cause="gpu-thermal-throttle"' in heads[0] and 'team="ml-platform"' in heads[0]
    assert [line for line in lines if "receivers:" in line] == [
        "  receivers: pagerduty, slack",
        "  receivers: remediate, slack",
    ]
    bad = routes("--config", str(PRODUCTION), "--incident", str(jsonl), "--verify-receivers", "pagerduty,slack")
    assert bad.exit_code == 1 and "for inc-00000000000000c2 #1 opened" in bad.stderr
    override = routes("--config", str(PRODUCTION), "--incident", str(jsonl), "severity=info", "transient=true")
    assert [line for line in override.stdout.splitlines() if "receivers:" in line] == [
        "  receivers: slack",
        "  receivers: remediate, slack",
    ]


def test_read_incidents_takes_json_a_list_or_lines(tmp_path):
    ev = incident_event()
    one = tmp_path / "one.json"
    one.write_text(ev.model_dump_json(indent=2))
    many = tmp_path / "many.json"
    many.write_text(json.dumps([ev.model_dump(mode="json")] * 2))
    assert read_incidents(one) == [ev] and read_incidents(many) == [ev, ev]
    assert incident_labels(read_incidents(one)[0]) == incident_labels(ev)
    broken = tmp_path / "broken.jsonl"
    broken.write_text(ev.model_dump_json() + "\n{not json\n")
    with pytest.raises(ValueError, match=r"broken.jsonl:2: not JSON"):
        read_incidents(broken)
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text('{"incident_id": "x"}\n')
    with pytest.raises(ValueError, match=r"wrong.jsonl: event 1: not an incident event"):
        read_incidents(wrong)


def test_exit_codes_of_routes_test():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "tailhound", "notifier", "routes", "test", "--config", str(PRODUCTION), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    differ = run("severity=critical", "transient=false", "--verify-receivers", "slack")
    assert differ.returncode == 1 and "receivers: pagerduty, slack" in differ.stdout
    unknown = run("severty=critical")
    assert unknown.returncode == 2 and "did you mean 'severity'?" in unknown.stderr
