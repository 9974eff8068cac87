"""The remote-write path gives the streams side the agent's snapshots, and so the agent path's incidents.

A simulated fleet with faults is recorded; the agent path builds its snapshots from the records (as
``tailhound replay`` does); the remote-write path gets the same scrapes the way a Prometheus that scraped
those targets would send them (every series with its target labels, one request per collection round, stale
markers, ``up 0`` for failed scrapes) and groups them back. Both streams of snapshots are replayed through
the evaluation core that the worker runs (tests/integration/test_replay_matches_worker.py shows the worker
and replay agree).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailhound.agents.pipeline import SnapshotBuilder
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.incident import IncidentEvent
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.snapshot import Snapshot
from tailhound.streams.replay import replay_records, replay_snapshots
from tailhound.streams.ruleset import load_rules
from tests.ingest.prometheus_view import HEADERS, PrometheusView, ticks

RULES = Path(__file__).resolve().parents[2] / "rules"
#: (minutes, faults, nodes with incidents, incidents): those of tests/integration/test_replay_matches_worker.py
SCENARIOS = {
    "thermal": (30, ["thermal-throttle@8m+10m:node=gpu-node-2:gpus=3,5",
                     "thermal-throttle@12m+6m:node=gpu-node-3:gpus=0"], {"gpu-node-2", "gpu-node-3"}, 1),
    "kv+network": (34, ["kv-cache-pressure@24m+8m:node=gpu-node-1", "network-path-degradation@24m+8m:node=gpu-node-3"],
                   {"gpu-node-1", "gpu-node-3"}, 2),
    "surge": (30, ["traffic-surge@22m+6m"], {"gpu-node-1", "gpu-node-2", "gpu-node-3"}, 1),
}


def recording(name: str) -> list:
    minutes, faults, _nodes, _n = SCENARIOS[name]
    sim = FleetSimulator(SimConfig(nodes=3, seed=5), [FaultSpec.parse(f) for f in faults])
    # a few failed scrapes (gaps), as a live fleet has them
    return [r.model_copy(update={"error": "HTTP 503", "body": ""}) if i % 97 == 50 else r
            for i, r in enumerate(iter_records(sim, minutes))]


def ingest_config(records: list) -> IngestConfig:
    """Node from the `node` target label, the records' labels back as the snapshots' labels."""
    common = tuple(sorted({k for r in records for k in r.labels}))
    intervals = {r.job: r.interval_s for r in records if r.interval_s}
    return IngestConfig(grouping={"node_labels": ("node",), "common_labels": common,
                                  "drop_labels": ("instance", "node"), "interval_s": intervals})


def through_remote_write(records: list) -> tuple[list[Snapshot], RemoteWriteIngest]:
    ingest = RemoteWriteIngest(ingest_config(records))
    prometheus = PrometheusView()
    out: list[Snapshot] = []
    first = {(r.node, r.job): r for r in reversed(records)}.values()  # one scrape of each target
    assert ingest.accept(prometheus.metadata_request(first), HEADERS, now=records[0].ts - 1).status == 204
    for ts, batch in ticks(records):
        result = ingest.accept(prometheus.request(batch), HEADERS, now=ts)
        assert result.status == 204 and result.rejects == [], result
        out += result.snapshots
    out += ingest.close().snapshots
    return out, ingest


def key(s: Snapshot) -> tuple:
    return s.node, s.source, s.ts


def normal(s: Snapshot) -> dict:
    d = s.model_dump()
    for x in d["samples"]:  # a sample label with the value of the snapshot's label says nothing more
        x["labels"] = {k: v for k, v in x["labels"].items() if s.labels.get(k) != v}
    d["samples"].sort(key=lambda x: (x["name"], sorted(x["labels"].items())))
    if d["error"] is not None:  # Prometheus does not send why a scrape failed, only up 0
        d["error"] = "failed"
    return d


def outcome(events: list[IncidentEvent]) -> list[tuple]:
    """Per incident: its first event, and how it ended."""
    by_id: dict[str, list[IncidentEvent]] = {}
    for e in sorted(events, key=lambda e: (e.incident_id, e.sequence)):
        by_id.setdefault(e.incident_id, []).append(e)
    return sorted((json.dumps(evs[0].model_dump(mode="json"), sort_keys=True), evs[-1].event, evs[-1].root_cause,
                   evs[-1].scope.model_dump_json()) for evs in by_id.values())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_remote_write_gives_the_agents_snapshots_and_incidents(name):
    records = recording(name)
    assert any(r.error for r in records)  # failed scrapes travel as up 0 + stale markers
    builder = SnapshotBuilder()
    agent = sorted((builder.build(r) for r in records), key=key)
    ingested, ingest = through_remote_write(records)
    assert ingest.stats.get("late_samples", 0) == 0 and ingest.grouper.open_scrapes == 0
    assert len(ingested) == len(agent)
    # the same snapshots; samples in another order (a page's order is not in remote write: series come sorted)
    assert [normal(s) for s in sorted(ingested, key=key)] == [normal(s) for s in agent]

    rules = load_rules(RULES)
    offline = replay_records(records, rules).events
    remote = replay_snapshots(ingested, rules).events
    _minutes, _faults, nodes, incidents = SCENARIOS[name]
    covered = {n for e in remote for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
    assert covered == nodes and sum(e.event == "opened" for e in remote) == incidents
    assert outcome(remote) == outcome(offline)
