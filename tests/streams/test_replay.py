"""Offline replay: recording -> incidents, deterministic, through the Faust agent's own step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.incident import IncidentEvent
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset.rulefile import load_rules

RULES = Path(__file__).resolve().parents[2] / "rules"


def record(tmp_path: Path, minutes: float, *faults: str, nodes: int = 2) -> Path:
    sim = FleetSimulator(SimConfig(nodes=nodes, seed=11), [FaultSpec.parse(f) for f in faults])
    path = tmp_path / "fleet.jsonl"
    write_recording(sim, minutes, path)
    return path


def test_thermal_throttle_replays_to_one_incident_with_both_gpus(tmp_path):
    rec = record(tmp_path, 40, "thermal-throttle@10m+15m:node=gpu-node-1:gpus=3,5")
    out = tmp_path / "incidents.jsonl"
    result = replay_files([rec], load_rules(RULES), out)
    events = [IncidentEvent.model_validate_json(line) for line in out.read_text().splitlines()]
    assert events == result.events
    assert events[0].event == "opened" and events[-1].event == "resolved"
    assert all(e.event == "updated" for e in events[1:-1])
    assert {e.incident_id for e in events} == {events[0].incident_id}
    assert all(e.root_cause == "gpu-thermal-throttle" and e.scope.node == "gpu-node-1" for e in events)
    assert events[-1].scope.gpus == ["3", "5"]
    start = SimConfig().start_ts
    assert start + 600 < events[0].ts <= start + 600 + 180  # detected within 3 min (rule holds for 1m)
    assert start + 25 * 60 < events[-1].ts <= start + 25 * 60 + 240


def test_replay_is_deterministic_byte_for_byte(tmp_path):
    rec = record(tmp_path, 30, "thermal-throttle@5m+10m:node=gpu-node-2:gpus=1")
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    replay_files([rec], load_rules(RULES), a)
    replay_files([rec], load_rules(RULES), b)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes()


def test_healthy_fleet_and_harmless_faults_open_nothing(tmp_path):
    rec = record(tmp_path, 40, "short-blip@10m", "engine-restart@20m:node=gpu-node-1")
    assert replay_files([rec], load_rules(RULES), None).events == []


def test_replay_cli(tmp_path):
    rec = record(tmp_path, 25, "thermal-throttle@5m+10m:node=gpu-node-1:gpus=2", nodes=1)
    out = tmp_path / "inc.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "replay", str(rec), "--rules", str(RULES), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    events = out.read_text().splitlines()
    assert f"{len(events)} incident events (1 opened)" in proc.stdout.replace("\n", " ")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"ts": 1, "node": "n", "job": "vllm", "body": ""}\nnot json\n')
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "replay", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and f"{bad}:2:" in proc.stderr


def test_a_line_from_a_clock_years_ahead_is_skipped_and_the_fault_still_found():
    """Offline, event time is bounded against the recording's own progression: before, the line 10 years
    ahead became its source's newest time and replay ignored every later line of it (no incident)."""
    from tailhound.agents.simulator.recording import snapshot_to_record
    from tests.factories import dcgm_snapshot

    t0 = SimConfig().start_ts

    def records():
        yield snapshot_to_record(dcgm_snapshot(t0 + 10 * 365 * 86_400.0, node="gpu-node-2"))
        for i in range(40):
            for node in ("gpu-node-1", "gpu-node-2"):
                hot = {3: (88.0, 1100.0)} if node == "gpu-node-2" and 5 <= i < 20 else None
                yield snapshot_to_record(dcgm_snapshot(t0 + 15 * i, node=node, hot=hot))

    from tailhound.streams.replay import replay_records

    result = replay_records(records(), load_rules(RULES))
    assert result.rejected == {"future_ts": 1} and result.redelivered == 0
    assert [(e.event, e.scope.node) for e in result.events if e.scope.node] == [
        ("opened", "gpu-node-2"),
        ("resolved", "gpu-node-2"),
    ]
    assert all(e.ts < t0 + 3600 for e in result.events)
