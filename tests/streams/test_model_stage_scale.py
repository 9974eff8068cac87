"""The model stage at fleet size: its watermark is the full roster's without walking it, and a model served by more
engines than one snapshot may carry samples still closes its buckets and fires its rules."""

from __future__ import annotations

import random
from pathlib import Path

from tailhound.snapshot import LIMITS, GaugeSample, Snapshot
from tailhound.streams.model_aggregator import IDLE_WALL_S, ModelAggregator
from tailhound.streams.model_stage import ModelStage, split_rules
from tailhound.streams.rollup.watermarks import OldestLatest
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules, parse_rule_text

T0 = 1_790_000_010.0
RULES = Path(__file__).resolve().parents[2] / "rules"


def full_scan(agg: ModelAggregator, now: float | None) -> float:
    """The watermark by definition: the oldest latest time of the nodes that still count."""
    newest = max(agg.node_ts.values())
    return min(
        ts
        for n, ts in agg.node_ts.items()
        if newest - ts <= agg.idle_s or (now is not None and now - agg.seen_at.get(n, now) < IDLE_WALL_S)
    )


def waiting(node: str, ts: float, value: float, model: str = "llama") -> Snapshot:
    return Snapshot(
        ts=ts,
        node=node,
        source="vllm",
        interval_s=15,
        prev_ts=ts - 15,
        labels={"model_name": model},
        samples=[GaugeSample(name="vllm:num_requests_waiting", labels={"engine": "0"}, value=value)],
    )


def test_the_watermark_is_the_full_scans_through_late_idle_returning_and_evicted_nodes():
    rng = random.Random(30)
    for worker in (False, True):
        agg = ModelAggregator("llama", idle_s=120.0, max_nodes=40, cold_until=0.0)
        ts = dict.fromkeys((f"n{i}" for i in range(60)), T0)
        now = 1_000.0
        for step in range(3_000):
            node = f"n{rng.randrange(60 if step % 500 < 400 else 10)}"  # phases where most nodes go quiet
            ts[node] += rng.choice((15.0, 15.0, 30.0, -15.0))  # on time, a skipped bucket, or a late snapshot
            now += rng.choice((0.0, 1.0, 5.0))
            agg.add(waiting(node, ts[node], 1.0), now=now if worker else None)
            at = now if worker else None
            assert agg._oldest_active(at) == full_scan(agg, at), step
            if step == 1_500:  # a worker that takes the key over from the roster
                fresh = ModelAggregator("llama", idle_s=120.0, max_nodes=40)
                fresh.restore(agg.roster(), at)
                assert fresh._oldest_active(at) == full_scan(fresh, at)


def test_the_heap_stays_bounded_by_the_roster():
    oldest, latest = OldestLatest(), {}
    for i in range(10_000):
        node = f"n{i % 50}"
        latest[node] = float(i)
        oldest.push(node, float(i), latest)
    assert len(oldest._heap) <= 2 * len(latest) + 64
    assert oldest.oldest(latest, lambda n, ts: True) == 9_950.0


QUEUE = """
groups:
  - name: t
    rules:
      - name: model-queue
        scope: model
        when:
          all:
            - signal: engine.requests_waiting
              reduce: sum
              above: {signal: engine.requests_waiting, reduce: count, times: 2}
            - {signal: engine.requests_waiting, reduce: min, above: 0}
        for: 0s
        severity: warning
        root_cause: capacity
"""


def test_a_model_of_20000_engines_closes_its_buckets_and_its_rules_fire():
    engines = 20_000
    assert engines * 2 > LIMITS.max_samples  # its synthetic snapshot carries more samples than a node may send
    pack = load_rules(RULES)
    _, rules = split_rules(RuleSet(rules=pack.rules + parse_rule_text(QUEUE, "t.yaml"), files=pack.files))
    stage = ModelStage(rules)  # the default model-stage rules judge it too
    events = []
    for b in range(2):
        for i in range(engines):
            events += stage.add("llama", waiting(f"gpu-{i:05d}", T0 + 15 * b, 5.0))
    assert stage.aggregators["llama"].closed_until == T0 + 15  # the first bucket closed on the last node's next
    (opened,) = [e for e in events if e.event == "opened"]
    assert opened.rule == "model-queue" and opened.scope.model == "llama" and opened.ts == T0 + 15
    assert stage.store.get("model:llama") is not None


def test_a_reduction_over_every_engine_is_computed_once_per_bucket_not_once_per_engine(monkeypatch):
    from tailhound.streams.ruleset import plan as rule_plan

    calls = []
    real = rule_plan._reduce
    monkeypatch.setattr(rule_plan, "_reduce", lambda how, vals: calls.append(how) or real(how, vals))
    _, rules = split_rules(load_rules(RULES))  # load-imbalance: per engine, the min over every engine
    stage = ModelStage(rules)
    for b in range(2):
        for i in range(500):
            stage.add("llama", waiting(f"gpu-{i:03d}", T0 + 15 * b, 5.0 if i else 9.0))
    assert stage.aggregators["llama"].closed_until == T0 + 15
    assert 0 < len(calls) < 50


def test_the_peer_median_from_sorted_values_is_the_median_of_the_others():
    from tailhound.streams.ruleset.condition_eval import peer_median
    from tailhound.streams.ruleset.plan import _median_without

    rng = random.Random(7)
    for n in range(0, 12):
        vals = {f"e{i}": float(rng.choice((1, 2, 2, 3, 5, 8))) for i in range(n)}
        ordered = sorted(vals.values())
        for entity in [*vals, "absent"]:
            assert _median_without(ordered, vals.get(entity)) == peer_median(vals, entity), (vals, entity)


def test_a_roster_given_from_outside_is_indexed_before_it_is_read():
    agg = ModelAggregator("llama", node_ts={"n1": T0, "n2": T0 + 15})
    assert agg._oldest_active(None) == T0
    agg.node_ts = {"n1": T0 + 30, "n2": T0 + 45}
    assert agg._oldest_active(None) == T0 + 30
