"""Bare-metal and autoscaling pieces of deploy/: the agent's systemd unit and the KEDA ScaledObject for vLLM,
checked against the CLI, the example agent config and the catalog they refer to."""

from __future__ import annotations

import re
import subprocess

import yaml

from tailhound.catalog import default_catalog
from tailhound.cli import app
from tests.conftest import require_tool

from .helpers import ROOT

SYSTEMD = ROOT / "deploy" / "systemd"
KEDA = ROOT / "deploy" / "keda" / "vllm-scaledobject.yaml"


def unit(path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit: section -> key -> values (keys may repeat)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = out.setdefault(line[1:-1], {})
            continue
        key, sep, value = line.partition("=")
        assert sep and section is not None, f"{path}: not a unit line: {raw!r}"
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def test_the_agent_unit_runs_the_cli_unprivileged_with_the_example_paths():
    u = unit(SYSTEMD / "tailhound-agent.service")
    svc = u["Service"]
    assert svc["User"] == ["tailhound"] and svc["NoNewPrivileges"] == ["yes"] and svc["ProtectSystem"] == ["strict"]
    exe, sub, *args = svc["ExecStart"][0].split()
    assert exe == "/opt/tailhound/bin/tailhound" and sub == "agent"
    import typer

    agent = typer.main.get_command(app).commands["agent"]  # type: ignore[attr-defined]
    options = {opt for p in agent.params for opt in p.opts}
    for flag in args[::2]:
        assert flag in options, f"tailhound agent has no {flag}"
    assert args[args.index("--config") + 1] == "/etc/tailhound/agent.yaml"
    assert svc["Restart"] == ["on-failure"] and int(svc["TimeoutStopSec"][0]) <= 30
    # unsent snapshots spill where the unit's env puts the example config's spill file: in its state directory
    example = yaml.safe_load((ROOT / "tailhound" / "examples" / "agent.yaml").read_text().replace("${", "$ {"))
    assert example["publish"]["buffer"]["spill_file"] == "$ {TAILHOUND_AGENT_SPILL_FILE:-null}"
    env = (SYSTEMD / "agent.env.example").read_text()
    spill = re.search(r"^TAILHOUND_AGENT_SPILL_FILE=(\S+)$", env, re.M)
    assert spill and spill.group(1).startswith("/var/lib/" + svc["StateDirectory"][0] + "/")
    assert u["Install"]["WantedBy"] == ["multi-user.target"]
    assert svc["EnvironmentFile"] == ["/etc/tailhound/agent.env"] and "TAILHOUND_BROKER=" in env
    sysusers = [
        ln.split()
        for ln in (SYSTEMD / "tailhound.sysusers.conf").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert sysusers[0][:2] == ["u", "tailhound"] and sysusers[1] == ["m", "tailhound", "video"]
    assert "video" in svc["SupplementaryGroups"][0].split()


def scaled_object() -> dict:
    return yaml.safe_load(KEDA.read_text())


def test_the_scaledobject_scales_on_waiting_over_two_per_replica_for_30s():
    so = scaled_object()
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
    spec = so["spec"]
    assert spec["minReplicaCount"] >= 2 and spec["maxReplicaCount"] > spec["minReplicaCount"]
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 30
    triggers = {t["name"]: t for t in spec["triggers"]}
    catalog = default_catalog()
    waiting = catalog.spec("engine.requests_waiting").sources["vllm"][0].metric
    running = catalog.spec("engine.requests_running").sources["vllm"][0].metric
    queue, batch = triggers["queue"], triggers["batch"]
    assert queue["type"] == batch["type"] == "prometheus"
    assert queue["metricType"] == batch["metricType"] == "AverageValue"
    assert queue["metadata"]["query"].startswith(f"sum({waiting}{{") and queue["metadata"]["threshold"] == "2"
    assert batch["metadata"]["query"].startswith(f"sum({running}{{")


def test_the_scaledobject_queries_are_valid_promql(tmp_path):
    promtool = require_tool("promtool", "apt-get install prometheus")
    rules = {
        "groups": [
            {
                "name": "keda",
                "rules": [
                    {"record": f"keda:{t['name']}", "expr": t["metadata"]["query"]}
                    for t in scaled_object()["spec"]["triggers"]
                ],
            }
        ]
    }
    f = tmp_path / "keda-queries.yaml"
    f.write_text(yaml.safe_dump(rules))
    proc = subprocess.run([promtool, "check", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_agent_unit_grants_no_capability_and_the_hops_drop_in_only_cap_net_raw():
    """docs/agent.md: no capability by default; hop probes need CAP_NET_RAW, which NoNewPrivileges keeps mtr-packet's
    file capability from giving, so the drop-in grants it to the agent (ambient, passed on to mtr-packet)."""
    svc = unit(SYSTEMD / "tailhound-agent.service")["Service"]
    assert svc["CapabilityBoundingSet"] == [""] and svc.get("AmbientCapabilities", [""]) == [""]
    assert svc["NoNewPrivileges"] == ["yes"]
    hops = unit(SYSTEMD / "tailhound-agent-hops.conf")
    assert set(hops) == {"Service"} and hops["Service"] == {
        "CapabilityBoundingSet": ["CAP_NET_RAW"],
        "AmbientCapabilities": ["CAP_NET_RAW"],
    }
    readme = (SYSTEMD / "README.md").read_text(encoding="utf-8")
    assert "/etc/systemd/system/tailhound-agent.service.d/" in readme and "tailhound-agent-hops.conf" in readme
    privileges = (ROOT / "docs" / "agent.md").read_text(encoding="utf-8").partition("## Privileges")[2]
    assert "tailhound-agent-hops.conf" in privileges.partition("\n## ")[0]


def test_the_scaledobject_sets_no_cooldown_it_would_not_use():
    """KEDA's cooldownPeriod only applies to scaling in to zero; with minReplicaCount >= 1 it does nothing, and
    the scale-in pace is the HPA's scaleDown behaviour."""
    spec = scaled_object()["spec"]
    assert "cooldownPeriod" not in spec or spec.get("minReplicaCount", 0) == 0
    scale_down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
    assert scale_down["stabilizationWindowSeconds"] >= 300 and scale_down["policies"]
