"""Chart series of rolled-up incidents (streams/rollup/series.py): the nodes side by side, the source's own
series, and members kept without theirs (a fleet-wide group stays small)."""

from __future__ import annotations

from tailhound.incident import MAX_SERIES, MAX_SERIES_ENTITIES, MAX_SERIES_POINTS, EvidenceSeries
from tailhound.streams.rollup.incidents import RollupState, rollup
from tests.notifier.factories import T0
from tests.streams.test_rollup import node_event


def waiting(node_value: float, start: float = T0, n: int = 10) -> EvidenceSeries:
    ts = [start + 15 * i for i in range(n)]
    return EvidenceSeries(
        rule="capacity-rule",
        signal="sum(engine.requests_waiting)",
        op=">",
        threshold=2,
        focus=[""],
        ts=ts,
        values={"": [node_value + i for i in range(n)]},
        pending_since=start,
    )


def with_series(ev, value: float, start: float = T0):
    s = waiting(value, start)
    node = ev.scope.node
    return ev.model_copy(update={"series": [s.model_copy(update={"focus": [node], "values": {node: s.values[""]}})]})


def test_a_group_shows_its_nodes_side_by_side_and_the_source_series():
    state = RollupState()
    out = []
    for i, node in enumerate(("n1", "n2", "n3")):
        out += rollup(
            state, with_series(node_event(node, ts=T0 + 30 * i, opened_at=T0 + 30 * i), 10 * i, start=T0 + 30 * i)
        )
    first, *updates = out
    assert first.series[0].focus == ["n1"]  # alone: the member's own event, with its own series
    last = updates[-1]
    view = last.series[0]
    assert view.per == "node" and view.focus == ["n1", "n2", "n3"]
    assert view.signal == "sum(engine.requests_waiting)" and view.threshold == 2
    assert len(view.ts) <= MAX_SERIES_POINTS and all(len(v) == len(view.ts) for v in view.values.values())
    assert max(v for v in view.values["n3"] if v is not None) == 29  # n3's newest value, on the common grid
    assert last.series[1].focus == ["n1"]  # then the source member's own series
    # members are stored without their series: the state stays small however many nodes join
    group = next(iter(state.groups.values()))
    assert all(m.series == [] for m in group.members.values())
    assert list(group.source_series) == ["inc-n1-capacity"]


def test_headlines_are_bounded_and_a_group_event_carries_at_most_max_series():
    state = RollupState()
    out = []
    for i in range(40):
        node = f"n{i:02d}"
        out += rollup(state, with_series(node_event(node, ts=T0 + i, opened_at=T0 + i), i))
    group = next(iter(state.groups.values()))
    assert len(group.headlines) == MAX_SERIES_ENTITIES
    assert all(len(e.series) <= MAX_SERIES for e in out)
    assert len(out[-1].series[0].values) == MAX_SERIES_ENTITIES


def test_members_without_series_give_no_nodes_view():
    state = RollupState()
    out = [e for node in ("n1", "n2") for e in rollup(state, node_event(node))]
    assert all(e.series == [] for e in out)
