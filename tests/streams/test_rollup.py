"""The roll-up: one incident per fault across nodes; a lone node's incident passes through unchanged."""

from __future__ import annotations

from tailhound.incident import IncidentEvent, Scope
from tailhound.streams.rollup.incidents import JOIN_WINDOW_S, RollupState, group_key, rollup
from tests.notifier.factories import T0, incident_event

MODEL = "llama-3-70b"


def node_event(
    node: str,
    event: str = "opened",
    sequence: int = 1,
    cause: str = "capacity",
    ts: float = T0,
    opened_at: float = T0,
    **over,
) -> IncidentEvent:
    return incident_event(
        incident_id=f"inc-{node}-{cause}",
        event=event,
        sequence=sequence,
        root_cause=cause,
        node=node,
        gpus=(),
        ts=ts,
        opened_at=opened_at,
        rule=f"{cause}-rule",
        labels={"rules": f"{cause}-rule"},
        **over,
    )


def model_event(event: str = "opened", sequence: int = 1, cause: str = "capacity", ts: float = T0) -> IncidentEvent:
    return incident_event(
        incident_id=f"inc-model-{cause}",
        event=event,
        sequence=sequence,
        root_cause=cause,
        node=None,
        gpus=(),
        ts=ts,
        scope=Scope(model=MODEL),
        rule="model-capacity-exhausted",
        labels={"rules": "model-capacity-exhausted"},
        actions=["Scale out the model"],
    )


def feed(events: list[IncidentEvent], state: RollupState | None = None) -> list[IncidentEvent]:
    state = state if state is not None else RollupState()
    return [out for ev in events for out in rollup(state, ev)]


def test_a_lone_node_incident_passes_through_unchanged():
    evs = [node_event("n1"), node_event("n1", "updated", 2, ts=T0 + 60), node_event("n1", "resolved", 3, ts=T0 + 600)]
    state = RollupState()
    assert feed(evs, state) == evs
    assert state.groups == {} and state.member_of == {} and state.seen == {}


def test_the_same_cause_on_several_nodes_is_one_model_incident_listing_them():
    out = feed(
        [
            node_event("n1"),
            node_event("n2", ts=T0 + 30, opened_at=T0 + 30),
            model_event(ts=T0 + 120),
            node_event("n3", ts=T0 + 200, opened_at=T0 + 200),
        ]
    )
    assert {e.incident_id for e in out} == {"inc-n1-capacity"}
    assert [e.event for e in out] == ["opened", "updated", "updated", "updated"]
    assert [e.sequence for e in out] == [1, 2, 3, 4]
    last = out[-1]
    assert last.scope.node is None and last.scope.model == MODEL and last.scope.nodes == ["n1", "n2", "n3"]
    assert last.summary.startswith("Capacity on model llama-3-70b / nodes n1, n2, n3")
    assert last.actions == ["Scale out the model"]  # the model stage's actions, not one node's
    assert set(last.labels["rules"].split(",")) == {"capacity-rule", "model-capacity-exhausted"}
    assert last.labels["nodes"] == "n1,n2,n3" and last.opened_at == T0


def test_the_group_resolves_when_every_member_has():
    state = RollupState()
    feed([node_event("n1"), node_event("n2", ts=T0 + 30, opened_at=T0 + 30)], state)
    assert feed([node_event("n1", "resolved", 2, ts=T0 + 600)], state) == []  # n2 still open: nothing changed
    [done] = feed([node_event("n2", "resolved", 2, ts=T0 + 660)], state)
    assert done.event == "resolved" and done.incident_id == "inc-n1-capacity" and done.resolved_at == T0 + 660
    assert state.groups == {} and state.member_of == {} and state.seen == {}


def test_different_causes_stay_different_incidents():
    out = feed([node_event("n1", cause="gpu-thermal-throttle"), node_event("n2", cause="kv-cache-pressure")])
    assert [(e.incident_id, e.scope.node) for e in out] == [
        ("inc-n1-gpu-thermal-throttle", "n1"),
        ("inc-n2-kv-cache-pressure", "n2"),
    ]


def test_path_causes_roll_up_fleet_wide_and_engine_causes_per_model():
    assert group_key(node_event("n1", cause="network-path")) == "network-path|fleet"
    assert group_key(node_event("n1", cause="capacity")) == f"capacity|{MODEL}"
    out = feed([node_event("n1", cause="network-path"), node_event("n2", cause="network-path", ts=T0 + 60)])
    assert out[-1].scope.describe() == "fleet / nodes n1, n2" and out[-1].scope.model is None


def test_a_node_opening_long_after_the_group_is_its_own_incident():
    late = T0 + JOIN_WINDOW_S + 60
    out = feed([node_event("n1"), node_event("n2", ts=late, opened_at=late)])
    assert [e.incident_id for e in out] == ["inc-n1-capacity", "inc-n2-capacity"]


def test_redelivered_member_events_change_nothing():
    state = RollupState()
    evs = [node_event("n1"), node_event("n2", ts=T0 + 30, opened_at=T0 + 30)]
    first = feed(evs, state)
    assert feed(evs, state) == [] and len(first) == 2


def test_an_update_that_changes_nothing_people_see_is_not_published():
    state = RollupState()
    feed([node_event("n1"), node_event("n2", ts=T0 + 30, opened_at=T0 + 30)], state)
    assert feed([node_event("n2", "updated", 2, ts=T0 + 90)], state) == []
    [changed] = feed([node_event("n2", "updated", 3, ts=T0 + 120, severity="critical")], state)
    assert changed.severity == "critical" and changed.sequence == 3


def test_the_best_ranked_open_cause_leads_and_state_survives_a_round_trip():
    state = RollupState()
    feed([node_event("n1"), node_event("n2", ts=T0 + 30, opened_at=T0 + 30)], state)
    restored = RollupState.model_validate_json(state.model_dump_json())
    took_over = node_event("n2", "updated", 2, ts=T0 + 90).model_copy(update={"root_cause": "gpu-thermal-throttle"})
    [ev] = feed([took_over], restored)
    assert ev.root_cause == "gpu-thermal-throttle"


def test_an_event_of_an_incident_never_seen_open_passes_through():
    ev = node_event("n9", "updated", 4)
    assert feed([ev]) == [ev]


def test_a_residual_cause_during_another_incident_of_its_model_is_muted():
    state = RollupState()
    feed([node_event("n1"), node_event("n2", ts=T0 + 30, opened_at=T0 + 30)], state)
    late = T0 + 1200  # the surge is over, n2 drains its backlog at full batch: slower than usual
    assert feed([node_event("n2", cause="node-degraded", ts=late, opened_at=late)], state) == []
    assert feed([node_event("n2", "updated", 2, cause="node-degraded", ts=late + 60)], state) == []
    assert feed([node_event("n2", "resolved", 3, cause="node-degraded", ts=late + 300)], state) == []
    assert state.muted == {}
    # with no incident of another cause open on its model, the residual cause is its own incident
    alone = feed(
        [node_event("n5", cause="node-degraded", ts=late, opened_at=late, scope=Scope(node="n5", model="other-model"))]
    )
    assert [e.root_cause for e in alone] == ["node-degraded"]


def test_two_findings_of_one_nodes_fault_stay_that_nodes_incident():
    """node-slowdown (its own history) and node-slower-than-peers (the model stage) on the same node: one
    incident, still scoped to the node."""
    own = node_event("n2", cause="node-degraded")
    peers = incident_event(
        incident_id="inc-peers",
        event="opened",
        sequence=1,
        root_cause="node-degraded",
        node="n2",
        gpus=(),
        ts=T0 + 60,
        opened_at=T0 + 60,
        rule="node-slower-than-peers",
        labels={"rules": "node-slower-than-peers"},
    )
    out = feed([own, peers])
    assert {e.incident_id for e in out} == {own.incident_id}
    last = out[-1]
    assert last.scope.node == "n2" and last.scope.model == MODEL and last.scope.nodes == []
    assert "nodes" not in last.summary


def test_a_nodes_capacity_incident_while_the_balancer_overloads_that_node_is_muted():
    """load-imbalance (the model stage: one engine against its peers) explains the queue the node stage sees as
    capacity on that node; on another node capacity stays its own incident."""
    state = RollupState()
    [imbalance] = feed([node_event("n2", cause="load-imbalance")], state)
    assert imbalance.root_cause == "load-imbalance"
    assert feed([node_event("n2", ts=T0 + 60, opened_at=T0 + 60)], state) == []
    assert feed([node_event("n2", "resolved", 2, ts=T0 + 600)], state) == []
    assert state.muted == {}
    elsewhere = feed([node_event("n3", ts=T0 + 90, opened_at=T0 + 90)], state)
    assert [(e.root_cause, e.scope.node) for e in elsewhere] == [("capacity", "n3")]


def test_a_rolled_up_incident_keeps_its_leads_candidates_and_differential():
    from tailhound.incident import Candidate, Differential

    diff = Differential(lead="retry-storm", runner_up="capacity", why="sums", check="per client IP")
    cands = [Candidate(root_cause="retry-storm", score=1.0), Candidate(root_cause="capacity", score=0.5)]
    out = feed(
        [
            node_event(
                n, cause="retry-storm", ts=T0 + k * 30, opened_at=T0 + k * 30, candidates=cands, differential=diff
            )
            for k, n in enumerate(("n1", "n2"))
        ]
    )
    last = out[-1]
    assert last.scope.nodes == ["n1", "n2"] and last.runner_up == "capacity" and last.candidates == cands
