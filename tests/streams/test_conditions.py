"""The `when:` language: parsing, and judging reduce / references / baselines / trends / rates / absence."""

from __future__ import annotations

import pytest

from tailhound.errors import RuleFileError
from tailhound.snapshot import CounterSample, GaugeSample, Snapshot
from tailhound.streams.evaluator import evaluate
from tailhound.streams.ruleset.condition_eval import EvalContext, entities_of, holds, observations, rising, value_of
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text
from tests.factories import dcgm_snapshot

T0 = 1_767_225_600.0


def rule(when: str, scope: str = "engine", extra: str = "") -> str:
    return f"""\
groups:
  - name: g
    rules:
      - name: r
        scope: {scope}
        when: {when}
        root_cause: capacity
{extra}"""


def one(when: str, scope: str = "engine"):
    [r] = parse_rule_text(rule(when, scope), "x.yaml")
    return r


CTX_VALUES = {
    "engine.requests_waiting": {"0": 5.0, "1": 9.0},
    "gpu.dram_bw_util": {str(g): 0.5 + g / 20 for g in range(8)},
    "gpu.nvlink_up": {"0/0": 1.0, "0/1": 0.0, "1/0": 1.0},
    "lb.health_timeout": {"chat": 0.5},
    "health.p95": {"chat": 0.45},
    "net.time_wait": {"": 30000.0},
}


def ctx(**kw) -> EvalContext:
    return EvalContext(now=T0, values=CTX_VALUES, **kw)


def test_reduce_over_the_node_and_over_links_of_a_gpu():
    c = ctx()
    assert value_of(c, "gpu.dram_bw_util", "max", "0", "engine") == pytest.approx(0.85)
    assert value_of(c, "engine.requests_waiting", "sum", "", "node") == 14
    assert value_of(c, "engine.requests_waiting", "count", "", "node") == 2
    assert value_of(c, "gpu.nvlink_up", "min", "0", "gpu") == 0.0  # the links of GPU 0 only
    assert value_of(c, "gpu.nvlink_up", "min", "1", "gpu") == 1.0
    assert value_of(c, "net.time_wait", None, "1", "engine") == 30000.0  # node-level: every entity


def test_compare_with_another_signal_and_with_counts():
    r = one("{signal: lb.health_timeout, below: {signal: health.p95, times: 1.5}}", scope="endpoint")
    assert holds(r.when, ctx(), "chat", "endpoint") is True
    node = one(
        "{signal: engine.requests_waiting, reduce: sum, "
        "above: {signal: engine.requests_waiting, reduce: count, times: 2}}",
        scope="node",
    )
    assert holds(node.when, ctx(), "", "node") is True  # 14 waiting > 2 x 2 engines
    assert entities_of(node.leaves(), ctx(), "node") == [""]


def test_baseline_reference_and_evidence():
    r = one("{signal: engine.requests_waiting, above_baseline: 2.0}")
    c = ctx(baseline=lambda s, e: (4.0, "rolling") if e == "1" else None)
    assert holds(r.when, c, "1", "engine") is True  # 9 > 2 x 4
    assert holds(r.when, c, "0", "engine") is None  # no baseline yet: no news
    [ev] = observations(r.leaves(), c, "1", "engine", 60, {"engine": "1"})
    assert ev.baseline == 4.0 and ev.threshold == 8.0 and "2.2x the rolling baseline" in ev.detail


def test_rising_needs_history_spanning_the_window():
    pts = [(T0 - 300 + 15 * i, float(i)) for i in range(21)]
    assert rising(pts, 300, T0) is True
    assert rising(list(reversed([(t, v) for t, v in pts])), 300, T0) is True  # order of input is by ts only
    assert rising([(t, 20.0 - v) for t, v in pts], 300, T0) is False
    assert rising(pts[-3:], 300, T0) is None


def test_absent_after_a_while():
    r = one("{absent: gpu.temperature, for: 2m}", scope="gpu")
    c = EvalContext(now=T0, values={}, last_seen={"gpu.temperature": {"3": T0 - 130, "4": T0 - 30}})
    assert entities_of(r.leaves(), c, "gpu") == ["3", "4"]
    assert holds(r.when, c, "3", "gpu") is True and holds(r.when, c, "4", "gpu") is False


def test_peer_reference_compares_with_the_median_of_the_other_entities():
    r = one("{signal: gpu.sm_clock, below: {peers: 0.8}}", scope="gpu")
    clocks = {"0": 1980.0, "1": 1975.0, "2": 1100.0, "3": 1990.0}
    c = EvalContext(now=T0, values={"gpu.sm_clock": clocks})
    assert holds(r.when, c, "2", "gpu") is True  # 1100 < 0.8 x median(1980, 1975, 1990)
    assert holds(r.when, c, "0", "gpu") is False  # the slow GPU does not drag the others' median
    [ev] = observations(r.leaves(), c, "2", "gpu", 60, {"gpu": "2"})
    assert ev.baseline == 1980.0 and ev.threshold == pytest.approx(1584.0)
    assert "0.56x the median of its 3 peers" in ev.detail
    lonely = EvalContext(now=T0, values={"gpu.sm_clock": {"0": 1980.0, "2": 1100.0}})
    assert holds(r.when, lonely, "2", "gpu") is None  # one peer is no comparison: no news


def test_any_is_false_when_a_branch_is_false_and_the_others_lack_signals():
    r = one(
        "{any: [{signal: gpu.temperature, at_least: 85}, {signal: gpu.thermal_throttle_flag, at_least: 1}]}",
        scope="gpu",
    )
    c = EvalContext(now=T0, values={"gpu.temperature": {"0": 60.0}})
    assert holds(r.when, c, "0", "gpu") is False  # dcgm defaults report no clock reasons: still judged
    assert holds(r.when, EvalContext(now=T0, values={}), "0", "gpu") is None


@pytest.mark.parametrize(
    ("when", "scope", "needle"),
    [
        ("{signal: gpu.dram_bw_util, above: 0.85}", "engine", "add `reduce:"),
        ("{signal: engine.requests_waiting, above: {signal: gpu.nope}}", "engine", "unknown signal 'gpu.nope'"),
        ("{signal: engine.requests_waiting, above: 1, above_baseline: 2}", "engine", "either `above` or"),
        ("{signal: engine.requests_waiting, above: {baseline: 2, times: 3}}", "engine", "`times` go with"),
        ("{signal: engine.requests_waiting}", "engine", "exactly one of"),
        ("{signal: gpu.sm_clock, below: {peers: 0.8, baseline: 2}}", "gpu", "exactly one of `signal`, `baseline` or"),
        ("{signal: gpu.sm_clock, reduce: max, below: {peers: 0.8}}", "engine", "cannot go with `reduce`"),
        ("{signal: latency.ttft.p97, above: 1}", "engine", "unknown signal 'latency.ttft.p97'"),
        ("{signal: engine.requests_waiting.rate, above: 1}", "engine", "unknown signal"),
    ],
)
def test_rule_errors(when, scope, needle):
    with pytest.raises(RuleFileError) as exc:
        parse_rule_text(rule(when, scope), "x.yaml")
    assert needle in str(exc.value) and str(exc.value).startswith("x.yaml:")


def test_known_derived_names_parse():
    for when in (
        "{signal: latency.ttft.p95, above: 1.5, min_observations: 20}",
        "{signal: engine.preemptions.rate, above: 0}",
        "{signal: engine.requests_waiting, growing_for: 5m, above: 0}",
    ):
        assert one(when).leaves()


def node_snapshot(ts: float, overflows: float, prev: float | None) -> Snapshot:
    return Snapshot(
        ts=ts,
        node="gpu-node-1",
        source="node",
        interval_s=15,
        prev_ts=ts - 15 if prev else None,
        samples=[
            CounterSample(
                name="node_netstat_TcpExt_ListenOverflows",
                value=overflows,
                delta=None if prev is None else overflows - prev,
            )
        ],
    )


def test_counter_rates_and_cross_source_rules_through_evaluate():
    [r] = parse_rule_text(
        rule(
            "{all: [{signal: net.listen_overflows.rate, above: 1}, {signal: gpu.temperature, reduce: max, above: 80}]}",
            scope="node",
            extra="        for: 30s\n",
        ),
        "x.yaml",
    )
    rules = RuleSet(rules=[r])
    state, events = None, []
    total = 0.0
    for i in range(8):
        ts = T0 + 15 * i
        state, ev = evaluate(state, dcgm_snapshot(ts, hot={2: (86.0, 1500.0)}), rules)
        events += ev
        prev, total = total, total + (60 if i >= 2 else 0)  # 4 overflows/s from tick 2
        state, ev = evaluate(state, node_snapshot(ts + 1, total, prev if i else None), rules)
        events += ev
    assert [e.event for e in events] == ["opened"]
    signals = {e.signal: e.value for e in events[0].evidence}
    assert signals["net.listen_overflows.rate"] == pytest.approx(4.0)
    assert signals["max(gpu.temperature)"] == 86.0


def test_growing_queue_through_evaluate():
    [r] = parse_rule_text(rule("{signal: engine.requests_waiting, above: 0, growing_for: 2m}"), "x.yaml")
    rules = RuleSet(rules=[r])
    state, events = None, []
    for i in range(20):
        waiting = 0.0 if i < 4 else float(i - 3)
        snap = Snapshot(
            ts=T0 + 15 * i,
            node="n",
            source="vllm",
            interval_s=15,
            samples=[GaugeSample(name="vllm:num_requests_waiting", labels={"engine": "0"}, value=waiting)],
        )
        state, ev = evaluate(state, snap, rules)
        events += [(i, e.event) for e in ev]
    assert events and events[0][1] == "opened" and 6 <= events[0][0] <= 9  # rose over >= 96 s of the 2m


def test_rolling_baseline_learns_and_an_incident_does_not_raise_it():
    [r] = parse_rule_text(
        rule(
            "{all: [{signal: engine.requests_waiting, above_baseline: 3.0}, "
            "{signal: engine.requests_waiting, above: 5}]}",
            extra="        for: 1m\n",
        ),
        "x.yaml",
    )
    rules = RuleSet(rules=[r])
    state, events = None, []
    for i in range(160):  # 40 min: 30 quiet (waiting ~4), then a jump to 20
        waiting = 20.0 if i >= 120 else 4.0 + (i % 3)
        snap = Snapshot(
            ts=T0 + 15 * i,
            node="n",
            source="vllm",
            interval_s=15,
            samples=[GaugeSample(name="vllm:num_requests_waiting", labels={"engine": "0"}, value=waiting)],
        )
        state, ev = evaluate(state, snap, rules)
        events += [(i, e) for e in ev]
    assert [e.event for _, e in events] == ["opened"]
    i, opened = events[0]
    assert 124 <= i <= 126  # `for: 1m` after the jump at tick 120
    ev = next(e for e in opened.evidence if e.baseline is not None)
    assert ev.baseline == pytest.approx(5.0, abs=1.0) and "baseline" in ev.detail
    assert RollingBaseline_median(state) < 6  # 10 minutes in the incident did not lift the baseline


def RollingBaseline_median(state) -> float:
    from tailhound.streams.baseline import RollingBaseline

    return RollingBaseline.from_dict(state.baselines["engine.requests_waiting|0"]).expected().median


def test_sla_per_model_from_settings():
    [r] = parse_rule_text(rule("{signal: engine.requests_waiting, above: {signal: sla.ttft_p99}}"), "x.yaml")
    rules = RuleSet(rules=[r])

    def snap(i: float, model: str) -> Snapshot:
        return Snapshot(
            ts=T0 + 15 * i,
            node="n",
            source="vllm",
            interval_s=15,
            samples=[
                GaugeSample(name="vllm:num_requests_waiting", labels={"engine": "0", "model_name": model}, value=3.0),
                GaugeSample(name="vllm:num_requests_running", labels={"engine": "0", "model_name": model}, value=1.0),
            ],
        )

    sla = {"ttft_p99_sla_s": {"batch-*": 10.0, "*": 1.5}}
    for model, fires in (("chat-8b", True), ("batch-70b", False)):
        state, events = None, []
        for i in range(3):
            state, ev = evaluate(state, snap(i, model), rules, sla=sla)
            events += ev
        assert bool(events) is fires, model


def test_latency_evidence_comes_with_the_load_of_the_window():
    from pathlib import Path

    from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
    from tailhound.agents.simulator.recording import iter_records
    from tailhound.streams.replay import replay_records
    from tailhound.streams.ruleset.rulefile import load_rules

    sim = FleetSimulator(SimConfig(nodes=1, seed=3), [FaultSpec.parse("kv-cache-pressure@25m+6m")])
    events = replay_records(iter_records(sim, 32), load_rules(Path(__file__).resolve().parents[2] / "rules")).events
    signals = {ev.signal for e in events for ev in e.evidence}
    assert any(s.startswith("latency.") for s in signals)
    assert {"tokens.prompt.mean", "tokens.generation.mean", "engine.requests_running"} <= signals
