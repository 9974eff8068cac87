"""``tailhound doctor``: rule coverage of a recording (real exporter fixtures) or live targets, and the fixes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.catalog import default_catalog
from tailhound.catalog.dcgm_counters import default_fields
from tailhound.cli import app
from tailhound.doctor.observed import collect_targets, guess_job, parse_target, read_recordings
from tailhound.doctor.report import diagnose, render_table
from tailhound.errors import TailhoundError
from tailhound.recording import ScrapeRecord, write_records
from tailhound.resources import default_rules_dir
from tailhound.settings import Settings
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.worker.compose import create_worker_app, metrics_registry
from tests.http_helpers import serve_metrics

FIXTURES = Path(__file__).resolve().parents[1] / "agents" / "fixtures"
DCGM_LINE = re.compile(r"^DCGM_FI_[A-Z0-9_]+, (gauge|counter), [^,]+$")

THERMAL_RULE = """
groups:
  - name: gpu
    rules:
      - name: hot-and-slow
        scope: gpu
        severity: critical
        root_cause: gpu-thermal-throttle
        when:
          all:
            - {signal: gpu.temperature, at_least: 85}
            - {signal: gpu.sm_clock_ratio, below: 0.8}
      - name: queue
        scope: engine
        severity: warning
        symptom: true
        when: {signal: engine.requests_waiting, above: 0}
"""


def only_default_counters(text: str) -> str:
    """A dcgm-exporter scrape as an exporter with its default counters file would give it."""
    keep = []
    for line in text.splitlines():
        name = line.split()[2] if line.startswith("# ") and len(line.split()) > 2 else re.split(r"[{ ]", line)[0]
        if name in default_fields():
            keep.append(line)
    return "\n".join(keep) + "\n"


def fixture_recording(path: Path) -> Path:
    """Real fixtures: dcgm-exporter (two generations, default counters only), vLLM V1, node_exporter, blackbox."""
    ts = 1_764_400_000.0
    records = [
        ScrapeRecord(
            ts=ts,
            node=f"gpu-node-{i}",
            job="dcgm",
            interval_s=15,
            body=only_default_counters((FIXTURES / fx).read_text(encoding="utf-8")),
        )
        for i, fx in enumerate(("dcgm_exporter.prom", "dcgm_exporter_3x.prom"))
    ]
    others = (("vllm_v1.prom", "vllm"), ("node_exporter.prom", "node"), ("blackbox.prom", "blackbox"))
    records += [
        ScrapeRecord(ts=ts, node="gpu-node-0", job=job, interval_s=15, body=(FIXTURES / fx).read_text())
        for fx, job in others
    ]
    records.append(ScrapeRecord(ts=ts + 15, node="gpu-node-0", job="vllm", error="timed out"))
    with path.open("w", encoding="utf-8") as fh:
        write_records(fh, records)
    return path


@pytest.fixture
def recording(tmp_path):
    return fixture_recording(tmp_path / "fleet.jsonl")


@pytest.fixture
def thermal_rules(tmp_path):
    d = tmp_path / "rules"
    d.mkdir()
    (d / "gpu.yaml").write_text(THERMAL_RULE, encoding="utf-8")
    return d


def test_doctor_on_a_recording_names_the_blind_rule_and_the_exact_counters_line(recording, thermal_rules):
    result = CliRunner().invoke(app, ["doctor", str(recording), "--rules", str(thermal_rules)])
    assert result.exit_code == 1, result.output  # a critical rule is blind
    out = result.output
    assert out.startswith(
        "sources: blackbox (1 node(s), 3 mapped metrics), dcgm (2 node(s), 7 mapped metrics), "
        "node (1 node(s), 6 mapped metrics), "
        "vllm (1 node(s), 6 mapped metrics, 1 failed collections)"
    )
    assert re.search(r"^hot-and-slow\s+critical\s+blind\s+gpu-thermal-throttle\s+gpu.sm_clock_max$", out, re.M)
    assert re.search(r"^queue\s+warning\s+ok\s+symptom\s+-$", out, re.M)
    # what to do, per source, in agent.yaml terms: the rule's signal first, then what the sending exporters leave
    # out by default (dcgm-exporter's counters file, node_exporter's netstat fields)
    todo = out[out.index("to do, per source (the agent's path") :]
    assert todo.splitlines()[1].startswith(
        "dcgm-exporter (sending): gpu.sm_clock_max (for hot-and-slow); also gpu.clock_event_reasons, "
    )
    assert todo.splitlines()[1].endswith("(no rule reads them yet); or from the nvml collector")
    assert (
        "    add to dcgm-exporter's counters file (-f / DCGM_EXPORTER_COLLECTORS):\n"
        "        DCGM_FI_DEV_MAX_SM_CLOCK, gauge, Maximum supported SM clock for the device (in MHz).\n"
    ) in todo
    assert (
        "node_exporter (sending): net.tcp_attempt_fails, net.tcp_estab_resets (no rule reads them yet)\n"
        "    add to node_exporter's command line:\n"
    ) in todo
    assert "prometheus.yml" not in out and out.count("\n") < 45
    assert out.endswith("2 rules: 1 ok, 0 partial, 1 blind (1 critical)\n")


def test_doctor_json_on_the_default_pack(recording):
    result = CliRunner().invoke(app, ["doctor", str(recording), "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    data = json.loads(result.output)
    pack = load_rules(default_rules_dir())
    assert [r["rule"] for r in data["rules"]] == [r.name for r in pack.rules]
    assert set(data["sources"]) == {"dcgm", "vllm", "node", "blackbox"}
    assert data["sources"]["vllm"]["failed_collections"] == 1
    assert {"gpu.temperature", "gpu.sm_clock", "engine.requests_waiting", "probe.success"} <= set(data["signals"])
    assert result.exit_code == (1 if data["blind_critical"] else 0)
    for r in data["rules"]:
        assert r["status"] in ("ok", "partial", "blind")
        assert (r["status"] == "ok") == (r["missing"] == [])
        for signal in r["missing"]:
            fixes = r["fixes"][signal]
            assert fixes and all(f["action"] for f in fixes)
            assert all(DCGM_LINE.match(f["line"]) for f in fixes if f["line"])  # a valid counters-file line


def test_doctor_needs_an_input_and_reads_recordings_strictly(tmp_path):
    with pytest.raises(TailhoundError, match="needs a recording"):
        CliRunner().invoke(app, ["doctor"], catch_exceptions=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": 1, "node": "n"}\n', encoding="utf-8")
    with pytest.raises(TailhoundError, match="bad.jsonl:1: job"):
        CliRunner().invoke(app, ["doctor", str(bad)], catch_exceptions=False)


def test_doctor_as_installed_exits_1_on_a_blind_critical_rule(recording, thermal_rules):
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("tailhound")
    r = subprocess.run(
        [str(exe), "doctor", str(recording), "--rules", str(thermal_rules), "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stderr
    assert json.loads(r.stdout)["blind_critical"] == ["hot-and-slow"]


def test_a_recording_is_read_once_per_source_and_minute(tmp_path):
    body = (FIXTURES / "vllm_v1.prom").read_text(encoding="utf-8")
    path = tmp_path / "r.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        write_records(fh, [ScrapeRecord(ts=1000 + 5 * i, node="n", job="vllm", body=body) for i in range(30)])
    seen = read_recordings([path])
    assert seen.records == 30 and "vllm:num_requests_waiting" in seen.metrics["vllm"]


# --- live targets ------------------------------------------------------------------------------------------------


def test_parse_target_and_guess_job():
    assert parse_target("dcgm=http://10.0.0.5:9400/metrics") == ("dcgm", "http://10.0.0.5:9400/metrics")
    assert parse_target("http://x:9115/probe?target=http://y/health&module=http_2xx") == (
        None,
        "http://x:9115/probe?target=http://y/health&module=http_2xx",
    )
    with pytest.raises(TailhoundError, match="expected"):
        parse_target("10.0.0.5:9400")
    cat = default_catalog()
    assert guess_job(["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"], cat) == "dcgm"
    assert guess_job(["vllm:num_requests_waiting"], cat) == "vllm"
    assert guess_job(["something_else"], cat) is None


async def test_doctor_scrapes_live_targets_once(thermal_rules):
    dcgm_text = (FIXTURES / "dcgm_exporter.prom").read_text(encoding="utf-8")
    vllm_text = (FIXTURES / "vllm_v1.prom").read_text(encoding="utf-8")
    cat = default_catalog()
    async with (
        serve_metrics(lambda: dcgm_text) as dcgm_url,
        serve_metrics(lambda: vllm_text) as vllm_url,
        serve_metrics(lambda: "# TYPE foo gauge\nfoo 1\n") as other_url,
    ):
        seen = await collect_targets([dcgm_url, f"vllm={vllm_url}"], 5.0, cat)
        assert set(seen.metrics) == {"dcgm", "vllm"}  # dcgm told from its metric names
        report = diagnose(load_rules(thermal_rules), seen)
        assert report.exit_code == 1 and "\ndcgm-exporter (sending): gpu.sm_clock_max (for hot-and-slow)" in (
            render_table(report)
        )
        with pytest.raises(TailhoundError, match="HTTP 404"):
            await collect_targets([f"dcgm={dcgm_url}/nothing"], 5.0, cat)
        with pytest.raises(TailhoundError, match="cannot tell which source this is; name it: --target JOB="):
            await collect_targets([other_url], 5.0, cat)
    with pytest.raises(TailhoundError, match="at most 32"):
        await collect_targets([dcgm_url] * 33, 5.0, cat)


# --- the worker --------------------------------------------------------------------------------------------------


def test_the_worker_app_exports_rule_coverage(tmp_path):
    settings = Settings(
        broker="kafka://127.0.0.1:1",
        rules_dir=Path("rules"),
        streams={"data_dir": tmp_path},
        notifier={"enabled": False},
    )
    faust_app = create_worker_app(settings, load_rules(default_rules_dir()))
    registry = metrics_registry(faust_app)
    assert registry.get_sample_value("tailhound_signals_present") == 0  # nothing judged before telemetry
