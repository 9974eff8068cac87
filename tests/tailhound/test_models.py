from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from tailhound.deadletter import DeadLetter
from tailhound.incident import Evidence, IncidentEvent, Scope, incident_id
from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample, Snapshot
from tailhound.vocabulary import ROOT_CAUSES, RootCause

TTFT_LE = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0]


def a_snapshot() -> Snapshot:
    return Snapshot(
        ts=1_767_225_600.5,
        node="gpu-node-1",
        source="vllm",
        interval_s=15,
        labels={"model_name": "llama", "engine": "0"},
        samples=[
            GaugeSample(name="vllm:num_requests_waiting", value=3),
            CounterSample(name="vllm:request_success_total", labels={"finished_reason": "stop"}, value=120),
            HistogramSample(
                name="vllm:time_to_first_token_seconds",
                le=TTFT_LE,
                counts=[0, 0, 1, 3, 9, 20, 40, 60, 90, 95, 97, 98, 99, 99],
                count=100,
                sum=21.5,
            ),
        ],
    )


def test_snapshot_round_trip_and_key():
    snap = a_snapshot()
    wire = snap.model_dump_json()
    assert Snapshot.model_validate_json(wire) == snap
    assert snap.key() == b"gpu-node-1"
    assert json.loads(wire)["schema_version"] == 1
    assert "Infinity" not in wire and "inf" not in wire.lower().replace("info", "")
    assert [s.kind for s in Snapshot.model_validate_json(wire).samples] == ["gauge", "counter", "histogram"]


def test_snapshot_ignores_unknown_top_level_fields_for_forward_compatibility():
    data = json.loads(a_snapshot().model_dump_json())
    data["added_in_a_later_minor"] = 1
    assert Snapshot.model_validate(data) == a_snapshot()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(ts=-1), "ts"),
        (lambda d: d.update(node=""), "node"),
        (lambda d: d.update(node="gpu node"), "whitespace"),
        (lambda d: d.update(source="VLLM!"), "source"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d["samples"][0].update(kind="summary"), "kind"),
        (lambda d: d["samples"][1].update(value=-5), "value"),
        (lambda d: d["samples"][2].update(counts=[5, 4] + [4] * 12), "cumulative"),
        (lambda d: d["samples"][2].update(le=TTFT_LE[::-1]), "increasing"),
        (lambda d: d["samples"][2].update(count=10), "exceeds"),
        (lambda d: d["samples"][2].update(counts=[1]), "counts has 1"),
    ],
)
def test_snapshot_rejects_bad_input_with_a_clear_reason(mutate, message):
    data = json.loads(a_snapshot().model_dump_json())
    mutate(data)
    with pytest.raises(ValidationError) as exc:
        Snapshot.model_validate(data)
    assert message in str(exc.value)


def test_nan_values_are_rejected():
    with pytest.raises(ValidationError):
        GaugeSample(name="x", value=math.nan)


@given(st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=20))
def test_any_cumulative_histogram_round_trips(increments):
    counts, total = [], 0
    for inc in increments:
        total += inc
        counts.append(float(total))
    h = HistogramSample(
        name="h", le=[float(i + 1) for i in range(len(counts))], counts=counts, count=total + 1, sum=1.5
    )
    assert HistogramSample.model_validate_json(h.model_dump_json()) == h


def an_incident(**kw) -> IncidentEvent:
    fields = dict(
        incident_id=incident_id("gpu-thermal-throttle", "gpu-node-2", 1_767_226_920.0),
        event="opened",
        sequence=1,
        ts=1_767_226_920.0,
        root_cause="gpu-thermal-throttle",
        severity="critical",
        opened_at=1_767_226_920.0,
        scope=Scope(node="gpu-node-2", gpus=["3", "5"]),
        evidence=[
            Evidence(
                signal="gpu.temperature", value=89, op=">=", threshold=85, unit="C", labels={"gpu": "3"}, window_s=60
            )
        ],
        actions=["Drain gpu-node-2"],
        rule="gpu-thermal-throttle",
    )
    fields.update(kw)
    return IncidentEvent(**fields)


def test_incident_round_trip_and_key():
    ev = an_incident()
    assert IncidentEvent.model_validate_json(ev.model_dump_json()) == ev
    assert ev.key() == ev.incident_id.encode()
    assert ev.scope.describe() == "node gpu-node-2 / GPUs 3, 5"
    assert ev.evidence[0].describe() == "gpu.temperature{gpu=3} = 89 C (>= 85 C) for 60s"


def test_incident_root_cause_must_be_in_the_vocabulary():
    with pytest.raises(ValidationError):
        an_incident(root_cause="gremlins")
    with pytest.raises(ValidationError):
        an_incident(event="reopened")


def test_incident_id_is_stable_and_distinct():
    a = incident_id("r", "n1", 100.0)
    assert a == incident_id("r", "n1", 100.0)
    assert a != incident_id("r", "n2", 100.0) != incident_id("r", "n1", 115.0)


def test_vocabulary_is_complete_and_documented():
    assert {c.value for c in RootCause} == {
        "network-path",
        "ingress-saturation",
        "health-check-flapping",
        "stream-buffering",
        "capacity",
        "kv-cache-pressure",
        "gpu-memory-bandwidth",
        "gpu-thermal-throttle",
        "nvlink-degraded",
        "pcie-bottleneck",
        "retry-storm",
        "head-of-line-blocking",
        "node-degraded",
        "load-imbalance",
        "generation-length-growth",
        "gpu-hardware-error",
    }
    assert set(ROOT_CAUSES) == set(RootCause)
    assert all(info.meaning and info.title for info in ROOT_CAUSES.values())


def test_deadletter_keeps_binary_payloads():
    d = DeadLetter.from_bytes(b"\xff\x00", ts=1.0, reason="bad", stage="decode", topic="t")
    assert d.payload_encoding == "base64" and d.original_bytes() == b"\xff\x00"
    t = DeadLetter.from_bytes(b"{oops", ts=1.0, reason="bad", stage="decode", topic="t")
    assert t.payload == "{oops" and t.original_bytes() == b"{oops"
