"""``tailhound replay --html``: the replay's incidents as one self-contained HTML report."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.cli import app
from tests.notifier.webconsole.markup import EXTERNAL, parse_page

RULES = Path(__file__).resolve().parents[2] / "rules"


def _recording(tmp_path: Path) -> Path:
    fault = FaultSpec.parse("thermal-throttle@5m+10m:node=gpu-node-1:gpus=2")
    sim = FleetSimulator(SimConfig(nodes=1, seed=11), [fault])
    path = tmp_path / "fleet.jsonl"
    write_recording(sim, 25, path)
    return path


def test_replay_writes_an_html_report_of_its_incidents(tmp_path):
    rec = _recording(tmp_path)
    report = tmp_path / "out" / "report.html"
    result = CliRunner().invoke(app, ["replay", str(rec), "--rules", str(RULES), "--html", str(report)])
    assert result.exit_code == 0, result.output
    assert f"incident report (1 incidents) -> {report}" in result.output.replace("\n", "")
    html = report.read_text(encoding="utf-8")
    page = parse_page(html)
    (row,) = page.by_testid("incident-row")
    (section,) = page.by_testid("incident")
    assert row.attrs["data-cause"] == "gpu-thermal-throttle" and row.attrs["data-state"] == "resolved"
    assert section.attrs["id"] == row.attrs["data-incident"]
    assert "node gpu-node-1 / GPU 2" in page.text(section)
    assert "replay of fleet.jsonl" in html and not EXTERNAL.search(html)
    # the same recording gives the same file (ages as of the recording's end, not the wall clock)
    again = tmp_path / "again.html"
    assert CliRunner().invoke(app, ["replay", str(rec), "--rules", str(RULES), "--html", str(again)]).exit_code == 0
    assert again.read_text(encoding="utf-8") == html


def test_replay_html_keeps_json_output_clean(tmp_path):
    rec = _recording(tmp_path)
    report = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["replay", str(rec), "--rules", str(RULES), "-f", "json", "--html", str(report)])
    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert events and {e["root_cause"] for e in events} == {"gpu-thermal-throttle"}
    assert report.is_file() and all(e["incident_id"] in report.read_text(encoding="utf-8") for e in events)
