"""`tailhound simulate --record`: the simulated fleet as a scrape recording that replays to the same signals."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest
from typer.testing import CliRunner

from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import snapshot_to_record, write_recording
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.cli import app
from tailhound.recording import read_records
from tailhound.snapshot import Snapshot
from tailhound.streams.extract import extract

NODES, MINUTES = 2, 10


def gauges(snap: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in snap.samples if s.kind == "gauge"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(the simulator's snapshots, the recording's path, how many lines write_recording reported)."""
    path = tmp_path_factory.mktemp("rec") / "fleet.jsonl"
    n = write_recording(FleetSimulator(SimConfig(nodes=NODES)), MINUTES, path)
    expected = [s for _ts, snaps in FleetSimulator(SimConfig(nodes=NODES)).run(MINUTES * 60) for s in snaps]
    return expected, path, n


def test_one_line_per_snapshot_and_every_body_parses(recorded):
    expected, path, n = recorded
    records = list(read_records(path))
    cfg = SimConfig(nodes=NODES)
    assert n == len(records) == len(expected) == NODES * len(cfg.sources) * MINUTES * 60 / cfg.interval_s
    assert path.read_text(encoding="utf-8").count("\n") == n
    assert Counter(r.job for r in records) == Counter({src: n // len(cfg.sources) for src in cfg.sources})
    for rec, snap in zip(records, expected, strict=True):
        assert (rec.ts, rec.node, rec.job, rec.labels, rec.interval_s) == (
            snap.ts,
            snap.node,
            snap.source,
            snap.labels,
            snap.interval_s,
        )
        assert rec.error is None and rec.body
        samples = to_samples(parse_exposition(rec.body))
        assert len(samples) == len(snap.samples)


def test_lines_are_in_time_order_per_source(recorded):
    _, path, _ = recorded
    last: dict[tuple, float] = {}
    for rec in read_records(path):
        key = (rec.node, rec.job, tuple(sorted(rec.labels.items())))
        assert rec.ts > last.get(key, 0)
        last[key] = rec.ts


def test_replay_gives_the_simulator_gauges_and_counter_deltas(recorded):
    expected, path, _ = recorded
    builder = SnapshotBuilder()
    seen: set[tuple] = set()
    deltas = 0
    for rec, snap in zip(read_records(path), expected, strict=True):
        replayed = builder.build(rec)
        assert replayed.error is None and not replayed.gap
        assert gauges(replayed) == gauges(snap), f"{snap.node}/{snap.source} at {snap.ts}"
        kinds = Counter(s.kind for s in replayed.samples)
        assert kinds == Counter(s.kind for s in snap.samples)
        key = (rec.node, rec.job)
        counters = [s for s in replayed.samples if s.kind in ("counter", "histogram")]
        if key not in seen:
            assert replayed.prev_ts is None
            assert all(s.delta is None for s in counters)
            seen.add(key)
        else:
            assert replayed.prev_ts == rec.ts - rec.interval_s
            assert all(s.delta is not None for s in counters), f"{key}: a counter without delta"
            deltas += len(counters)
            for s in counters:
                if s.kind == "counter" and not s.reset:
                    assert s.delta >= 0
    assert deltas > 0
    assert len(seen) == NODES * len(SimConfig().sources)


def test_extract_gives_the_same_canonical_gauges(recorded):
    expected, path, _ = recorded
    builder = SnapshotBuilder()
    compared = Counter()
    for rec, snap in zip(read_records(path), expected, strict=True):
        replayed = builder.build(rec)
        simulated, got = extract(snap), extract(replayed)
        assert got == simulated, f"{snap.node}/{snap.source} at {snap.ts}"
        compared[snap.source] += bool(got)
    assert {"vllm", "dcgm", "node", "blackbox"} <= {src for src, n in compared.items() if n}


def test_snapshot_to_record_keeps_the_envelope():
    _ts, snaps = FleetSimulator(SimConfig(nodes=1, gpus_per_node=1)).step()
    rec = snapshot_to_record(snaps[0])
    assert rec.job == snaps[0].source and rec.node == "gpu-node-1" and rec.interval_s == 15.0
    assert rec.to_line().startswith('{"ts":')


def test_cli_simulate_record_needs_no_broker(tmp_path, monkeypatch):
    for key in [k for k in os.environ if k.startswith("TAILHOUND_")]:
        monkeypatch.delenv(key)
    out = tmp_path / "sub" / "out.jsonl"
    result = CliRunner().invoke(app, ["simulate", "--minutes", "2", "--nodes", "1", "--record", str(out)])
    assert result.exit_code == 0, result.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 * 60 // 15 * len(SimConfig().sources)
    assert f"wrote {len(lines)} records" in result.output
    assert {r.node for r in read_records(out)} == {"gpu-node-1"}


def test_cli_simulate_record_subprocess(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "simulate", "--minutes", "2", "--nodes", "1", "--record", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(list(read_records(out))) == 2 * 60 // 15 * len(SimConfig().sources)
