"""The processor's storage policy: write on decisions or every PERSIST_EVERY_S, reuse decoded state."""

from __future__ import annotations

from pathlib import Path

from tailhound.streams.processor import PERSIST_EVERY_S, MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0


def test_writes_on_first_sight_on_decisions_and_every_minute():
    p, store = SnapshotProcessor(RULES), MemoryStateStore()
    writes = []
    for i in range(30):
        hot = {3: (88.0, 1100.0)} if 10 <= i < 14 else None  # pending for 4 ticks: a decision each time
        r = p.step(store.get("gpu-node-1"), dcgm_snapshot(T0 + 15 * i, hot=hot))
        if r.changed:
            store["gpu-node-1"] = r.state
            writes.append(i)
    assert writes[0] == 0
    assert {10, 14} <= set(writes)  # pending starts; pending cleared
    quiet = [w for w in writes if w > 14]
    assert all(b - a >= PERSIST_EVERY_S / 15 for a, b in zip([14, *quiet], quiet, strict=False))
    assert len(writes) < 15
    assert store.get("gpu-node-1")["version"] == len(writes)


def test_a_stored_state_from_elsewhere_is_decoded_not_the_cache():
    p, store = SnapshotProcessor(RULES), MemoryStateStore()
    r = p.step(None, dcgm_snapshot(T0))
    store["gpu-node-1"] = r.state
    foreign = dict(r.state, version=r.state["version"] + 5, last_ts={"dcgm": T0 + 1000})  # another worker moved on
    r2 = p.step(foreign, dcgm_snapshot(T0 + 15))
    assert r2.events == [] and not r2.changed  # older than what the stored state has seen: ignored


def test_a_restart_before_every_snapshot_keeps_the_incident_lifecycle():
    hot = {5: (90.0, 1000.0)}
    snaps = [dcgm_snapshot(T0 + 15 * i, hot=hot if 5 <= i < 25 else None) for i in range(40)]
    cached, store = SnapshotProcessor(RULES), MemoryStateStore()
    events_cached = []
    for s in snaps:
        r = cached.step(store.get(s.node), s)
        if r.changed:
            store[s.node] = r.state
        events_cached += r.events
    events_fresh, raw = [], None
    for s in snaps:  # a new processor every time: always decodes what was stored
        r = SnapshotProcessor(RULES).step(raw, s)
        raw = r.state if r.changed else raw
        events_fresh += r.events
    assert [(e.event, e.sequence) for e in events_cached] == [("opened", 1), ("resolved", 2)]

    # a restart before every snapshot keeps the lifecycle exact (decisions are always stored); only
    # what is written every minute (evidence of the last tick, windows, baselines) may lag
    def lifecycle(events):
        return [(e.incident_id, e.event, e.sequence, e.ts, e.root_cause, e.scope) for e in events]

    assert lifecycle(events_fresh) == lifecycle(events_cached)
