"""One snapshot dated inside the skew bound cannot move its source's event time: the +290 s attack."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.streams.step_result import OUT_OF_ORDER, Unprocessable
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {5: (90.0, 1000.0)}


def run(snapshots, arrivals, sent=None):
    """The worker's step over `snapshots` taken at `arrivals` (wall clock), sent at `sent` (message timestamps):
    incidents, and the step results (an Unprocessable in place of the result of a dead-lettered one)."""
    p, store = SnapshotProcessor(RULES, max_jump_s=30.0), MemoryStateStore()
    events, results = [], []
    for snap, arrival, sent_at in zip(snapshots, arrivals, sent or [None] * len(snapshots), strict=True):
        try:
            r = p.step(store.get(snap.node), snap, horizon=arrival + 300.0, arrival=arrival, sent_at=sent_at)
        except Unprocessable as exc:
            results.append(exc)
            continue
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


@pytest.mark.parametrize("ahead_s", [25.0, 15.0, 14.0, 5.0])
def test_a_forged_snapshot_every_interval_under_the_jump_bound_never_hides_a_real_one(ahead_s):
    """Dated `ahead_s` after its arrival (less than max_jump_s, up to one interval): held apart as soon as the
    source's usual lead is learned, then discarded when the real one comes, every interval."""
    real = live(30)
    snaps, arrivals = [], []
    for i, s in enumerate(real):
        snaps.append(s)
        arrivals.append(s.ts)
        if i >= 3:  # right after each real one: cool GPUs, dated past the next real one
            snaps.append(dcgm_snapshot(s.ts + ahead_s))
            arrivals.append(s.ts + 0.1)
    clean, _ = run(real, [s.ts for s in real])
    events, results = run(snaps, arrivals)
    assert lifecycle(events) == lifecycle(clean)
    assert not any(isinstance(r, Unprocessable) or r.redelivered for r in results)
    assert sum(len(r.discarded) for r in results) == len(real) - 4  # all but the last forged one (still held)


def test_a_forged_snapshot_inside_the_tolerance_makes_the_hidden_one_a_visible_dead_letter():
    """Dated 1 s after its arrival, just before the real one: let in (inside the tolerance), so the real one
    after it is older; it is out of order, a dead letter with its reason, never a silent redelivery."""
    real = live(8)
    forged = dcgm_snapshot(real[5].ts + 0.5)
    snaps = [*real[:5], forged, *real[5:]]
    arrivals = [s.ts for s in real[:5]] + [real[5].ts - 0.5] + [s.ts for s in real[5:]]
    _, results = run(snaps, arrivals)
    hidden = results[6]
    assert isinstance(hidden, Unprocessable) and hidden.kind == OUT_OF_ORDER
    assert "not a redelivery" in str(hidden)
    assert not any(getattr(r, "redelivered", False) for r in results)
    assert not any(isinstance(r, Unprocessable) or r.held for r in results[7:])  # the next real ones go on


def test_redeliveries_are_still_recognised_and_silent():
    real = live(6)
    snaps = [*real[:4], real[2], real[3], *real[4:]]  # a consumer restarting two messages back
    arrivals = [s.ts for s in real[:4]] + [real[3].ts + 1, real[3].ts + 1] + [s.ts for s in real[4:]]
    _, results = run(snaps, arrivals)
    assert [r.redelivered for r in results] == [False] * 4 + [True, True] + [False, False]


def test_a_redelivered_held_snapshot_is_not_let_in():
    real = live(8)
    spike = dcgm_snapshot(real[4].ts + 100.0)
    snaps = [*real[:5], spike, spike, *real[5:]]
    arrivals = [s.ts for s in real[:5]] + [real[4].ts, real[4].ts + 1] + [s.ts for s in real[5:]]
    _, results = run(snaps, arrivals)
    assert results[5].held and results[6].held
    assert [s.ts for s in results[7].discarded] == [spike.ts]


def test_a_worker_catching_up_on_a_backlog_holds_nothing():
    """Consumer lag: arrivals bunched long after the sending, lag shrinking; the message timestamps (sent_at)
    keep the lead constant."""
    real = live(40)
    sent = [s.ts + 0.4 for s in real]
    arrivals = [real[0].ts + 600 + 0.2 * i for i in range(len(real))]  # 10 minutes behind, then catching up
    events, results = run(real, arrivals, sent)
    clean, _ = run(real, [s.ts for s in real])
    assert not any(r.held for r in results) and lifecycle(events) == lifecycle(clean)


def test_a_fleet_dated_in_the_past_and_replayed_fast_holds_nothing():
    """The simulator and `agent --from-recording` publish past event time as fast as they can."""
    real = live(40)
    wall = real[-1].ts + 86_400.0
    arrivals = [wall + 0.01 * i for i in range(len(real))]
    _, results = run(real, arrivals, arrivals)
    assert not any(r.held for r in results)


def test_a_source_whose_clock_runs_ahead_is_judged_against_its_own_lead():
    """An agent 60 s ahead: its own snapshots go through, a forged one 25 s past that lead is held apart."""
    real = live(12)
    arrivals = [s.ts - 60.0 for s in real]
    forged = dcgm_snapshot(real[6].ts + 10.0)
    snaps = [*real[:6], forged, *real[6:]]
    arr = [*arrivals[:6], arrivals[5] + 0.1, *arrivals[6:]]  # right after the real one, 25 s past the lead
    events, results = run(snaps, arr)
    clean, _ = run(real, arrivals)
    assert results[6].held and [s.ts for s in results[7].discarded] == [forged.ts]
    assert lifecycle(events) == lifecycle(clean)


def test_a_snapshot_ahead_alone_is_discarded_when_the_next_one_comes_on_time():
    """Dated 5 s after its sending: held; the next one on time shows it was ahead of its source alone."""
    real = live(10)
    arrivals = [s.ts for s in real]
    arrivals[3] -= 5.0
    _, results = run(real, arrivals)
    assert results[3].held and [s.ts for s in results[4].discarded] == [real[3].ts]
    assert not any(r.held or r.discarded for r in results[5:])
