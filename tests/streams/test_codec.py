from __future__ import annotations

from faust.serializers import codecs

from streams.codec import CODEC_NAME, Malformed, decode_snapshot, register
from tests.factories import dcgm_snapshot


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
