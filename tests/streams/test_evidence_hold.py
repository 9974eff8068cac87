"""Time to fire that follows the strength of the evidence: `for` is the longest hold, `min_for` the shortest
(streams/ruleset/condition_eval.py: strength, required_hold; streams/stages/rules.py)."""

from __future__ import annotations

import pytest

from tailhound.errors import RuleFileError
from tailhound.streams.correlate import _wait_for_better
from tailhound.streams.episode import Firing
from tailhound.streams.evaluator import evaluate
from tailhound.streams.ruleset.condition_eval import EvalContext, required_hold, strength
from tailhound.streams.ruleset.conditions import AllOf, AnyOf, SignalCondition
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text
from tests.factories import dcgm_snapshot

T0 = 1_767_225_600.0


def ctx(values: dict[str, dict[str, float]], baselines: dict[str, float] | None = None) -> EvalContext:
    base = baselines or {}
    return EvalContext(now=T0, values=values, baseline=lambda s, _e: (base[s], "rolling") if s in base else None)


def leaf(**kw) -> SignalCondition:
    return SignalCondition.model_validate(kw)


@pytest.mark.parametrize(
    ("cond", "values", "baselines", "expected"),
    [
        # 3x its baseline against a 2x bound: twice as far from normal as the bound
        (
            {"signal": "latency.tpot.p95", "above_baseline": 2.0},
            {"latency.tpot.p95": {"0": 0.3}},
            {"latency.tpot.p95": 0.1},
            2.0,
        ),
        # just past the bound
        (
            {"signal": "latency.tpot.p95", "above_baseline": 2.0},
            {"latency.tpot.p95": {"0": 0.201}},
            {"latency.tpot.p95": 0.1},
            1.01,
        ),
        # half the peers' clock against 0.8x of it: (1 - 0.5) / (1 - 0.8)
        (
            {"signal": "gpu.sm_clock", "below": {"peers": 0.8}},
            {"gpu.sm_clock": {"0": 1000, "1": 2000, "2": 2000}},
            {},
            2.5,
        ),
        # a guard that does not point away from normal says nothing about strength
        (
            {"signal": "engine.arrival_rate", "reduce": "sum", "at_least": {"baseline": 0.7}},
            {"engine.arrival_rate": {"0": 5.0}},
            {"sum(engine.arrival_rate)": 5.0},
            1.0,
        ),
        # a constant: the multiple of the bound
        ({"signal": "latency.queue.mean", "above": 0.2}, {"latency.queue.mean": {"0": 0.6}}, {}, 3.0),
        # `above: 0`: whether, not how far
        ({"signal": "engine.preemptions.rate", "above": 0}, {"engine.preemptions.rate": {"0": 9.0}}, {}, 1.0),
        # capped: a bound close to 1x reads a small change as a huge multiple
        (
            {"signal": "latency.tpot.mean", "above_baseline": 1.1},
            {"latency.tpot.mean": {"0": 0.5}},
            {"latency.tpot.mean": 0.1},
            4.0,
        ),
    ],
)
def test_leaf_strength(cond, values, baselines, expected):
    assert strength(leaf(**cond), ctx(values, baselines), "0", "engine") == pytest.approx(expected, abs=0.01)


def test_all_multiplies_and_any_takes_the_strongest_holding_branch():
    values = {"latency.queue.mean": {"0": 0.6}, "tokens.generation.mean": {"0": 2000.0}}
    q, g = leaf(signal="latency.queue.mean", above=0.2), leaf(signal="tokens.generation.mean", above=1000)
    c = ctx(values)
    assert strength(AllOf(all=[q, g]), c, "0", "engine") == pytest.approx(6.0)
    not_holding = leaf(signal="latency.queue.mean", above=5.0)
    assert strength(AnyOf(any=[not_holding, g]), c, "0", "engine") == pytest.approx(2.0)


def test_required_hold_runs_from_for_down_to_min_for():
    cond = leaf(signal="latency.queue.mean", above=0.2)
    weak, medium, strong = (ctx({"latency.queue.mean": {"0": v}}) for v in (0.201, 0.4, 4.0))
    assert required_hold(cond, strong, "0", "engine", 300.0, None, 299.0) == 300.0  # no min_for: always `for`
    assert required_hold(cond, strong, "0", "engine", 300.0, 30.0, 29.0) == 300.0  # not even min_for yet
    assert required_hold(cond, strong, "0", "engine", 300.0, 30.0, 30.0) == 30.0
    assert required_hold(cond, medium, "0", "engine", 300.0, 30.0, 30.0) == pytest.approx(75.0)  # 300 / 2**2
    assert required_hold(cond, weak, "0", "engine", 300.0, 30.0, 30.0) == pytest.approx(300.0, rel=0.01)


RULE = """
groups:
  - name: t
    rules:
      - name: hot-and-slow
        scope: gpu
        when:
          all:
            - {signal: gpu.temperature, at_least: 85}
            - {signal: gpu.sm_clock_ratio, below: 0.8}
        for: 5m
        min_for: 30s
        keep_firing_for: 1m
        severity: critical
        root_cause: gpu-thermal-throttle
"""


def _opened_after(hot: tuple[float, float], ticks: int = 30) -> float | None:
    rules = RuleSet(rules=parse_rule_text(RULE, "t.yaml"))
    state, opened = None, None
    for i in range(ticks):
        state, events = evaluate(state, dcgm_snapshot(T0 + 15 * i, hot={3: hot}), rules)
        if opened is None and any(e.event == "opened" for e in events):
            opened = 15.0 * i
    return opened


def test_strong_evidence_fires_at_min_for_and_weak_evidence_waits_for_for():
    # 95 C and the SM clock at a quarter of its max: two scrapes past the first one (30 s)
    assert _opened_after((95.0, 495.0)) == 30.0
    # 85 C and the clock just under 0.8 of its max: the whole 5 minutes
    assert _opened_after((85.0, 1580.0), ticks=24) == 300.0


def test_in_between_evidence_fires_in_between():
    # 90 C, clock at 0.5 of max: strength (90/85) * (0.8/0.5) = 1.69 -> 300 / 2.87 = 105 s (the next scrape: 105)
    opened = _opened_after((90.0, 990.0))
    assert opened is not None and 30.0 < opened < 300.0


def test_min_for_cannot_exceed_for():
    with pytest.raises(RuleFileError, match="min_for"):
        parse_rule_text(RULE.replace("min_for: 30s", "min_for: 10m"), "t.yaml")


def test_settle_wait_counts_from_when_a_cause_fired_not_since_plus_for():
    rules = RuleSet(
        rules=parse_rule_text(
            RULE
            + """
      - name: kv
        scope: engine
        when: {signal: engine.kv_cache_usage, at_least: 0.95}
        for: 1m
        severity: critical
        root_cause: kv-cache-pressure
""",
            "t.yaml",
        )
    )
    # hot-and-slow pending would rank better; kv fired 150 s ago (its `for` of 60 s after since would say 210 s)
    now = T0 + 1000.0
    fired = {"kv": Firing(entities=["0"], since=now - 400.0, fired=now - 150.0)}
    assert not _wait_for_better(fired, {"hot-and-slow"}, rules.index, now)
    early = {"kv": Firing(entities=["0"], since=now - 400.0, fired=now - 60.0)}
    assert _wait_for_better(early, {"hot-and-slow"}, rules.index, now)


def test_a_zero_flag_under_its_bound_is_a_guard_not_strong_evidence():
    # `model.engine_node_explained below: 1` at 0: no cause explains the node (whether, not how far)
    flag = leaf(signal="model.engine_node_explained", below=1)
    assert strength(flag, ctx({"model.engine_node_explained": {"0": 0.0}}), "0", "engine") == 1.0
