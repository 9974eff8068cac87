from __future__ import annotations

import math
from pathlib import Path

from faust.serializers import codecs

from tailhound.streams.codec import CODEC_NAME, STATE_CODEC_NAME, Malformed, decode_snapshot, register
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset import load_rules
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
        (b'{"ts": 1, "node": "n", "source": "dcgm", "samples": [{"kind": "gauge", "name": "x"}]}',
         "validate", "samples.0.gauge.value"),
        (b"[]", "validate", "(message)"),
    ]:
        out = decode_snapshot(raw)
        assert isinstance(out, Malformed), raw
        assert out.stage == stage and needle in out.reason, out.reason
        assert out.raw == raw


def test_state_codec_writes_the_json_fausts_json_codec_reads_back_alike():
    register()
    state = {"node": "gpu-node-1", "version": 3, "persisted_at": 1.7e9 + 0.1,
             "history": {"gpu.temp|3": [[1.7e9, 88.25], [1.7e9 + 15, 1e-05]]},
             "baselines": {"x": {"mean": 0.30000000000000004, "big": 1e300, "n": 12, "neg": -0.0}},
             "odd": [float("inf"), -float("inf")], "latency": None, "flags": {"a": True}}
    ours, fausts = codecs.dumps(STATE_CODEC_NAME, state), codecs.dumps("json", state)
    assert codecs.loads("json", ours) == state == codecs.loads(STATE_CODEC_NAME, fausts)
    assert codecs.loads(STATE_CODEC_NAME, ours) == state
    nan = codecs.loads(STATE_CODEC_NAME, codecs.dumps(STATE_CODEC_NAME, {"v": float("nan")}))["v"]
    assert math.isnan(nan)  # NaN and Infinity as Python's json writes them, not null


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
