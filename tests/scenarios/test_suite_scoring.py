"""The scenario suite's scoring (suite.score / aggregate / table) on hand-made incident events."""

from __future__ import annotations

from dataclasses import replace

from tailhound.incident import Differential, IncidentEvent, Scope
from tests.scenarios.suite import (
    FLEET,
    SCENARIOS,
    Expect,
    Fault,
    Scenario,
    aggregate,
    score,
    summary,
    table,
)

T0 = 1_767_225_600.0
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


def ev(iid: str, seq: int, minute: float, cause: str, node: str | None = None, gpus=(), nodes=()) -> IncidentEvent:
    scope = Scope(node=node, gpus=list(gpus), model=MODEL if node is None else None)
    if nodes:
        scope = scope.model_copy(update={"nodes": list(nodes)}) if "nodes" in Scope.model_fields else scope
    return IncidentEvent(
        incident_id=iid,
        event="opened" if seq == 1 else "updated",
        sequence=seq,
        ts=T0 + minute * 60,
        root_cause=cause,
        severity="critical",
        opened_at=T0 + minute * 60,
        scope=scope,
        rule="r",
    )


THERMAL = Scenario(
    "t",
    "x",
    (
        Fault(
            "thermal-throttle@25m+10m:node=gpu-node-2:gpus=3,5",
            Expect("gpu-thermal-throttle", "gpu-node-2", ("3", "5")),
        ),
    ),
)
SURGE = Scenario("s", "x", (Fault("traffic-surge@25m+10m", Expect("capacity", FLEET)),), {"nodes": 4})
TWO = Scenario(
    "two",
    "x",
    (
        Fault("thermal-throttle@25m+10m:node=gpu-node-1", Expect("gpu-thermal-throttle", "gpu-node-1")),
        Fault("kv-cache-pressure@25m+10m:node=gpu-node-2", Expect("kv-cache-pressure", "gpu-node-2")),
    ),
    {"nodes": 3},
)
BLIP = Scenario("b", "x", (Fault("short-blip@25m:node=gpu-node-1", None),))


def test_one_right_incident_meets_the_target():
    events = [
        ev("a", 1, 26.5, "gpu-thermal-throttle", "gpu-node-2", ("5",)),
        ev("a", 2, 27, "gpu-thermal-throttle", "gpu-node-2", ("3", "5")),
    ]
    s = score(THERMAL, events, T0)
    (f,) = s.faults
    assert f.right and f.detect_min == 1.5 and len(f.incidents) == 1 and f.first_right == 1 and not f.wrong
    assert s.met and s.problems() == []


def test_wrong_gpus_or_node_is_not_the_right_place():
    s = score(THERMAL, [ev("a", 1, 26.5, "gpu-thermal-throttle", "gpu-node-2", ("3",))], T0)
    assert not s.faults[0].right and not s.met
    s = score(THERMAL, [ev("a", 1, 26.5, "gpu-thermal-throttle", "gpu-node-1", ("3", "5"))], T0)
    assert s.spurious and not s.faults[0].incidents  # another node: not this fault's incident


def test_first_cause_and_wrong_cause():
    events = [
        ev("a", 1, 25.5, "capacity", "gpu-node-2"),
        ev("a", 2, 27, "gpu-thermal-throttle", "gpu-node-2", ("3", "5")),
        ev("b", 1, 26, "nvlink-degraded", "gpu-node-2", ("1",)),
    ]
    s = score(THERMAL, events, T0)
    (f,) = s.faults
    assert f.right and len(f.incidents) == 2 and f.first_right == 1
    assert f.wrong == ("nvlink-degraded @ gpu-node-2 GPUs 1",)
    assert f.detect_min == 0.5 and not s.met


def test_a_fleet_fault_counts_node_incidents_and_model_incidents():
    per_node = [ev(f"n{i}", 1, 25.5, "capacity", f"gpu-node-{i}") for i in range(1, 5)]
    model = [ev("m", 1, 28, "capacity")]
    s = score(SURGE, per_node + model, T0)
    (f,) = s.faults
    assert len(f.incidents) == 5 and f.right and not s.met  # the model incident is right, 4 more are noise
    rolled = [
        ev("m", 1, 25.5, "capacity", "gpu-node-1"),
        ev("m", 2, 26, "capacity", nodes=("gpu-node-1", "gpu-node-2")),
    ]
    s = score(SURGE, rolled, T0)
    assert len(s.faults[0].incidents) == 1 and s.met  # folded into one model-scope incident: 1


def test_two_faults_each_claim_their_node():
    events = [
        ev("a", 1, 26, "kv-cache-pressure", "gpu-node-2"),
        ev("b", 1, 26.75, "gpu-thermal-throttle", "gpu-node-1"),
    ]
    s = score(TWO, events, T0)
    assert [len(f.incidents) for f in s.faults] == [1, 1] and s.met
    s = score(TWO, events + [ev("c", 1, 27, "capacity")], T0)  # a model incident: claimed, but wrong for both
    assert sum(len(f.incidents) for f in s.faults) == 3 and not s.met


def test_negatives_and_out_of_window_incidents():
    assert score(BLIP, [], T0).met
    s = score(BLIP, [ev("a", 1, 25.5, "capacity", "gpu-node-1")], T0)
    assert not s.met and s.faults[0].wrong
    s = score(THERMAL, [ev("a", 1, 10, "capacity", "gpu-node-2")], T0)  # before the fault: spurious
    assert s.spurious and not s.met


def test_aggregate_and_table():
    good = score(THERMAL, [ev("a", 1, 26.5, "gpu-thermal-throttle", "gpu-node-2", ("3", "5"))], T0)
    blip = score(BLIP, [ev("b", 1, 25.5, "capacity", "gpu-node-1")], T0)
    agg = aggregate([good, blip])
    assert (agg.faults, agg.incidents, agg.right, agg.wrong, agg.negative_incidents) == (1, 1, 1, 1, 1)
    assert agg.incidents_per_fault == 1.0 and agg.first_cause_right == 1.0 and not agg.met
    assert agg.problems() == ["1 incidents with a wrong cause (target 0)", "1 incidents on the negatives (target 0)"]
    text = table([good, blip])
    assert text.count("\n") == 3 and "| t | `thermal-throttle@25m+10m:node=gpu-node-2:gpus=3,5` |" in text
    assert "incidents per fault: 1.00" in summary(agg)


def test_every_scenario_is_valid():
    for sc in SCENARIOS.values():
        cfg = sc.sim_config()
        assert 2 <= cfg.nodes <= 4 and 30 <= sc.minutes <= 40
        for f in sc.faults:
            # after the baselines' warm-up, except where the point is that peers need none
            assert f.fault.start_s >= 20 * 60 or sc.name.endswith("-early")
            if f.expect is not None and f.expect.place != FLEET:
                assert f.expect.place in cfg.node_names()


def test_an_ambiguous_scenario_counts_the_named_runner_up_and_nothing_else_does():
    diff = Differential(lead="retry-storm", runner_up="capacity", why="sums", check="per client IP")
    paged = [ev("m", 1, 26, "retry-storm", nodes=("gpu-node-1",)).model_copy(update={"differential": diff})]
    ambiguous = replace(SURGE, ambiguous=True)
    s = score(ambiguous, paged, T0)
    assert s.met and not s.faults[0].wrong and s.faults[0].first_right == 1
    assert "retry-storm (runner-up capacity) @ model/fleet" in table([s])
    assert not score(SURGE, paged, T0).met  # not marked ambiguous: the runner-up does not count
    confident = [ev("m", 1, 26, "retry-storm", nodes=("gpu-node-1",))]
    assert not score(ambiguous, confident, T0).met  # a confident wrong cause never counts
    assert SCENARIOS["tgi-surge"].ambiguous and not SCENARIOS["tgi-surge"].gap


def test_time_to_page_distribution_and_its_targets():
    # thermal paged 1.5 min in, kv 1 min, the surge 3 min: median 1.5, p90 (nearest rank) and max 3
    fast = [
        score(THERMAL, [ev("a", 1, 26.5, "gpu-thermal-throttle", "gpu-node-2", ("3", "5"))], T0),
        score(
            TWO,
            [ev("b", 1, 26, "kv-cache-pressure", "gpu-node-2"), ev("c", 1, 25.5, "gpu-thermal-throttle", "gpu-node-1")],
            T0,
        ),
        score(SURGE, [ev("d", 1, 28, "capacity")], T0),
    ]
    agg = aggregate(fast)
    assert agg.pages_min == (1.5, 0.5, 1.0, 3.0)
    assert (agg.median_page_min, agg.p90_page_min, agg.max_page_min) == (1.25, 3.0, 3.0)
    assert agg.met and "median 1.25 min" in summary(agg) and "max 3.00" in summary(agg)
    # one fault paged after 7 minutes: the max target fails even though the median holds
    late = aggregate([*fast, score(SURGE, [ev("e", 1, 32, "capacity")], T0)])
    assert late.median_page_min == 1.5 and late.max_page_min == 7.0 and not late.met
    assert late.problems() == ["time to page: median 1.50 min, max 7.00 min (targets <= 2, <= 6)"]
    # most faults slow: the median target fails
    slow = aggregate([score(SURGE, [ev("f", 1, 27.5, "capacity")], T0)] * 3)
    assert slow.median_page_min == 2.5 and not slow.met
