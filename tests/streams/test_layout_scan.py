"""A version-3 snapshot scanned by its layout's plan gives what the sample-by-sample scan gives."""

from __future__ import annotations

import itertools

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog, parse_catalog
from tailhound.streams import layout_scan
from tailhound.streams.snapshot_scan import _scan, snapshot_values
from tailhound.wire.decoded import DecodedSnapshot
from tailhound.wire.v3 import LayoutMemory
from tailhound.wire.v3_decode import LayoutCache, decode_v3


def _decoded(nodes: int = 2, snapshots: int = 8 * 30) -> list[DecodedSnapshot]:
    sim = FleetSimulator(SimConfig(nodes=nodes), [FaultSpec.parse("thermal-throttle@2m+5m")])
    builder, memory, cache = SnapshotBuilder(), LayoutMemory(every_s=120), LayoutCache()
    out = []
    for record in itertools.islice(iter_records(sim, minutes=10**6), snapshots):
        snap = builder.build(record)
        parts = decode_v3(memory.encode(snap), cache)
        assert isinstance(parts, list)
        out.extend(parts)
    return out


def _same(catalog, snapshots) -> int:
    planned = 0
    for snap in snapshots:
        plans = catalog.memo.get("layout-plans", {})
        planned += isinstance(plans.get(id(snap.labels)), layout_scan.LayoutPlan)
        got, want = snapshot_values(snap, catalog), _scan(snap, catalog)
        assert got.values == want.values
        assert list(got.values) == list(want.values)  # the same order of signals
        assert [list(v) for v in got.values.values()] == [list(v) for v in want.values.values()]  # and entities
        assert got.histogram_deltas == want.histogram_deltas
        assert got.models == want.models
    return planned


def test_planned_scan_equals_the_sample_scan_on_a_fleet():
    snapshots = _decoded()
    assert _same(default_catalog(), snapshots) > len(snapshots) // 2  # most went by a plan


def test_label_dependent_mappings_and_a_plan_per_catalog():
    snapshots = _decoded(nodes=1, snapshots=8 * 10)
    other = parse_catalog(
        {
            "signals": {
                "probe.connect": {
                    "kind": "gauge",
                    "unit": "s",
                    "sources": {"blackbox": {"metric": "probe_http_duration_seconds", "match": {"phase": "connect"}}},
                },
            }
        }
    )
    assert _same(other, snapshots) > 0
    assert _same(default_catalog(), snapshots) > 0


def test_a_layout_seen_once_gets_no_plan_and_the_plans_are_bounded(monkeypatch):
    monkeypatch.setattr(layout_scan, "MAX_PLANS", 3)
    catalog = parse_catalog({"signals": {}})
    snapshots = _decoded(nodes=1, snapshots=8 * 4)
    _same(catalog, snapshots)
    assert len(catalog.memo["layout-plans"]) <= 3
    one = snapshots[0]
    fresh = DecodedSnapshot(ts=one.ts, node=one.node, source=one.source, labels=dict(one.labels), samples=one.samples)
    assert layout_scan.plan_of(fresh, catalog, lambda s: ((), (), (), ())) is None  # first sight
