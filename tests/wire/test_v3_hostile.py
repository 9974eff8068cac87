"""A hostile version-3 message is a dead letter with a countable reason, never a crash: every limit of version 1
holds, lists over their limits are refused at their header, ids point into their tables, and nothing the
decoder lets through is something the version-1 schema refuses."""

from __future__ import annotations

import math
import random
import time

import msgspec
import pytest

from tailhound.snapshot import LIMITS, CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.codec import Malformed, decode_message
from tailhound.streams.intake import Gate
from tailhound.streams.intake_stats import IntakeStats
from tailhound.wire import Refused, decode_v3, encode_message, snapshot_json
from tailhound.wire.v3 import Hist, HistDelta, Message, to_part

T0 = 1.7e9


def good() -> Snapshot:
    hist = HistogramSample(
        name="h_seconds",
        labels={"model_name": "m"},
        le=[0.1, 1.0],
        counts=[1.0, 3.0],
        count=4.0,
        sum=2.5,
        delta=HistogramDelta(counts=[1.0, 2.0], count=2.0, sum=1.0),
    )
    return Snapshot(
        ts=T0,
        node="gpu-node-1",
        source="vllm",
        interval_s=15.0,
        prev_ts=T0 - 15,
        samples=[
            GaugeSample(name="g", labels={"gpu": "0"}, value=1.5),
            CounterSample(name="c_total", labels={"gpu": "0"}, value=5.0, delta=1.0),
            hist,
        ],
    )


def raw(node: str = "gpu-node-1", parts: list | None = None, version: int = 3, **changes) -> bytes:
    """A version-3 message of `good()` with the part's fields in `changes` replaced (nothing checked)."""
    part = msgspec.structs.replace(to_part(good()), **changes)
    return msgspec.msgpack.encode(Message(version, node, parts if parts is not None else [part]))


def _hist(**changes) -> list[Hist]:
    base = to_part(good()).hists[0]
    return [msgspec.structs.replace(base, **changes)]


N = LIMITS.max_samples + 1
CASES = [
    (encode_message(good())[:-3], "bad_msgpack"),
    (b"\x93\x03\xa1n\xdd\x7f\xff\xff\xff", "invalid"),  # claims 2**31 parts, has none
    (raw(version=4), "invalid"),
    (raw(node="gpu node"), "invalid"),
    (raw(parts=[]), "invalid"),
    (raw(parts=[to_part(good())] * (LIMITS.max_bundle_snapshots + 1)), "invalid"),
    (raw(source="Bad Source"), "invalid"),
    (raw(ts=math.nan), "non_finite"),
    (raw(ts=-1.0), "out_of_range"),
    (raw(interval_s=LIMITS.max_interval_s * 2), "out_of_range"),
    (raw(prev_ts=math.inf), "non_finite"),
    (raw(values=[math.nan, 5.0, 4.0]), "non_finite"),
    (raw(values=[1.0, -5.0, 4.0]), "out_of_range"),
    (raw(deltas=[-1.0]), "out_of_range"),
    (raw(deltas=[math.inf]), "non_finite"),
    (raw(labels={f"l{i}": "v" for i in range(LIMITS.max_labels + 1)}), "too_many_labels"),
    (raw(sets=[list(range(2 * LIMITS.max_labels + 2))]), "too_many_labels"),
    (
        raw(strings=["g", "gpu", "0", "c_total", "h_seconds", "model_name", "v" * (LIMITS.max_label_value + 1)]),
        "label_too_long",
    ),
    (
        raw(strings=["g", "l" * (LIMITS.max_label_name + 1), "0", "c_total", "h_seconds", "model_name", "m"]),
        "label_too_long",
    ),
    (raw(kinds=b"\x00" * N, names=[0] * N, labelsets=[0] * N, values=[1.0] * N), "too_many_samples"),
    (raw(layouts=[list(range(1, LIMITS.max_buckets + 2))]), "too_many_buckets"),
    (raw(hists=_hist(counts=[0] * (LIMITS.max_buckets + 1))), "too_many_buckets"),
    (raw(names=[0, 99, 4]), "invalid"),  # an id past its table
    (raw(names=[-1, 3, 4]), "invalid"),  # a negative id (Python would read the table from its end)
    (raw(labelsets=[0, 0, 7]), "invalid"),
    (raw(sets=[[1, 2, 1]]), "invalid"),  # an odd label set
    (raw(sets=[[1, 2, 1, 2]], labelsets=[0, 0, 0]), "invalid"),  # one label twice
    (raw(kinds=b"\x00\x01\x07"), "invalid"),
    (raw(kinds=b"\x00\x01\x01"), "invalid"),  # a counter without its delta
    (raw(deltas=[1.0, 2.0]), "invalid"),  # more deltas than counters
    (raw(resets=[0]), "invalid"),  # a gauge cannot reset
    (raw(resets=[9]), "invalid"),
    (raw(layouts=[[1.0, 0.5]]), "invalid"),
    (raw(layouts=[[0.1, math.inf]]), "invalid"),
    (raw(layouts=[[]]), "invalid"),
    (raw(hists=_hist(layout=5)), "invalid"),
    (raw(hists=_hist(counts=[3, -2])), "out_of_range"),  # increases must be >= 0
    (raw(hists=_hist(steps=False, counts=[3.0, 1.0])), "invalid"),  # not cumulative
    (raw(hists=_hist(counts=[1, 9])), "out_of_range"),  # more than `count`
    (raw(hists=_hist(counts=[1])), "invalid"),  # fewer counts than bounds
    (raw(hists=_hist(sum=math.nan)), "non_finite"),
    (raw(hists=_hist(delta=HistDelta([1, 1], math.nan, 1.0))), "non_finite"),
    (raw(hists=_hist(delta=HistDelta([1, 1], -1.0, 1.0))), "out_of_range"),
    (raw(hists=_hist(steps=False, delta=HistDelta([-1.0, 1.0], 1.0, 1.0))), "out_of_range"),
    (raw(hists=_hist(delta=HistDelta([1], 1.0, 1.0))), "invalid"),
    (raw(strings=["", "gpu", "0", "c_total", "h_seconds", "model_name", "m"]), "invalid"),  # an empty name
    (raw(labels={"a": 5}), "invalid"),
    (raw(ref=True, layout_id=b"x" * 16), "unknown_layout"),  # a layout this worker never saw
    (raw(layout_id=b"x" * 17), "invalid"),
]


@pytest.mark.parametrize(("message", "kind"), CASES)
def test_every_refusal_has_a_countable_kind(message, kind):
    out = decode_v3(message)
    assert isinstance(out, Refused), message[:80]
    assert out.kind == kind, out.reason
    assert len(out.reason) <= 1000
    stats = IntakeStats()
    rejected = Gate(stats=stats).admit_all(message, b"gpu-node-1", arrival=T0)
    assert rejected.kind == kind and stats.rejected == {kind: 1}


def test_the_good_message_is_admitted():
    parts = Gate().admit_all(raw(), b"gpu-node-1", arrival=T0)
    assert [Snapshot.model_validate_json(snapshot_json(p)) for p in parts] == [good()]


def test_the_worker_rejects_a_wrong_key_a_future_time_and_an_oversized_message():
    gate = Gate(max_message_bytes=10_000)
    assert gate.admit_all(raw(), b"gpu-node-2", arrival=T0).kind == "wrong_key"
    assert gate.admit_all(raw(ts=T0 + 3600), b"gpu-node-1", arrival=T0).kind == "future_ts"
    big = raw(error="x" * 4000, labels={f"l{i}": "v" * 300 for i in range(40)})
    out = decode_message(big, max_bytes=10_000)
    assert isinstance(out, Malformed) and out.kind == "oversized"
    assert gate.admit_all(big, b"gpu-node-1", arrival=T0).kind == "oversized"


def test_a_huge_claimed_list_is_refused_at_its_header():
    # a 2**31-sample claim in the middle of a valid message: refused without reading (or allocating) it
    head = raw()
    hostile = head.replace(b"\xc4\x03\x00\x01\x02", b"\xc6\x7f\xff\xff\xff", 1)
    assert hostile != head
    started = time.process_time()
    out = decode_v3(hostile)
    assert isinstance(out, Refused) and out.kind in ("too_many_samples", "bad_msgpack")
    assert time.process_time() - started < 1.0  # bounded: nothing near 2 GB was read


def test_mutated_messages_never_raise_and_never_let_through_what_version_1_refuses():
    rng = random.Random(30)
    base = bytearray(raw())
    accepted = 0
    for _ in range(400):
        data = bytearray(base)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(2, len(data))] = rng.randrange(256)
        out = decode_v3(bytes(data))
        if isinstance(out, Refused):
            continue
        accepted += 1
        for part in out:  # whatever is read must be a valid version-1 snapshot
            Snapshot.model_validate_json(snapshot_json(part))
    assert accepted  # some mutations only change values
