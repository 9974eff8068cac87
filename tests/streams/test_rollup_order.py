"""The roll-up's event-time order and the stages' watermarks (issue 16): the same member events in any arrival
order give the same roll-up output, events wait at most max_delay_s, late ones pass at once."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from tailhound.incident import IncidentEvent
from tailhound.streams.model_aggregator import ModelAggregator
from tailhound.streams.rollup.incidents import RollupState, rollup
from tailhound.streams.rollup.order import (
    MODEL_STAGE,
    NODE_STAGE,
    TICK_KEY,
    EventOrder,
    OrderState,
    is_control,
    parse_progress,
    progress_key,
)
from tailhound.streams.rollup.watermarks import PartitionClock
from tests.notifier.factories import T0
from tests.streams.test_model_stage import engine_snapshot
from tests.streams.test_rollup import model_event, node_event


def run(order: EventOrder, state: OrderState, arrivals: list[tuple[str, object]], now: float = 0.0) -> list:
    """Feed ("member", event) and ("mark", (source, watermark)) in order; the released member events."""
    out: list[IncidentEvent] = []
    for kind, item in arrivals:
        if kind == "member":
            out += order.member(state, item, now)  # type: ignore[arg-type]
        else:
            out += order.progress(state, *item, now)  # type: ignore[misc]
    return out


def test_events_wait_for_every_partition_and_leave_in_event_time_order():
    order, state = EventOrder(10.0, cold_s=0.0), OrderState()
    a1 = node_event("n1", ts=T0 + 15)
    b1 = node_event("n2", ts=T0 + 5, opened_at=T0 + 5)
    out = run(order, state, [("mark", ("node/0", T0)), ("mark", ("node/1", T0)), ("member", a1)])
    assert out == []  # node/1 has not passed T0 + 15 yet
    out = run(order, state, [("member", b1), ("mark", ("node/0", T0 + 20))])
    assert out == []  # still held by node/1
    out = run(order, state, [("mark", ("node/1", T0 + 20))])
    assert out == [b1, a1] and state.pending == [] and state.released == T0 + 20


def test_any_arrival_order_gives_the_same_rollup_output():
    """Two partitions, each in its own order; interleaved every way once both announced themselves (a
    partition's first marker, sent at its first snapshot, holds the roll-up back): the roll-up says the same."""
    p0 = [
        ("member", node_event("n1", ts=T0 + 30, opened_at=T0 + 30)),
        ("mark", ("node/0", T0 + 40)),
        ("member", node_event("n1", "resolved", 2, ts=T0 + 400, opened_at=T0 + 30)),
        ("mark", ("node/0", T0 + 900)),
    ]
    p1 = [
        ("member", node_event("n2", ts=T0 + 15, opened_at=T0 + 15)),
        ("mark", ("node/1", T0 + 20)),
        ("member", model_event(ts=T0 + 35)),
        ("mark", ("node/1", T0 + 60)),
        ("member", node_event("n2", "resolved", 2, ts=T0 + 500, opened_at=T0 + 15)),
        ("member", model_event("resolved", 2, ts=T0 + 500)),
        ("mark", ("node/1", T0 + 900)),
    ]
    results = set()
    rng = random.Random(7)
    for _ in range(60):
        picks = [0] * len(p0) + [1] * len(p1)
        rng.shuffle(picks)
        it = [iter(p0), iter(p1)]
        arrivals = [("mark", ("node/0", T0 - 60)), ("mark", ("node/1", T0 - 60))] + [next(it[p]) for p in picks]
        order, state, rolled = EventOrder(10.0, cold_s=0.0), OrderState(), RollupState()
        released = run(order, state, arrivals) + order.drain(state)
        results.add(tuple(ev.model_dump_json() for m in released for ev in rollup(rolled, m)))
    assert len(results) == 1
    (only,) = results
    assert IncidentEvent.model_validate_json(only[0]).incident_id == "inc-n2-capacity"  # the earliest leads


def test_an_event_waits_at_most_max_delay_then_everything_before_it_goes_in_order():
    order, state = EventOrder(5.0, cold_s=0.0), OrderState()
    a = node_event("n1", ts=T0 + 30)
    b = node_event("n2", ts=T0 + 10, opened_at=T0 + 10)
    order.progress(state, "node/0", T0, 100.0)
    assert order.member(state, a, 100.0) == [] and order.member(state, b, 102.0) == []
    assert order.tick(state, 104.9) == []
    assert order.tick(state, 105.0) == [b, a] and state.forced == 2
    late = node_event("n3", ts=T0 + 20, opened_at=T0 + 20)
    assert order.member(state, late, 106.0) == [late] and state.late == 1  # older than what went: at once


def test_pending_is_bounded_oldest_first():
    order, state = EventOrder(60.0, max_pending=3, cold_s=0.0), OrderState()
    order.progress(state, "node/0", T0, 0.0)
    evs = [node_event(f"n{i}", ts=T0 + 10 + i, opened_at=T0 + 10 + i) for i in range(5)]
    out = [e for ev in evs for e in order.member(state, ev, 0.0)]
    assert out == evs[:2] and len(state.pending) == 3


def test_a_source_behind_holds_back_until_idle_in_event_and_wall_time():
    order, state = EventOrder(600.0, idle_s=300.0, idle_wall_s=60.0, cold_s=0.0), OrderState()
    order.progress(state, "node/0", T0, 0.0)
    order.progress(state, "node/1", T0 + 1000, 0.0)
    assert order.watermark(state, now=30.0) == T0  # far behind, but it reported 30 s ago: catching up
    assert order.watermark(state, now=61.0) == T0 + 1000  # silent for a minute and far behind: idle


def test_off_means_arrival_order():
    order, state = EventOrder(0.0), OrderState()
    a, b = node_event("n1", ts=T0 + 30), node_event("n2", ts=T0 + 10)
    assert order.member(state, a, 0.0) == [a] and order.member(state, b, 0.0) == [b] and state.pending == []


def test_control_messages():
    key = progress_key(NODE_STAGE, 3)
    assert is_control(key) and is_control(TICK_KEY) and not is_control(b"inc-123")
    assert parse_progress(key, repr(T0 + 0.5).encode()) == ("node/3", T0 + 0.5)
    assert parse_progress(progress_key(MODEL_STAGE, 0), b"nan") is None
    assert parse_progress(key, b"x" * 100) is None and parse_progress(TICK_KEY, b"") is None
    assert parse_progress(key, b"\xff") is None


def test_too_many_sources_are_not_kept():
    order, state = EventOrder(10.0, cold_s=0.0), OrderState()
    for i in range(5000):
        order.progress(state, f"node/{i}", T0, 0.0)
    assert len(state.progress) == 4096
    assert order.progress(state, "node/x", math.inf, 0.0) == []


# --- the node stage's watermark per partition ---------------------------------------------------------------------
def test_partition_clock_holds_first_then_vouches_for_the_oldest_active_source():
    clock = PartitionClock(idle_s=300.0, every_s=5.0, warmup_s=60.0)
    assert clock.observe(0, "n1", "vllm", T0) == T0 - 60.0  # the first snapshot: a hold, the partition exists
    marks = []
    for i, (node, source) in itertools.product(range(1, 8), [("n1", "vllm"), ("n2", "vllm"), ("n1", "dcgm")]):
        marks.append(clock.observe(0, node, source, T0 + 15 * i - (5 if node == "n2" else 0)))
    published = [m for m in marks if m is not None]
    # n2 is the oldest; the last look (n1's tick 7) was before n2's tick 7
    assert published == sorted(published) and published[-1] == T0 + 15 * 6 - 5
    assert clock.observe(0, "n1", "vllm", T0 + 15 * 7 + 1) is None  # within every_s


def test_partition_clock_forgets_idle_sources_and_moved_partitions():
    clock = PartitionClock(idle_s=100.0, every_s=1.0, warmup_s=0.0)
    clock.observe(1, "gone", "vllm", T0)
    for i in range(1, 20):
        mark = clock.observe(1, "n1", "vllm", T0 + 15 * i)
    assert mark == T0 + 15 * 19 and clock.partitions() == {1}
    clock.forget({1})
    assert clock.partitions() == set()
    assert clock.observe(1, "n1", "vllm", T0 + 1000) == T0 + 1000  # starts over: a hold at its first snapshot


# --- the model stage's aggregation across workers ---------------------------------------------------------------
def test_an_aggregator_waits_for_a_node_that_is_behind_while_it_keeps_reporting():
    agg = ModelAggregator("llama", cold_until=0.0)
    agg.add(engine_snapshot("a", T0), now=10.0)
    agg.add(engine_snapshot("b", T0), now=10.0)
    closed = []
    for i in range(1, 40):  # node a's worker runs 10 minutes ahead of node b's
        closed += agg.add(engine_snapshot("a", T0 + 15 * i), now=11.0)
    assert closed == []  # b reported a second ago: behind, not gone
    assert agg.add(engine_snapshot("b", T0 + 15), now=12.0)  # b moves on: its buckets close
    gone = agg.add(engine_snapshot("a", T0 + 15 * 40), now=210.0)  # b silent 198 s and far behind: idle
    assert gone and agg.closed_until >= T0 + 15 * 39


def test_a_worker_taking_a_model_over_starts_from_the_roster():
    agg = ModelAggregator("llama")
    for i in range(3):
        for node in ("a", "b"):
            agg.add(engine_snapshot(node, T0 + 15 * i), now=0.0)
    roster = agg.roster()
    new = ModelAggregator("llama")
    new.restore(roster, now=10.0)
    assert new.node_ts == agg.node_ts and new.closed_until == agg.closed_until
    assert new.add(engine_snapshot("a", T0 + 60), now=11.0) == []  # b known: its bucket stays open


@pytest.mark.parametrize("stage", [NODE_STAGE, MODEL_STAGE])
def test_progress_keys_are_short_and_distinct(stage):
    assert progress_key(stage, 7).startswith(b"~progress/") and len(progress_key(stage, 10_000)) < 64


def test_a_fresh_aggregator_in_a_worker_waits_to_hear_of_every_node():
    """A worker reading a backlog faster than the others closes nothing for COLD_WAIT_S (wall), so the nodes the
    other workers forward are known before the first bucket closes."""
    agg = ModelAggregator("llama")
    for i in range(8):
        assert agg.add(engine_snapshot("a", T0 + 15 * i), now=100.0 + i * 0.1) == []
    agg.add(engine_snapshot("b", T0), now=104.0)  # the other worker's first forward, 4 s later
    assert agg.add(engine_snapshot("a", T0 + 15 * 8), now=105.0) == []  # b holds its buckets
    assert agg.add(engine_snapshot("b", T0 + 60), now=105.5)  # both past: the buckets close, with both nodes


def test_a_fresh_rollup_releases_by_watermark_only_after_a_cold_wait():
    order, state = EventOrder(30.0, cold_s=5.0), OrderState()
    ev = node_event("n1", ts=T0 + 10, opened_at=T0 + 10)
    order.progress(state, "node/0", T0 + 100, 0.0)
    assert order.member(state, ev, 1.0) == []  # node/1 may not have announced itself yet
    assert order.tick(state, 5.0) == [ev]
