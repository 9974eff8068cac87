"""Node expiry (item 3 of the hardening issue): per-node state (~6 KB) was never evicted, so a fleet that
churns grew the worker's memory forever. A node silent for node_expiry_s of its partition's event time is
expired: its open incidents resolve with a "node gone" event and its state is deleted."""

from __future__ import annotations

from pathlib import Path

from tailhound.agents.simulator.recording import snapshot_to_record
from tailhound.streams.intake import NodeExpiry
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.replay import replay_records
from tailhound.streams.resolutions import NODE_GONE, RESOLUTION_LABEL
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {3: (88.0, 1100.0)}
HOUR = 3600.0


class Partition:
    """The evaluate agent's loop on one partition: step, store, and look for silent nodes when due."""

    def __init__(self, expiry_s: float = HOUR, partition: int = 0) -> None:
        self.processor = SnapshotProcessor(RULES)
        self.store = MemoryStateStore()
        self.expiry = NodeExpiry(expiry_s)
        self.expiry_s = expiry_s
        self.partition = partition
        self.events: list = []
        self.expired: list[str] = []

    def send(self, snap) -> None:
        r = self.processor.step(self.store.get(snap.node), snap, partition=self.partition)
        if r.changed:
            self.store[snap.node] = r.state
        self.events += r.events
        if self.expiry.tick(self.partition, snap.ts):
            now = self.expiry.clock(self.partition)
            for node, _seen in self.expiry.gone(self.partition, self.store.items()):
                gone = self.processor.expire(node, self.store.get(node), now, self.expiry_s)
                if gone is not None:
                    self.events += gone
                    del self.store[node]
                    self.expired.append(node)


def test_a_churning_fleet_does_not_grow_the_state():
    """500 nodes, each alive for 10 minutes, 20 at a time, over ~4 hours: before, 500 states stayed."""
    p = Partition()
    held = []
    for tick in range(1000):
        ts = T0 + 15 * tick
        first = tick // 40 * 20  # every 10 minutes the next 20 nodes take over
        for n in range(first, first + 20):
            p.send(dcgm_snapshot(ts, node=f"node-{n}", gpus=1))
        held.append(len(p.store))
    assert held[-1] <= 20 * 8  # what one hour (plus a check interval) of churn holds
    assert max(held) <= 20 * 8
    assert len(p.processor) <= 20 * 8  # and the processor's in-memory copies go with them
    assert len(p.expired) >= 500 - 20 * 8


def test_a_gone_node_resolves_its_incidents_with_a_node_gone_event():
    p = Partition()
    for i in range(20):  # gpu-node-2 opens a thermal incident, then stops sending
        p.send(dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=HOT))
    for i in range(20, 400):
        p.send(dcgm_snapshot(T0 + 15 * i, node="gpu-node-1"))
    assert [e.event for e in p.events] == ["opened", "resolved"]
    opened, resolved = p.events
    assert resolved.incident_id == opened.incident_id and resolved.sequence == 2
    assert resolved.labels[RESOLUTION_LABEL] == NODE_GONE
    assert resolved.summary.startswith("resolved (node gone: no telemetry from gpu-node-2 for 6")
    last_seen = T0 + 15 * 19
    assert last_seen + HOUR < resolved.resolved_at == resolved.ts <= last_seen + HOUR + 60 + 15
    assert p.expired == ["gpu-node-2"] and p.store.get("gpu-node-2") is None
    assert p.processor.open_causes("gpu-node-2") == ()


def test_a_node_that_comes_back_starts_afresh():
    p = Partition()
    p.send(dcgm_snapshot(T0, node="gpu-node-2"))
    for i in range(1, 300):
        p.send(dcgm_snapshot(T0 + 15 * i, node="gpu-node-1"))
    assert p.expired == ["gpu-node-2"]
    p.send(dcgm_snapshot(T0 + 15 * 300, node="gpu-node-2"))
    assert p.store.get("gpu-node-2")["last_ts"] == {"dcgm": T0 + 15 * 300}


def test_only_nodes_of_the_partition_are_looked_at():
    expiry = NodeExpiry(HOUR)
    assert not expiry.tick(1, T0)
    assert not expiry.tick(1, T0 + 30)
    assert expiry.tick(1, T0 + 60)  # every min(60 s, expiry / 4) of the partition's event time
    states = [
        ("a", {"partition": 1, "last_ts": {"dcgm": T0 - 2 * HOUR}}),
        ("b", {"partition": 0, "last_ts": {"dcgm": T0 - 2 * HOUR}}),
        ("c", {"partition": 1, "last_ts": {"dcgm": T0 - 2 * HOUR, "nvml": T0}}),
        ("d", {"last_ts": {"dcgm": T0 - 2 * HOUR}}),  # stored before states named their partition
        ("e", None),
    ]
    assert expiry.gone(1, states, partition_of=lambda node: 1 if node == "d" else 0) == [
        ("a", T0 - 2 * HOUR),
        ("d", T0 - 2 * HOUR),
    ]
    assert expiry.gone(0, states) == []  # partition 0 has no clock yet: nothing is judged
    off = NodeExpiry(0)
    assert not any(off.tick(0, T0 + 60 * i) for i in range(10))


def test_expire_leaves_a_node_the_cache_knows_is_alive():
    p = SnapshotProcessor(RULES)
    r = p.step(None, dcgm_snapshot(T0))
    stored = r.state
    for i in range(1, 300):  # quiet: the stored state is rewritten only every minute
        r = p.step(stored, dcgm_snapshot(T0 + 15 * i))
        stored = r.state if r.changed else stored
    assert p.expire("gpu-node-1", stored, T0 + 15 * 300, HOUR) is None


def test_replay_applies_the_same_expiry():
    def records():
        for i in range(20):
            yield snapshot_to_record(dcgm_snapshot(T0 + 15 * i, node="gpu-node-2", hot=HOT))
        for i in range(20, 400):
            yield snapshot_to_record(dcgm_snapshot(T0 + 15 * i, node="gpu-node-1"))

    result = replay_records(records(), RULES)
    assert [e.event for e in result.events] == ["opened", "resolved"]
    assert result.events[-1].labels.get(RESOLUTION_LABEL) == NODE_GONE
    assert result.nodes_expired == 1
    kept = replay_records(records(), RULES, node_expiry_s=0)  # 0: never
    assert [e.event for e in kept.events] == ["opened"] and kept.nodes_expired == 0
