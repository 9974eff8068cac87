"""The remote-write and federation paths give the streams side the agent's snapshots, and so the agent path's
incidents.

A simulated fleet with faults is recorded; the agent path builds its snapshots from the records (as
``tailhound replay`` does); the remote-write path gets the same scrapes the way a Prometheus that scraped
those targets would send them (every series with its target labels, one request per collection round, stale
markers, ``up 0`` for failed scrapes) and groups them back. The federation path pulls, once per collection
round, what that Prometheus' ``/federate`` would answer the puller's ``match[]``: the latest scrape of every
target, ``up 0`` alone for a target whose last scrape failed (its other series are stale, and /federate
leaves stale series out). All streams of snapshots are replayed through the evaluation core that the worker
runs (tests/integration/test_replay_matches_worker.py shows the worker and replay agree).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.incident import IncidentEvent
from tailhound.ingest.federation import FederationConfig, FederationPuller, source_metrics
from tailhound.ingest.receiver import IngestConfig, RemoteWriteIngest
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import Snapshot
from tailhound.streams.replay import replay_records, replay_snapshots
from tailhound.streams.ruleset.rulefile import load_rules
from tests.ingest.prometheus_view import HEADERS, PrometheusView, federate_page, ticks

RULES = Path(__file__).resolve().parents[2] / "rules"
CATALOG = default_catalog()
#: (minutes, faults, nodes with incidents, incidents): those of tests/integration/test_replay_matches_worker.py
SCENARIOS = {
    "thermal": (
        30,
        ["thermal-throttle@8m+10m:node=gpu-node-2:gpus=3,5", "thermal-throttle@12m+6m:node=gpu-node-3:gpus=0"],
        {"gpu-node-2", "gpu-node-3"},
        1,
    ),
    "kv+network": (
        34,
        ["kv-cache-pressure@24m+8m:node=gpu-node-1", "network-path-degradation@24m+8m:node=gpu-node-3"],
        {"gpu-node-1", "gpu-node-3"},
        2,
    ),
    "surge": (30, ["traffic-surge@22m+6m"], {"gpu-node-1", "gpu-node-2", "gpu-node-3"}, 1),
}

#: CI runs two (GPU gauges and the node stage; the model stage and the roll-up); kv+network, whose worker path
#: tests/integration/test_replay_matches_worker.py runs, joins them with TAILHOUND_LONG_DRILLS=1 pytest tests/ingest
LONG = os.environ.get("TAILHOUND_LONG_DRILLS", "") not in ("", "0", "false")
CI_SCENARIOS = sorted(SCENARIOS) if LONG else ["surge", "thermal"]


@functools.cache
def recording(name: str) -> tuple:
    """The scenario's records (shared by the tests: read them, never change them)."""
    minutes, faults, _nodes, _n = SCENARIOS[name]
    sim = FleetSimulator(SimConfig(nodes=3, seed=5), [FaultSpec.parse(f) for f in faults])
    # a few failed scrapes (gaps), as a live fleet has them
    return tuple(
        r.model_copy(update={"error": "HTTP 503", "body": ""}) if i % 97 == 50 else r
        for i, r in enumerate(iter_records(sim, minutes))
    )


@functools.cache
def rules():
    return load_rules(RULES)


@functools.cache
def agent_path(name: str) -> tuple[list[Snapshot], list[IncidentEvent]]:
    """The agent path: the snapshots ``tailhound replay`` builds from the records (in `key` order), and the
    incident events of the replay."""
    records = recording(name)
    builder = SnapshotBuilder()
    snapshots = sorted((builder.build(r) for r in records), key=key)
    return snapshots, replay_records(list(records), rules()).events


def ingest_config(records: list) -> IngestConfig:
    """Node from the `node` target label, the records' labels back as the snapshots' labels."""
    common = tuple(sorted({k for r in records for k in r.labels}))
    intervals = {r.job: r.interval_s for r in records if r.interval_s}
    return IngestConfig(
        grouping={
            "node_labels": ("node",),
            "common_labels": common,
            "drop_labels": ("instance", "node"),
            "interval_s": intervals,
        }
    )


def through_remote_write(records: tuple) -> tuple[list[Snapshot], RemoteWriteIngest]:
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


def through_federation(records: tuple) -> tuple[list[Snapshot], FederationPuller]:
    """One pull per collection round, right after it: /federate shows each series' latest sample, so a page
    holds the latest scrape of every target seen so far (a target not scraped since the last pull is there
    again, with the same timestamps), as the puller's match[] selects it."""
    grouping = ingest_config(records).grouping.model_copy(update={"close_on_newer": True})
    puller = FederationPuller(FederationConfig(url="http://127.0.0.1:9/", interval_s=15, grouping=grouping))
    latest: dict[tuple, ScrapeRecord] = {}
    out: list[Snapshot] = []
    for ts, batch in ticks(records):
        for rec in batch:
            latest[rec.node, rec.job, tuple(sorted(rec.labels.items()))] = rec
        emitted = puller.ingest(federate_page(latest.values(), puller.selectors), now=ts + 1)
        assert emitted.rejects == [], emitted.rejects
        out += emitted.snapshots
    return out, puller


def selected_samples(s: Snapshot) -> Snapshot:
    """`s` with the samples federation pulls: the catalog's metrics of its source (match[] is derived from the
    catalog, so a /federate answer holds nothing else; the agent keeps every sample of a page)."""
    names = source_metrics(CATALOG, s.source)
    return s.model_copy(update={"samples": [x for x in s.samples if x.name in names]})


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
    return sorted(
        (
            json.dumps(evs[0].model_dump(mode="json"), sort_keys=True),
            evs[-1].event,
            evs[-1].root_cause,
            evs[-1].scope.model_dump_json(),
        )
        for evs in by_id.values()
    )


@pytest.mark.parametrize("name", CI_SCENARIOS)
def test_remote_write_gives_the_agents_snapshots_and_incidents(name):
    records = recording(name)
    assert any(r.error for r in records)  # failed scrapes travel as up 0 + stale markers
    agent, offline = agent_path(name)
    ingested, ingest = through_remote_write(records)
    assert ingest.stats.get("late_samples", 0) == 0 and ingest.grouper.open_scrapes == 0
    assert len(ingested) == len(agent)
    # the same snapshots; samples in another order (a page's order is not in remote write: series come sorted)
    assert [normal(s) for s in sorted(ingested, key=key)] == [normal(s) for s in agent]

    remote = replay_snapshots(ingested, rules()).events
    _minutes, _faults, nodes, incidents = SCENARIOS[name]
    covered = {n for e in remote for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
    assert covered == nodes and sum(e.event == "opened" for e in remote) == incidents
    assert outcome(remote) == outcome(offline)


def incidents(events: list[IncidentEvent]) -> list[tuple]:
    """Per incident: its root cause and the scope it ended with (not when it opened or resolved)."""
    last: dict[str, IncidentEvent] = {}
    for e in sorted(events, key=lambda e: (e.incident_id, e.sequence)):
        last[e.incident_id] = e
    return sorted((e.root_cause, e.scope.model_dump_json()) for e in last.values())


@pytest.mark.parametrize("name", CI_SCENARIOS)
def test_federation_gives_the_agents_snapshots_of_the_catalogs_metrics_and_the_same_incidents(name):
    records = recording(name)
    agent, offline = agent_path(name)
    pulled, puller = through_federation(records)
    assert puller.grouper.stats.get("late_samples", 0) == 0 and puller.grouper.open_scrapes == 0
    assert puller.stats["snapshots"] == len(pulled) == len(agent)
    # a failed scrape: /federate shows `up 0` with the scrape's timestamp and none of the target's other series
    # (stale): a gap snapshot, as the agent's (only why it failed is not told)
    failed = [s for s in pulled if s.error is not None]
    assert failed and len(failed) == sum(r.error is not None for r in records)
    assert all(s.gap and s.samples == [] for s in failed)
    # the samples: federation pulls what match[] selects, the catalog's metrics (the agent keeps every sample of
    # the page); those it has are the agent's, with the same kinds, deltas, resets and gaps
    expected = [selected_samples(s) for s in agent]
    assert sum(len(s.samples) for s in expected) < sum(len(s.samples) for s in agent)
    assert [normal(s) for s in sorted(pulled, key=key)] == [normal(s) for s in expected]

    # the order: a pull hands out one collection round at once, in /federate's order (series sorted by name:
    # every node's dcgm, node, blackbox, then vllm), where a node's agent sends its vllm snapshot first. In the
    # agents' order, the incidents are the agent path's, event for event
    at = {(r.node, r.job, r.ts): i for i, r in enumerate(records)}
    assert [s.source for s in pulled[:12]] != [r.job for r in records[:12]]
    in_agents_order = sorted(pulled, key=lambda s: at[s.node, s.source, s.ts])
    events = replay_snapshots(in_agents_order, rules()).events
    _minutes, _faults, nodes, n_incidents = SCENARIOS[name]
    covered = {n for e in events for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
    assert covered == nodes and sum(e.event == "opened" for e in events) == n_incidents
    assert outcome(events) == outcome(offline)
    # in the pulls' order: the same incidents (root cause, nodes, scope), but the evaluation core takes a node's
    # snapshots of one collection time in arrival order, so an incident may open or resolve a round apart (and
    # on another of the nodes it spans: surge)
    events = replay_snapshots(pulled, rules()).events
    covered = {n for e in events for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
    assert covered == nodes and sum(e.event == "opened" for e in events) == n_incidents
    assert incidents(events) == incidents(offline)
