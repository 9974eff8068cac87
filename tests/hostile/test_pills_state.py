"""Poison pills against the node state: a snapshot whose state record would not fit, or that names a model the
model stage cannot key, is a dead letter with its reason; the node's good traffic goes on being diagnosed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.wire import encode_snapshot
from tailhound.snapshot import LIMITS, CounterSample, GaugeSample, Snapshot
from tailhound.streams.intake import Gate, Rejection
from tailhound.streams.processor import (
    STATE_TOO_LARGE,
    TOO_MANY_SOURCES,
    MemoryStateStore,
    SnapshotProcessor,
    Unprocessable,
)
from tailhound.streams.replay import replay_snapshots
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules, parse_rule_text
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")
T0 = 1_767_225_600.0
HOT = {5: (90.0, 1000.0)}


def many_gpus(ts: float, n: int = 3000) -> Snapshot:
    """A valid ~500 KB dcgm snapshot of one node with `n` GPU ids (the 1 MB state record attack)."""
    samples = [
        GaugeSample(name=name, labels={"gpu": str(g), "UUID": f"GPU-{g}"}, value=v)
        for g in range(n)
        for name, v in (("DCGM_FI_DEV_GPU_TEMP", 90.0), ("DCGM_FI_DEV_SM_CLOCK", 900.0))
    ]
    return Snapshot(ts=ts, node="gpu-node-1", source="dcgm", interval_s=15, samples=samples)


def engine(ts: float, model: str, node: str = "gpu-node-1") -> Snapshot:
    labels = {"engine": "0", "model_name": model}
    return Snapshot(
        ts=ts,
        node=node,
        source="vllm",
        interval_s=15,
        prev_ts=ts - 15,
        labels={"instance": node},
        samples=[
            CounterSample(name="vllm:generation_tokens_total", labels=labels, value=100, delta=100),
            GaugeSample(name="vllm:num_requests_waiting", labels=labels, value=9.0),
        ],
    )


def test_3000_gpu_ids_are_rejected_at_admission_with_the_limit_named():
    snap = many_gpus(T0)
    raw = encode_snapshot(snap)
    assert len(raw) < LIMITS.max_message_bytes  # valid and within the message limit: only the count is hostile
    got = Gate().admit_all(raw, b"gpu-node-1", arrival=T0)
    assert isinstance(got, Rejection) and got.kind == "too_many_gpus" and "at most 256" in got.reason


def test_a_state_record_over_the_produce_limit_is_refused_and_the_node_goes_on():
    p, store = SnapshotProcessor(RULES, max_state_bytes=LIMITS.max_state_bytes), MemoryStateStore()
    r = p.step(None, dcgm_snapshot(T0))
    store["gpu-node-1"] = r.state
    with pytest.raises(Unprocessable) as err:  # 3,000 GPUs past admission (a lower cap elsewhere): sized anyway
        p.step(store.get("gpu-node-1"), many_gpus(T0 + 15))
    assert err.value.kind == STATE_TOO_LARGE and "bytes" in str(err.value)
    events = []
    for i in range(2, 20):  # the good traffic after it is still diagnosed
        r = p.step(store.get("gpu-node-1"), dcgm_snapshot(T0 + 15 * i, hot=HOT))
        if r.changed:
            store["gpu-node-1"] = r.state
        events += r.events
    assert [e.root_cause for e in events if e.event == "opened"] == ["gpu-thermal-throttle"]


def test_a_node_with_too_many_instances_refuses_new_ones():
    p = SnapshotProcessor(RULES, max_sources=4)
    raw = None
    for i in range(4):
        r = p.step(raw, engine(T0 + i, "llama").model_copy(update={"labels": {"instance": f"i{i}"}}))
        raw = r.state if r.changed else raw
    with pytest.raises(Unprocessable) as err:
        p.step(raw, engine(T0 + 5, "llama").model_copy(update={"labels": {"instance": "i99"}}))
    assert err.value.kind == TOO_MANY_SOURCES


@pytest.mark.parametrize("model", ["Llama 3.1 70B", "llama\x00", "m" * 195])
def test_a_model_name_no_stage_can_key_is_rejected_at_admission(model):
    got = Gate().admit_all(encode_snapshot(engine(T0, model)), b"gpu-node-1", arrival=T0)
    assert isinstance(got, Rejection) and got.kind == "bad_name" and got.stage == "entities"


MODEL_RULE = """
groups:
  - name: t
    rules:
      - name: model-queue
        scope: model
        when: {signal: engine.requests_waiting, reduce: sum, above: 5}
        for: 30s
        severity: warning
        root_cause: capacity
"""


def test_replay_with_a_model_name_with_a_space_finishes_and_diagnoses_the_good_model():
    rules = RuleSet(rules=parse_rule_text(MODEL_RULE, "t.yaml"))
    snaps = []
    for i in range(20):
        snaps += [engine(T0 + 15 * i, "llama", "n1"), engine(T0 + 15 * i, "Llama 3.1 70B", "n2")]
    result = replay_snapshots(snaps, rules)
    assert result.rejected["bad_name"] == 20
    assert {e.scope.model for e in result.events if e.event == "opened"} == {"llama"}
