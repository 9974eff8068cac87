from __future__ import annotations

import json
import math
import zlib
from pathlib import Path

import pytest
from faust.serializers import codecs

from tailhound.streams.codec import (
    CODEC_NAME,
    MAX_STATE_JSON_BYTES,
    STATE_CODEC_NAME,
    Malformed,
    decode_snapshot,
    inflate_state,
    register,
)
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import load_rules
from tests.factories import dcgm_snapshot

RULES = load_rules(Path(__file__).resolve().parents[2] / "rules")


def test_registered_codec_round_trips_snapshots():
    register()
    snap = dcgm_snapshot(1.7e9)
    raw = codecs.dumps(CODEC_NAME, snap)
    assert codecs.loads(CODEC_NAME, raw) == snap


def test_bad_input_becomes_malformed_not_an_exception():
    for raw, stage, needle in [
        (b"", "decode", "empty"),
        (b"{nope", "validate", "invalid JSON"),
        (
            b'{"ts": 1, "node": "n", "source": "dcgm", "samples": [{"kind": "gauge", "name": "x"}]}',
            "validate",
            "samples.0.gauge.value",
        ),
        (b"[]", "validate", "(message)"),
    ]:
        out = decode_snapshot(raw)
        assert isinstance(out, Malformed), raw
        assert out.stage == stage and needle in out.reason, out.reason
        assert out.raw == raw


def test_state_codec_writes_compressed_json_and_reads_what_fausts_json_codec_wrote():
    register()
    state = {
        "node": "gpu-node-1",
        "version": 3,
        "persisted_at": 1.7e9 + 0.1,
        "history": {"gpu.temp|3": [[1.7e9, 88.25], [1.7e9 + 15, 1e-05]]},
        "baselines": {"x": {"mean": 0.30000000000000004, "big": 1e300, "n": 12, "neg": -0.0}},
        "odd": [float("inf"), -float("inf")],
        "latency": None,
        "flags": {"a": True},
    }
    ours, fausts = codecs.dumps(STATE_CODEC_NAME, state), codecs.dumps("json", state)
    assert json.loads(zlib.decompress(ours)) == codecs.loads("json", fausts) == state
    assert codecs.loads(STATE_CODEC_NAME, fausts) == state  # what a worker before compression wrote
    assert codecs.loads(STATE_CODEC_NAME, ours) == state
    nan = codecs.loads(STATE_CODEC_NAME, codecs.dumps(STATE_CODEC_NAME, {"v": float("nan")}))["v"]
    assert math.isnan(nan)  # NaN and Infinity as Python's json writes them, not null


def test_a_state_record_that_inflates_past_the_bound_is_refused():
    bomb = zlib.compress(b"[" + b"0," * (MAX_STATE_JSON_BYTES // 2 + 10) + b"0]", 9)
    assert len(bomb) < 100_000
    with pytest.raises(ValueError, match="inflates past"):
        inflate_state(bomb)


def test_state_codec_round_trips_what_the_processor_stores():
    register()
    processor, store = SnapshotProcessor(RULES), MemoryStateStore()
    stored = 0
    for i in range(30):
        hot = {3: (88.0, 1100.0)} if 10 <= i < 20 else None
        result = processor.step(store.get("gpu-node-1"), dcgm_snapshot(1.767e9 + 15 * i, hot=hot))
        if result.changed:
            store["gpu-node-1"] = result.state
            assert codecs.loads(STATE_CODEC_NAME, codecs.dumps(STATE_CODEC_NAME, result.state)) == result.state
            stored += 1
    assert stored >= 3


def _bundle(*snaps, node="gpu-node-1"):
    from tailhound.snapshot import bundle_bytes

    return bundle_bytes(node, [s.model_dump_json(exclude_none=True).encode() for s in snaps])


def test_both_message_versions_decode_into_their_snapshots_in_order():
    import json

    from tailhound.streams.codec import decode_message, part_bytes

    a, b = dcgm_snapshot(1.7e9, node="gpu-node-1"), dcgm_snapshot(1.7e9 + 15, node="gpu-node-1")
    one = a.model_dump_json(exclude_none=True).encode()
    parts = decode_message(one)
    assert list(parts) == [a] and not parts.bundled and part_bytes(one, parts, a) is one  # version 1 as before
    raw = _bundle(a, b)
    parts = decode_message(raw)
    assert list(parts) == [a, b] and parts.bundled
    assert part_bytes(raw, parts, b) == b.model_dump_json(exclude_none=True).encode()  # forwarded alone, as sent
    # a bundle written by another encoder (keys in another order, spaces) decodes the same
    other = json.dumps({"node": "gpu-node-1", "snapshots": json.loads(raw)["snapshots"], "schema_version": 2})
    assert list(decode_message(other.encode())) == [a, b]


def test_a_bad_bundle_is_rejected_whole_with_the_part_named():
    import json

    from tailhound.streams.codec import decode_message

    a = dcgm_snapshot(1.7e9, node="gpu-node-1")
    mixed = decode_message(_bundle(a, dcgm_snapshot(1.7e9, node="gpu-node-2")))
    assert isinstance(mixed, Malformed) and "snapshots.1 is of node 'gpu-node-2'" in mixed.reason
    data = json.loads(_bundle(a, a))
    data["snapshots"][1]["samples"][0]["value"] = float("nan")
    bad = decode_message(json.dumps(data).replace(" ", "").encode())
    assert isinstance(bad, Malformed) and bad.kind == "non_finite" and "snapshots.1.samples.0" in bad.reason
    assert isinstance(decode_message(b'{"schema_version":2,"node":"x","snapshots":[]}'), Malformed)
    assert decode_message(_bundle(a), max_bytes=10).kind == "oversized"
    assert isinstance(decode_snapshot(_bundle(a)), Malformed)  # the model topic takes version 1 only
