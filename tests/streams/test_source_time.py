"""The event-time gate on its own: leads, the source clock's window, holds, confirmation, out of order."""

from __future__ import annotations

from tailhound.streams.source_time import WINDOW, EventTimeGate, SourceClock, lead_of
from tests.factories import dcgm_snapshot

T0 = 1_767_225_600.0


def test_the_lead_is_taken_from_the_send_time_unless_it_is_missing_or_after_the_arrival():
    assert lead_of(100.0, arrival=110.0, sent_at=99.0) == 1.0
    assert lead_of(100.0, arrival=110.0, sent_at=None) == -10.0
    assert lead_of(100.0, arrival=110.0, sent_at=500.0) == -10.0  # a send time from the future is not believed


def test_the_clock_keeps_a_window_and_tells_out_of_order_from_redelivery():
    clock = SourceClock()
    for i in range(WINDOW + 3):
        clock.add(T0 + 15 * i, -0.5)
    assert len(clock.times) == WINDOW == len(clock.leads) and clock.usual_lead() == -0.5
    newest = T0 + 15 * (WINDOW + 2)
    assert not clock.out_of_order(newest) and not clock.out_of_order(newest - 15)  # redeliveries
    assert clock.out_of_order(newest - 7.5)  # between two it let in
    assert not clock.out_of_order(T0)  # older than the window: an old redelivery


def test_a_jump_is_held_until_the_source_agrees_then_its_leads_are_learned_again():
    gate = EventTimeGate(max_jump_s=30.0, confirm=2)
    for i in range(4):
        snap = dcgm_snapshot(T0 + 15 * i)
        assert gate.judge(snap, "dcgm", 0.0, None if i == 0 else snap.ts - 15).steps
        gate.let_in(snap, "dcgm", 0.0)
    jumped = [dcgm_snapshot(T0 + 45 + 600 + 15 * i) for i in range(1, 4)]
    verdicts = [gate.judge(s, "dcgm", 600.0, T0 + 45) for s in jumped]
    assert [v.held for v in verdicts] == [True, True, False]
    assert [s.ts for s, _ in verdicts[2].steps] == [s.ts for s in jumped]
    nxt = dcgm_snapshot(jumped[-1].ts + 15)
    assert gate.judge(nxt, "dcgm", 600.0, jumped[-1].ts).steps  # 600 s is its lead now


def test_before_the_lead_is_learned_only_a_far_jump_is_held():
    gate = EventTimeGate(max_jump_s=30.0)
    first = dcgm_snapshot(T0)
    gate.let_in(first, "dcgm", 0.0)
    assert gate.judge(dcgm_snapshot(T0 + 20), "dcgm", 20.0, T0).steps  # not learned yet: inside max_jump_s
    assert gate.judge(dcgm_snapshot(T0 + 60), "dcgm", 60.0, T0).held


def test_forget_drops_what_a_node_held():
    gate = EventTimeGate(max_jump_s=30.0)
    gate.let_in(dcgm_snapshot(T0), "dcgm", 0.0)
    assert gate.judge(dcgm_snapshot(T0 + 100), "dcgm", 100.0, T0).held
    gate.forget("gpu-node-1")
    assert gate.judge(dcgm_snapshot(T0 + 15), "dcgm", 0.0, T0).steps
