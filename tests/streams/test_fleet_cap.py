"""Bounded fleet state: the least recently seen names go first, one-shot names before those that keep sending,
evictions are counted by kind and logged at most once a minute, an evicted node starts fresh."""

from __future__ import annotations

import logging
from pathlib import Path

from tailhound.streams.fleet_cap import MODEL, MODEL_NODE, NODE, EvictionLog, RecentNames
from tailhound.streams.intake_stats import IntakeStats, StatsCollector
from tailhound.streams.model_aggregator import ModelAggregator
from tailhound.streams.model_stage import ROSTER_PREFIX, ModelStage, split_rules
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot
from tests.hostile.test_pills_state import engine

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {5: (90.0, 1000.0)}


def test_under_the_cap_nothing_is_evicted():
    names = RecentNames(3)
    assert [names.touch(n) for n in "abc"] == [[], [], []] and len(names) == 3


def test_over_the_cap_the_least_recently_arrived_goes():
    names = RecentNames(2)
    names.touch("a"), names.touch("b"), names.touch("a"), names.touch("b")  # both kept (seen twice)
    names.touch("a")
    assert names.touch("c") == ["b"]  # b arrived before a's last snapshot
    assert "b" not in names and len(names) == 2


def test_one_shot_names_are_evicted_before_the_nodes_that_keep_sending():
    names = RecentNames(10)
    for _ in range(2):
        names.touch("real")
    evicted = [e for i in range(1000) for e in names.touch(f"fake-{i}")]
    assert len(evicted) == 991 and "real" not in evicted and "real" in names and len(names) == 10


def test_without_a_flood_the_longest_silent_kept_node_yields_to_a_new_one():
    names = RecentNames(8)
    for n in [f"n{i}" for i in range(8)] * 2:
        names.touch(n)
    assert names.touch("joins") == ["n0"]


def test_eviction_is_per_partition_and_never_the_arriving_name():
    names = RecentNames(2)
    names.touch("a", 0), names.touch("b", 1)
    assert names.touch("c", 1) == ["b"]  # a is older, but of another partition (its changelog is not written now)
    assert names.touch("d", 2) == []  # nothing else on partition 2: over the cap until 0 or 1 take a message
    assert len(names) == 3 and names.touch("e", 0) == ["a"]


def test_adopted_names_count_as_older_than_those_seen_since():
    names = RecentNames(3)
    names.touch("new", 0)
    names.touch("new", 0)
    names.adopt(["old-1", "old-2"], 0)
    assert names.touch("x", 0) == ["old-1"]
    names.forget_partitions({0})
    assert len(names) == 0


def test_no_cap():
    names = RecentNames(None)
    assert all(names.touch(str(i)) == [] for i in range(100))


def test_evictions_are_counted_by_kind_and_logged_once_a_minute(caplog):
    now = [0.0]
    ev = EvictionLog(clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="tailhound.streams.fleet_cap"):
        for i in range(500):
            ev.evicted(NODE, f"n{i}", 100)
        now[0] = 61.0
        ev.evicted(MODEL, "m", 5)
    assert ev.total == {NODE: 500, MODEL: 1}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "499 node (last 'n499')" in lines[1] and "1 model" in lines[1]


def test_the_eviction_counter_has_a_kind_label():
    stats = IntakeStats()
    stats.evictions.evicted(MODEL_NODE, "n", 1)
    fams = {f.name: f for f in StatsCollector(stats).collect()}
    got = {s.labels["kind"]: s.value for s in fams["tailhound_state_evicted"].samples if s.name.endswith("_total")}
    assert got == {NODE: 0, MODEL: 0, MODEL_NODE: 1}


def _run(p: SnapshotProcessor, store: MemoryStateStore, snap) -> list:
    """What the worker's agent does per snapshot: admit (evict over the cap), then step."""
    events = []
    for gone in p.admit(snap.node, 0):
        events += p.evict(gone, store.get(gone), snap.ts)
        del store[gone]
    r = p.step(store.get(snap.node), snap)
    if r.changed:
        store[snap.node] = r.state
    return events + r.events


def test_an_evicted_node_with_an_open_incident_resolves_it_and_comes_back_fresh():
    p, store = SnapshotProcessor(RULES, max_nodes=4), MemoryStateStore()
    events = [e for i in range(12) for e in _run(p, store, dcgm_snapshot(T0 + 15 * i, "sick", hot=HOT))]
    opened = [e for e in events if e.event == "opened"]
    assert opened and opened[0].scope.node == "sick"
    t, gone = T0 + 15 * 12, []
    for i in range(20):  # four other nodes keep sending, the sick one went silent: it is the least recently seen
        for n in "abcd":
            gone += [e for e in _run(p, store, dcgm_snapshot(t + 15 * i, n)) if e.event == "resolved"]
        if gone:
            break
    assert [e.incident_id for e in gone] == [opened[0].incident_id] and "node gone" in gone[0].summary
    assert store.get("sick") is None and len(p) <= 4 and len(store) <= 4
    r = p.step(store.get("sick"), dcgm_snapshot(t + 400, "sick"))
    assert r.changed and list(r.state["last_ts"]) == ["dcgm"] and not r.state["incidents"]  # fresh


def test_the_nodes_kept_are_diagnosed_as_without_a_cap():
    def run(cap):
        p, store = SnapshotProcessor(RULES, max_nodes=cap), MemoryStateStore()
        out = []
        for i in range(20):
            out += [(e.incident_id, e.event) for e in _run(p, store, dcgm_snapshot(T0 + 15 * i, "keep", hot=HOT))]
            for j in range(5 if i else 0):  # one-shot names between its snapshots, once it sent twice
                _run(p, store, dcgm_snapshot(T0 + 15 * i + 1, f"fake-{i}-{j}"))
        return out, len(store)

    capped, held = run(4)
    assert capped == run(None)[0] and capped and held <= 4


def test_the_model_stage_evicts_the_least_recent_model_and_its_stored_state():
    _, model_rules = split_rules(RULES)
    stage, store = ModelStage(model_rules, max_models=2), MemoryStateStore()
    told = []
    stage.on_evict = lambda kind, name: told.append((kind, name))
    for i in range(40):  # enough buckets closed for every model to store its roster
        for m in ("m-a", "m-b"):
            stage.add(m, engine(T0 + 15 * i, m), store=store)
    assert store.get(ROSTER_PREFIX + "m-a") is not None
    stage.add("m-c", engine(T0 + 600, "m-c"), store=store)
    assert told == [(MODEL, "m-a")] and set(stage.aggregators) == {"m-b", "m-c"}
    assert store.get(ROSTER_PREFIX + "m-a") is None and store.get("model:m-a") is None


def test_an_aggregator_tracks_at_most_max_nodes_nodes():
    told = []
    agg = ModelAggregator("m", max_nodes=3, on_evict=lambda kind, name: told.append((kind, name)))
    for i in range(10):
        agg.add(engine(T0, "m", node=f"n{i}"))
    agg.add(engine(T0 + 1, "m", node="n7"))
    agg.add(engine(T0 + 1, "m", node="n10"))
    assert list(agg.node_ts) == ["n9", "n7", "n10"] and len(agg.node_causes) == 3
    assert told[0] == (MODEL_NODE, "n0") and len(told) == 8


def test_real_nodes_that_join_together_get_in_instead_of_evicting_each_other():
    names = RecentNames(4)
    for n in ["old"] * 2:
        names.touch(n)
    for _ in range(3):  # four nodes join a full worker, each sending every interval
        for n in "abcd":
            names.touch(n)
    assert sorted(n for n in "abcd" if n in names) == ["a", "b", "c", "d"] and "old" not in names
