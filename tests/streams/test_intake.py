"""The worker's intake (tailhound.streams.intake): event time bounded by arrival, limits, rejections counted.

Item 1 of the hardening issue: one snapshot dated 10 years ahead made the worker drop that source's next
real snapshots as "redeliveries", and one from another source force-resolved an open incident "in the
future"; these tests run the worker's own per-message step (Gate, then SnapshotProcessor, as the
``evaluate`` agent does) without a broker.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.incident import IncidentEvent
from tailhound.snapshot import LIMITS, GaugeSample, Snapshot
from tailhound.streams.codec import Malformed, decode_snapshot
from tailhound.streams.evaluator import NodeState, heal_future
from tailhound.streams.intake import (
    FUTURE_TS,
    TOO_OLD,
    WRONG_KEY,
    Gate,
    Progression,
    Rejection,
    TimeBounds,
)
from tailhound.streams.intake_stats import IntakeStats, StatsCollector
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
TEN_YEARS = 10 * 365 * 86_400.0
HOT = {3: (88.0, 1100.0)}
LAG = 0.5  # arrival = event time + LAG: the real agents' clocks are right


class Worker:
    """The evaluate agent's step for one message, with an in-memory table."""

    def __init__(self, gate: Gate | None = None) -> None:
        self.gate = gate or Gate()
        self.processor = SnapshotProcessor(RULES)
        self.store = MemoryStateStore()
        self.events: list[IncidentEvent] = []
        self.rejected: list[Rejection] = []
        self.redelivered = 0

    def send(self, snap: Snapshot, arrival: float) -> None:
        value = self.gate.admit(snap.model_dump_json().encode(), snap.key(), arrival)
        if isinstance(value, Rejection):
            self.rejected.append(value)
            return
        r = self.processor.step(self.store.get(value.node), value, horizon=self.gate.bounds.horizon(arrival))
        self.redelivered += r.redelivered
        if r.changed:
            self.store[value.node] = r.state
        self.events += r.events


def node_snapshot(ts: float, node: str = "gpu-node-1") -> Snapshot:
    return Snapshot(ts=ts, node=node, source="node", interval_s=15, samples=[GaugeSample(name="node_load1", value=1.0)])


# --- item 1: a clock from the future -----------------------------------------------------------------------


def test_a_snapshot_ten_years_ahead_is_rejected_and_the_next_42_real_ones_all_count():
    w = Worker()
    w.send(dcgm_snapshot(T0 + TEN_YEARS), arrival=T0)
    for i in range(1, 43):
        w.send(dcgm_snapshot(T0 + 15 * i, hot=HOT), arrival=T0 + 15 * i + LAG)
    assert [r.kind for r in w.rejected] == [FUTURE_TS]
    assert "ahead of its arrival" in w.rejected[0].reason and "streams.max_future_skew_s" in w.rejected[0].reason
    assert w.redelivered == 0  # before: all 42 dropped as redeliveries, no incident
    assert [e.event for e in w.events] == ["opened"] and w.events[0].root_cause == "gpu-thermal-throttle"
    assert w.gate.stats.rejected == {FUTURE_TS: 1}
    assert max(w.store.get("gpu-node-1")["last_ts"].values()) == T0 + 15 * 42


def test_a_future_snapshot_of_another_source_does_not_resolve_an_open_incident():
    w = Worker()
    for i in range(12):
        w.send(dcgm_snapshot(T0 + 15 * i, hot=HOT), arrival=T0 + 15 * i + LAG)
    assert [e.event for e in w.events] == ["opened"]
    w.send(node_snapshot(T0 + 180 + TEN_YEARS), arrival=T0 + 180)  # another source on the node, clock 10 y ahead
    for i in range(12, 30):
        w.send(dcgm_snapshot(T0 + 15 * i, hot=HOT if i < 20 else None), arrival=T0 + 15 * i + LAG)
    assert [r.kind for r in w.rejected] == [FUTURE_TS]
    # before: resolved at T0 + 10 years, then the same fault opened a second incident
    assert [e.event for e in w.events] == ["opened", "resolved"]
    resolved = w.events[-1]
    assert resolved.incident_id == w.events[0].incident_id
    assert T0 + 20 * 15 <= resolved.resolved_at <= T0 + 30 * 15


def test_skew_within_the_bound_is_accepted_and_beyond_it_rejected():
    bounds = TimeBounds(max_future_skew_s=300)
    assert bounds.check(T0 + 299, arrival=T0) is None
    assert bounds.check(T0 - 86_400 * 365, arrival=T0) is None  # no bound into the past by default
    rejected = bounds.check(T0 + 301, arrival=T0)
    assert rejected is not None and rejected.kind == FUTURE_TS and rejected.stage == "time"


def test_max_age_bounds_against_when_the_message_was_sent_not_a_backlog():
    bounds = TimeBounds(max_future_skew_s=300, max_age_s=3600)
    # sent at T0 + 10 (on time), taken 2 h later (the worker was down): not too old
    assert bounds.check(T0, arrival=T0 + 7200, sent_at=T0 + 10) is None
    old = bounds.check(T0, arrival=T0 + 7200, sent_at=T0 + 7000)
    assert old is not None and old.kind == TOO_OLD
    # a message timestamp from the future cannot make an old snapshot look recent
    assert bounds.check(T0, arrival=T0 + 7200, sent_at=T0 + TEN_YEARS).kind == TOO_OLD
    assert bounds.check(T0, arrival=T0 + 7200).kind == TOO_OLD  # no message timestamp: the arrival


def test_a_state_poisoned_before_the_bound_is_healed_when_it_is_read():
    """A changelog written before event time was bounded survives a restart: the state is healed when it
    is decoded (times past the horizon are forgotten), so the real snapshots count again."""
    old = SnapshotProcessor(RULES)
    poisoned = None
    for i in range(12):
        r = old.step(poisoned, dcgm_snapshot(T0 + 15 * i, hot=HOT))
        poisoned = r.state if r.changed else poisoned
    r = old.step(poisoned, dcgm_snapshot(T0 + 180 + TEN_YEARS, hot=HOT))  # what the old worker stored
    poisoned = r.state
    assert [e.event for e in r.events] == []
    restarted = SnapshotProcessor(RULES)
    raw, events, redelivered = poisoned, [], 0
    for i in range(13, 40):
        ts = T0 + 15 * i
        r = restarted.step(raw, dcgm_snapshot(ts, hot=HOT if i < 25 else None), horizon=ts + 300)
        raw = r.state if r.changed else raw
        events += r.events
        redelivered += r.redelivered
    assert redelivered == 0
    assert [e.event for e in events] == ["resolved"]  # the incident opened before the restart resolves
    assert events[0].resolved_at <= T0 + 40 * 15  # at its real time


def test_heal_future_forgets_only_what_is_past_the_horizon():
    state = NodeState(
        node="n",
        last_ts={"dcgm": T0, "nvml": T0 + TEN_YEARS},
        persisted_at=T0 + TEN_YEARS,
        orphans={"resolved@gpu": T0 + TEN_YEARS, "rule-a": T0},
        history={"s|0": [[T0, 1.0], [T0 + TEN_YEARS, 2.0]], "s|1": [[T0 + TEN_YEARS, 1.0]]},
        rules={
            "r": {
                "pending": {"0": T0, "1": T0 + TEN_YEARS},
                "firing": {"2": {"since": T0, "last_true": T0 + TEN_YEARS}},
            }
        },
    )
    assert heal_future(state, T0 + 300)
    assert state.last_ts == {"dcgm": T0} and state.persisted_at == 0.0 and state.orphans == {"rule-a": T0}
    assert state.history == {"s|0": [[T0, 1.0]]}
    # entity times come back to the node's newest sane time: a firing entity keeps firing
    assert state.rules["r"].pending == {"0": T0, "1": T0}
    assert (state.rules["r"].firing["2"].since, state.rules["r"].firing["2"].last_true) == (T0, T0)
    assert not heal_future(state, T0 + 300)
    alone = NodeState(
        node="n",
        last_ts={"nvml": T0 + TEN_YEARS},
        rules={"r": {"firing": {"2": {"since": T0, "last_true": T0 + TEN_YEARS}}}},
    )
    assert heal_future(alone, T0 + 300) and alone.last_ts == {} and alone.rules == {}  # nothing sane: dropped


# --- offline: the recording's own progression ---------------------------------------------------------------


def _judge(times, skew=300.0):
    return [r.kind if r else None for _, r in Progression(TimeBounds(skew)).judge(times, float)]


def test_offline_a_lone_spike_is_rejected_but_steps_of_the_whole_recording_are_not():
    steady = [T0 + 15 * i for i in range(40)]
    spiked = steady[:20] + [T0 + TEN_YEARS] + steady[20:]
    assert _judge(spiked) == [None] * 20 + [FUTURE_TS] + [None] * 20
    jump = steady[:20] + [t + 86_400 for t in steady[20:]]  # recorder paused for a day
    assert _judge(jump) == [None] * 40
    back = steady + steady  # two files of the same hour replayed one after the other
    assert _judge(back) == [None] * 80
    by_source = steady + [t + 2 for t in steady]  # one source's lines, then another's (allowed by the format)
    assert _judge(by_source) == [None] * 80
    ahead = [t if i % 4 else t + TEN_YEARS for i, t in enumerate(steady)]  # a source whose clock is 10 y ahead
    assert _judge(ahead) == [FUTURE_TS if i % 4 == 0 else None for i in range(40)]
    burst = steady[:20] + [T0 + TEN_YEARS + i for i in range(3)] + steady[20:]  # a few in a row
    assert _judge(burst) == [None] * 20 + [FUTURE_TS] * 3 + [None] * 20
    assert _judge([T0 + TEN_YEARS, *steady]) == [FUTURE_TS] + [None] * 40  # first line
    assert _judge([*steady, T0 + TEN_YEARS, T0 + TEN_YEARS + 1]) == [None] * 40 + [FUTURE_TS] * 2  # last lines
    assert _judge([T0 + TEN_YEARS]) == [None]  # nothing to judge it against


# --- item 3: limits, non-finite values, counted by reason -------------------------------------------------


def _raw(**over) -> bytes:
    snap = dcgm_snapshot(T0, gpus=1).model_dump(mode="json")
    snap.update(over)
    return json.dumps(snap).encode()


def _sample(**over) -> dict:
    return {"kind": "gauge", "name": "g", "value": 1.0, "labels": {}, **over}


def _hist(**delta) -> dict:
    return {
        "kind": "histogram",
        "name": "h",
        "le": [0.1, 1.0],
        "counts": [1, 2],
        "count": 3,
        "sum": 1.5,
        "delta": {"counts": [1, 1], "count": 1, "sum": 0.5, **delta},
    }


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        (_raw(interval_s=math.inf), "non_finite"),
        (_raw(interval_s=math.nan), "non_finite"),
        (_raw(interval_s=LIMITS.max_interval_s * 10), "out_of_range"),
        (_raw(prev_ts=math.nan), "non_finite"),
        (_raw(prev_ts=math.inf), "non_finite"),
        (_raw(samples=[_hist(counts=[math.nan, 1])]), "non_finite"),
        (_raw(samples=[_hist(counts=[-5, 1])]), "out_of_range"),
        (_raw(samples=[{"kind": "counter", "name": "c", "value": 5, "delta": math.nan}]), "non_finite"),
        (_raw(samples=[{"kind": "counter", "name": "c", "value": 5, "delta": -1}]), "out_of_range"),
        (_raw(samples=[_sample(labels={f"l{i}": "v" for i in range(LIMITS.max_labels + 1)})]), "too_many_labels"),
        (_raw(labels={f"l{i}": "v" for i in range(LIMITS.max_labels + 1)}), "too_many_labels"),
        (_raw(samples=[_sample(labels={"l" * (LIMITS.max_label_name + 1): "v"})]), "label_too_long"),
        (_raw(samples=[_sample(labels={"gpu": "v" * (LIMITS.max_label_value + 1)})]), "label_too_long"),
        (
            json.dumps(
                {
                    "ts": T0,
                    "node": "gpu-node-1",
                    "source": "dcgm",
                    "samples": [{"kind": "gauge", "name": "g", "value": 1}] * (LIMITS.max_samples + 1),
                },
                separators=(",", ":"),
            ).encode(),
            "too_many_samples",
        ),
        (
            _raw(
                samples=[
                    {
                        "kind": "histogram",
                        "name": "h",
                        "le": list(range(1, LIMITS.max_buckets + 2)),
                        "counts": [0] * (LIMITS.max_buckets + 1),
                        "count": 0,
                        "sum": 0,
                    }
                ]
            ),
            "too_many_buckets",
        ),
        (b"\xff\xfe\x00 binary", "not_utf8"),
        (b"{not json", "bad_json"),
        (b"", "empty"),
        (_raw(ts="soon"), "invalid"),
    ],
)
def test_every_rejection_has_a_countable_kind(raw, kind):
    out = decode_snapshot(raw)
    assert isinstance(out, Malformed), raw[:80]
    assert out.kind == kind, out.reason
    stats = IntakeStats()
    assert Gate(stats=stats).admit(raw, b"gpu-node-1", arrival=T0).kind == kind
    assert stats.rejected == {kind: 1}


def test_a_message_over_the_size_limit_is_not_decoded():
    big = _raw(error="x" * 2_000_000)
    out = decode_snapshot(big, max_bytes=1_000_000)
    assert isinstance(out, Malformed) and out.kind == "oversized" and out.stage == "limits"
    assert f"{len(big)} bytes" in out.reason and "streams.max_message_bytes" in out.reason
    assert isinstance(decode_snapshot(big, max_bytes=None), Snapshot)


def test_a_real_8_gpu_dcgm_exporter_snapshot_is_far_within_the_limits():
    sim = FleetSimulator(SimConfig(nodes=1, dcgm_fields="all", nvlink_per_link=True))
    sim.step()
    _, snaps = sim.step()
    for snap in snaps:
        raw = snap.model_dump_json().encode()
        assert isinstance(decode_snapshot(raw), Snapshot), snap.source
        assert len(raw) * 10 < LIMITS.max_message_bytes and len(snap.samples) * 10 < LIMITS.max_samples
    dcgm = next(s for s in snaps if s.source == "dcgm")
    assert len(dcgm.model_dump_json()) > 30_000  # the ~34 KB the limits were sized against (and more)


def test_a_message_keyed_by_another_node_is_rejected_with_a_bounded_reason():
    raw = dcgm_snapshot(T0, node="gpu-node-1").model_dump_json().encode()
    out = Gate().admit(raw, b"k" * 100_000, arrival=T0)
    assert isinstance(out, Rejection) and out.kind == WRONG_KEY and len(out.reason) < 400


def test_counts_are_exported_as_prometheus_counters():
    stats = IntakeStats()
    stats.accepted, stats.redelivered, stats.nodes_expired = 5, 2, 1
    stats.reject(FUTURE_TS)
    stats.reject(FUTURE_TS)
    stats.reject("oversized")
    registry = CollectorRegistry()
    registry.register(StatsCollector(stats))
    assert registry.get_sample_value("tailhound_telemetry_rejected_total", {"reason": "future_ts"}) == 2
    assert registry.get_sample_value("tailhound_telemetry_rejected_total", {"reason": "oversized"}) == 1
    assert registry.get_sample_value("tailhound_telemetry_accepted_total") == 5
    assert registry.get_sample_value("tailhound_telemetry_redelivered_total") == 2
    assert registry.get_sample_value("tailhound_nodes_expired_total") == 1
    assert "future_ts=2" in stats.describe() and "oversized=1" in stats.describe()


def test_a_bundle_is_admitted_as_its_snapshots_or_rejected_whole():
    from tailhound.snapshot import bundle_bytes

    def part(ts: float, node: str = "gpu-node-1") -> bytes:
        return (
            Snapshot(ts=ts, node=node, source="dcgm", samples=[GaugeSample(name="g", value=1.0)])
            .model_dump_json(exclude_none=True)
            .encode()
        )

    stats = IntakeStats()
    gate = Gate(stats=stats)
    parts = gate.admit_all(bundle_bytes("gpu-node-1", [part(T0), part(T0 + 1)]), b"gpu-node-1", arrival=T0)
    assert [s.ts for s in parts] == [T0, T0 + 1]
    assert [s.ts for s in gate.admit_all(part(T0), b"gpu-node-1", arrival=T0)] == [T0]  # version 1 as before
    wrong_key = gate.admit_all(bundle_bytes("gpu-node-1", [part(T0)]), b"gpu-node-2", arrival=T0)
    assert wrong_key.kind == "wrong_key"
    ahead = gate.admit_all(
        bundle_bytes("gpu-node-1", [part(T0), part(T0 + 10 * 365 * 86400)]), b"gpu-node-1", arrival=T0
    )
    assert ahead.kind == "future_ts"
    assert stats.as_dict()["rejected"] == {"future_ts": 1, "wrong_key": 1}
