"""The telemetry reader: any version on the topic back into the public Snapshot model, layouts kept across
messages, a message it cannot read an error with the reason."""

from __future__ import annotations

import pytest

from tailhound.agents.wire import encode_snapshot, encoder
from tailhound.errors import MalformedMessage
from tailhound.snapshot import bundle_bytes
from tailhound.wire import TelemetryReader, bundle_parts, encode_message, read_telemetry
from tests.wire.test_v3_layouts import snap


def test_every_version_reads_back_as_the_same_snapshots():
    snaps = [snap(i) for i in range(1, 4)]
    v1 = [encode_snapshot(s) for s in snaps]
    v2 = [bundle_bytes("gpu-node-1", v1)]
    v3 = [encode_message(s) for s in snaps]
    v3_bundled = [bundle_parts("gpu-node-1", v3)]
    for values in (v1, v2, v3, v3_bundled):
        assert read_telemetry(values) == snaps


def test_a_reader_keeps_the_layouts_across_messages():
    encode = encoder(3, layout_every_s=300)
    raws = [encode(snap(i)) for i in range(1, 5)]
    reader = TelemetryReader()
    assert [reader.read(r) for r in raws] == [[snap(i)] for i in range(1, 5)]
    # a fresh reader has not seen the layout the later messages reference
    with pytest.raises(MalformedMessage, match="unknown_layout"):
        TelemetryReader().read(raws[1])


@pytest.mark.parametrize("raw", [b"", b"not json", b"[1, 2]", b'{"schema_version": 1}', b"\x93\x03\xa1n\x91\x01"])
def test_what_is_not_telemetry_is_an_error_with_the_reason(raw):
    with pytest.raises(MalformedMessage):
        TelemetryReader().read(raw)
