"""Each engine of a model against the other engines serving it (streams/engine_peers.py) and the rule that
reads it, ``node-slower-than-peers``, in the model stage: no warm-up, node-scoped, quiet while the node has
a cause that explains it."""

from __future__ import annotations

from pathlib import Path

from tailhound.catalog import default_catalog
from tailhound.snapshot import HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.engine_peers import (
    MIN_REQUESTS,
    NODE_EXPLAINED,
    PEER_WINDOW_S,
    REQUEST_RATE,
    TPOT_MEAN,
    EnginePeerWindows,
    peer_histograms,
)
from tailhound.streams.model_stage import ModelStage, runs_in_model_stage, split_rules
from tailhound.streams.ruleset.rulefile import load_rules

T0 = 1_790_000_010.0
RULES = Path(__file__).resolve().parents[2] / "rules"
LE = [0.02, 0.05, 0.1, 0.5]


def _hist(name: str, count: float, mean: float) -> HistogramSample:
    counts = [0.0, count if mean <= 0.05 else 0.0, count, count]
    delta = HistogramDelta(counts=counts, count=count, sum=count * mean)
    return HistogramSample(
        name=name, labels={"model_name": "llama"}, le=LE, counts=counts, count=count, sum=count * mean, delta=delta
    )


def engine(node: str, ts: float, tpot: float = 0.04, requests: float = 30.0, itl_only: bool = False) -> Snapshot:
    samples = [
        _hist("vllm:time_per_output_token_seconds", requests * 200, tpot * 0.9),
        _hist("vllm:e2e_request_latency_seconds", requests, 8.0),
    ]
    if not itl_only:  # V1 >= 0.11: the per-request histogram is preferred
        samples.append(_hist("vllm:request_time_per_output_token_seconds", requests, tpot))
    return Snapshot(
        ts=ts,
        node=node,
        source="vllm",
        interval_s=15,
        prev_ts=ts - 15,
        labels={"model_name": "llama", "engine": "0"},
        samples=samples,
    )


def gauges(win: EnginePeerWindows, now: float, explained: frozenset[str] = frozenset()) -> dict[tuple[str, str], float]:
    return {(g.name, g.labels["engine"]): g.value for g in win.gauges(now, "vllm", explained)}


def test_the_window_keeps_each_engines_mean_tpot_and_request_rate():
    win = EnginePeerWindows(peer_histograms(default_catalog()))
    for i in range(4):
        win.add(engine("n1", T0 + 15 * i), "llama")
        win.add(engine("n2", T0 + 15 * i, tpot=0.08), "llama")
    got = gauges(win, T0 + 45, frozenset({"n2"}))
    assert got[(TPOT_MEAN, "n1/0")] == 0.04 and got[(TPOT_MEAN, "n2/0")] == 0.08  # the per-request histogram
    assert got[(REQUEST_RATE, "n1/0")] == 2.0  # 120 requests over 60 s
    assert got[(NODE_EXPLAINED, "n1/0")] == 0.0 and got[(NODE_EXPLAINED, "n2/0")] == 1.0


def test_the_token_histogram_stands_in_where_no_per_request_one_exists_and_old_data_leaves():
    win = EnginePeerWindows(peer_histograms(default_catalog()))
    win.add(engine("n1", T0, itl_only=True), "llama")
    assert abs(gauges(win, T0)[(TPOT_MEAN, "n1/0")] - 0.036) < 1e-9
    assert gauges(win, T0 + PEER_WINDOW_S) == {}  # silent for a whole window: forgotten


def test_too_few_requests_give_no_tpot_mean():
    win = EnginePeerWindows(peer_histograms(default_catalog()))
    win.add(engine("n1", T0, requests=MIN_REQUESTS - 1), "llama")
    assert (TPOT_MEAN, "n1/0") not in gauges(win, T0)


def test_the_peer_rule_runs_in_the_model_stage():
    rules = load_rules(RULES)
    rule = rules.by_name("node-slower-than-peers")
    assert rule is not None and runs_in_model_stage(rule) and rule.scope.value == "engine"
    node, model = split_rules(rules)
    assert "node-slower-than-peers" in {r.name for r in model.rules}
    assert "node-slower-than-peers" not in {r.name for r in node.rules}


def _run(slow_node: str, minutes: float, causes: dict[str, tuple[str, ...]] | None = None) -> list:
    _, model_rules = split_rules(load_rules(RULES))
    stage = ModelStage(model_rules)
    events = []
    for i in range(int(minutes * 4)):
        ts = T0 + 15 * i
        for node in ("n1", "n2", "n3"):
            snap = engine(node, ts, tpot=0.09 if node == slow_node else 0.04)
            events += stage.feed(snap, (causes or {}).get(node, ()))
    return events


def test_a_node_slower_than_its_peers_at_the_same_load_is_its_own_node_degraded_incident_without_warm_up():
    events = _run("n2", 10)
    opened = [e for e in events if e.event == "opened"]
    assert len(opened) == 1
    ev = opened[0]
    assert ev.root_cause == "node-degraded" and ev.rule == "node-slower-than-peers"
    assert ev.scope.node == "n2" and ev.scope.model == "llama" and not ev.scope.nodes
    assert (ev.ts - T0) / 60 <= 6  # 5 minutes held, from the first minute of data: no baseline needed
    assert any(e.signal == "model.engine_tpot_mean" and "median of its 2 peers" in e.detail for e in ev.evidence)
    assert all("model:" not in a for a in ev.actions) and any(a.startswith("n2 decodes slower") for a in ev.actions)


def test_no_page_while_the_node_has_a_cause_that_explains_it_or_when_all_engines_are_alike():
    assert _run("n2", 10, {"n2": ("gpu-thermal-throttle",)}) == []
    assert _run("none", 10) == []
