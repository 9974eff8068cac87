"""One snapshot dated inside the skew bound cannot move its source's event time: the +290 s attack."""

from __future__ import annotations

from pathlib import Path

from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {5: (90.0, 1000.0)}


def run(snapshots, arrivals):
    """The worker's step over `snapshots` taken at `arrivals` (wall clock): incidents, and the step results."""
    p, store = SnapshotProcessor(RULES, max_jump_s=30.0), MemoryStateStore()
    events, results = [], []
    for snap, arrival in zip(snapshots, arrivals, strict=True):
        r = p.step(store.get(snap.node), snap, horizon=arrival + 300.0, arrival=arrival)
        if r.changed:
            store[snap.node] = r.state
        events += r.events
        results.append(r)
    return events, results


def lifecycle(events):
    return [(e.event, e.root_cause, e.ts, e.scope.describe()) for e in events]


def live(n: int):
    """A live node (snapshots arrive when they are taken) whose GPU 5 overheats from the 5th snapshot on."""
    return [dcgm_snapshot(T0 + 15 * i, hot=HOT if i >= 5 else None) for i in range(n)]


def test_one_snapshot_290_s_ahead_leaves_the_victims_diagnosis_unchanged():
    real = live(20)
    clean, _ = run(real, [s.ts for s in real])
    assert [e[:2] for e in lifecycle(clean)][0] == ("opened", "gpu-thermal-throttle")
    spike = dcgm_snapshot(T0 + 15 * 2 + 290.0)  # forged: cool GPUs, dated +290 s (inside the 300 s skew)
    attacked = [*real[:3], spike, *real[3:]]
    arrivals = [s.ts for s in real[:3]] + [T0 + 15 * 2] + [s.ts for s in real[3:]]
    events, results = run(attacked, arrivals)
    assert lifecycle(events) == lifecycle(clean)
    assert not any(r.redelivered for r in results)  # no real snapshot is taken for a redelivery
    assert results[3].held and [s.ts for s in results[4].discarded] == [spike.ts]


def test_a_spike_every_five_minutes_never_blinds_the_node():
    real = live(60)
    snaps, arrivals = [], []
    for i, s in enumerate(real):
        snaps.append(s)
        arrivals.append(s.ts)
        if i % 20 == 1:
            snaps.append(dcgm_snapshot(s.ts + 290.0))
            arrivals.append(s.ts)
    clean, _ = run(real, [s.ts for s in real])
    events, results = run(snaps, arrivals)
    assert lifecycle(events) == lifecycle(clean)
    assert sum(len(r.discarded) for r in results) == 3 and not any(r.redelivered for r in results)


def test_a_clock_stepped_forward_is_confirmed_by_the_next_snapshots_and_evaluated_whole():
    before = [dcgm_snapshot(T0 + 15 * i) for i in range(4)]
    after = [dcgm_snapshot(T0 + 45 + 120 + 15 * i, hot=HOT) for i in range(1, 12)]  # the agent's clock +120 s
    snaps = before + after
    arrivals = [s.ts for s in before] + [s.ts - 120 for s in after]
    events, results = run(snaps, arrivals)
    assert [r.held for r in results[4:7]] == [True, True, False]  # held until two more agree, then all applied
    assert not any(r.discarded or r.redelivered for r in results)
    assert [e.root_cause for e in events if e.event == "opened"] == ["gpu-thermal-throttle"]


def test_without_arrival_the_step_is_unchanged():
    p = SnapshotProcessor(RULES, max_jump_s=30.0)
    r1 = p.step(None, dcgm_snapshot(T0))
    r2 = p.step(r1.state, dcgm_snapshot(T0 + 3600))  # offline: a gap is a gap, not a spike
    assert not r2.held and r2.changed
