"""The model stage: buckets per model closed by every node's progress, engines added up, model- and
fleet-scope rules, incidents scoped to the model or the fleet."""

from __future__ import annotations

import itertools
import random

from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.histograms import histogram_quantile
from tailhound.streams.model_aggregator import FLEET, NODES_WITH_CAUSE, ModelAggregator
from tailhound.streams.model_stage import ModelStage, model_keys, split_rules
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text

T0 = 1_790_000_010.0
LE = [0.1, 0.5, 1.0, 2.0]


def engine_snapshot(
    node: str, ts: float, model: str = "llama", waiting: float = 1.0, slow: bool = False, tokens: float = 100.0
) -> Snapshot:
    counts = [0.0, 2.0, 6.0, 10.0] if slow else [6.0, 9.0, 10.0, 10.0]
    labels = {"engine": "0", "model_name": model}
    return Snapshot(
        ts=ts,
        node=node,
        source="vllm",
        interval_s=15,
        prev_ts=ts - 15,
        labels={"instance": node},
        samples=[
            HistogramSample(
                name="vllm:time_to_first_token_seconds",
                labels=labels,
                le=LE,
                counts=counts,
                count=10,
                sum=12.0 if slow else 2.0,
                delta=HistogramDelta(counts=counts, count=10, sum=12.0 if slow else 2.0),
            ),
            CounterSample(name="vllm:generation_tokens_total", labels=labels, value=tokens, delta=tokens),
            GaugeSample(name="vllm:num_requests_waiting", labels=labels, value=waiting),
        ],
    )


def test_keys_are_the_models_served_and_the_fleet():
    assert model_keys(engine_snapshot("n1", T0)) == ["llama", FLEET]
    assert model_keys(engine_snapshot("n1", T0), fleet=False) == ["llama"]
    dcgm = Snapshot(ts=T0, node="n1", source="dcgm", samples=[GaugeSample(name="x", value=1)])
    assert model_keys(dcgm) == []


def test_a_bucket_closes_when_every_node_has_moved_past_it_and_adds_engines_up():
    agg = ModelAggregator("llama")
    assert agg.add(engine_snapshot("n1", T0)) == []
    assert agg.add(engine_snapshot("n2", T0, slow=True, waiting=7)) == []
    assert agg.add(engine_snapshot("n1", T0 + 15)) == []  # n2 has not moved on yet
    (synth,) = agg.add(engine_snapshot("n2", T0 + 15))
    assert synth.node == "model:llama" and synth.labels == {"model_name": "llama"} and synth.ts == T0 + 15
    hist = next(s for s in synth.samples if isinstance(s, HistogramSample))
    assert hist.delta.counts == [6.0, 11.0, 16.0, 20.0] and hist.delta.count == 20 and hist.labels["engine"] == "all"
    merged_p99 = histogram_quantile(0.99, hist.le, hist.delta.counts, hist.delta.count)
    assert merged_p99 == histogram_quantile(0.99, LE, [6.0, 11.0, 16.0, 20.0], 20)  # the model's own P99
    tokens = next(s for s in synth.samples if isinstance(s, CounterSample))
    assert tokens.delta == 200.0
    waiting = {s.labels["engine"]: s.value for s in synth.samples if s.name == "vllm:num_requests_waiting"}
    assert waiting == {"n1/0": 1.0, "n2/0": 7.0}
    assert next(s.value for s in synth.samples if s.name == NODES_WITH_CAUSE) == 0.0


def test_once_every_node_has_reported_the_result_does_not_depend_on_how_nodes_interleave():
    snaps = [
        engine_snapshot(n, T0 + 15 * i, slow=(n == "n2" and i > 3), waiting=i)
        for i in range(12)
        for n in ("n1", "n2", "n3")
    ]
    by_node = {n: [s for s in snaps if s.node == n] for n in ("n1", "n2", "n3")}

    def run(order: list[Snapshot]) -> list[str]:
        agg = ModelAggregator("llama")
        return [s.model_dump_json() for snap in order for s in agg.add(snap)]

    reference = run(snaps)
    rng = random.Random(4)
    for _ in range(5):  # each node's snapshots stay in order (one partition), nodes interleave at random
        iters = {n: iter(v[1:]) for n, v in by_node.items()}
        order = [v[0] for v in by_node.values()]  # (a node not seen yet cannot hold a bucket open)
        while iters:
            n = rng.choice(sorted(iters))
            nxt = next(iters[n], None)
            if nxt is None:
                del iters[n]
            else:
                order.append(nxt)
        assert run(order) == reference


def test_a_silent_node_stops_holding_buckets_and_its_late_data_is_counted():
    agg = ModelAggregator("llama", idle_s=60)
    agg.add(engine_snapshot("n2", T0))
    out = list(itertools.chain.from_iterable(agg.add(engine_snapshot("n1", T0 + 15 * i)) for i in range(8)))
    assert out  # n2 went quiet: after 60 s it no longer holds the buckets
    agg.add(engine_snapshot("n2", T0 + 15))
    assert agg.late == 1


def test_the_fleet_adds_every_model_up():
    agg = ModelAggregator(FLEET)
    agg.add(engine_snapshot("n1", T0, model="llama"))
    agg.add(engine_snapshot("n2", T0, model="mistral"))
    agg.add(engine_snapshot("n1", T0 + 15, model="llama"))
    (synth,) = agg.add(engine_snapshot("n2", T0 + 15, model="mistral"))
    assert synth.node == "fleet" and synth.labels == {}
    (hist,) = [s for s in synth.samples if isinstance(s, HistogramSample)]
    assert hist.delta.count == 20 and "model_name" not in hist.labels


RULES = """
groups:
  - name: t
    rules:
      - name: model-slow
        scope: model
        when: {signal: latency.ttft.p99, reduce: max, above: 1.0}
        for: 30s
        severity: warning
        root_cause: capacity
      - name: fleet-queue
        scope: fleet
        when: {signal: engine.requests_waiting, reduce: sum, above: 10}
        for: 0s
        severity: warning
        root_cause: capacity
"""


def test_model_and_fleet_rules_open_incidents_scoped_to_the_model_and_the_fleet():
    rules = RuleSet(rules=parse_rule_text(RULES, "t.yaml"))
    node_rules, model_rules = split_rules(rules)
    assert node_rules.rules == [] and len(model_rules.rules) == 2
    stage = ModelStage(model_rules)
    events = []
    for i in range(12):
        for n in ("n1", "n2"):
            events += stage.feed(engine_snapshot(n, T0 + 15 * i, slow=i >= 4, waiting=8 if i >= 6 else 1))
    opened = {e.rule: e for e in events if e.event == "opened"}
    assert set(opened) == {"model-slow", "fleet-queue"}
    assert opened["model-slow"].scope.model == "llama" and opened["model-slow"].scope.node is None
    assert opened["model-slow"].summary.endswith("on model llama")
    assert opened["fleet-queue"].scope.describe() == "fleet"


def test_a_node_level_cause_keeps_the_model_rule_quiet():
    rules = RuleSet(
        rules=parse_rule_text(
            RULES.replace(
                "when: {signal: latency.ttft.p99, reduce: max, above: 1.0}",
                "when: {all: [{signal: latency.ttft.p99, reduce: max, above: 1.0},"
                " {signal: model.nodes_with_cause, below: 1}]}",
            ),
            "t.yaml",
        )
    )
    stage = ModelStage(split_rules(rules)[1])
    events = []
    for i in range(12):
        for n in ("n1", "n2"):
            causes = ("gpu-thermal-throttle",) if n == "n2" else ()
            events += stage.feed(engine_snapshot(n, T0 + 15 * i, slow=i >= 4), causes)
    assert not [e for e in events if e.rule == "model-slow"]
