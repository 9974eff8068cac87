"""Telemetry message version 3: a node's snapshots in compact, typed MessagePack (docs/telemetry-wire.md).

:mod:`tailhound.wire.v3` declares the message and encodes :class:`tailhound.snapshot.Snapshot` objects into it;
:mod:`tailhound.wire.v3_decode` reads it back, bounded, straight into the structs the worker's step reads
(:mod:`tailhound.wire.decoded`), or into a :class:`tailhound.wire.v3_decode.Refused` with a reason;
:mod:`tailhound.wire.reader` reads messages of every version back into the public snapshot model (tools, tests).
"""

from tailhound.wire.decoded import DecodedSnapshot, snapshot_json
from tailhound.wire.reader import TelemetryReader, read_telemetry
from tailhound.wire.v3 import MAGIC, WIRE_VERSION, bundle_parts, encode_message, encode_snapshots, is_v3
from tailhound.wire.v3_decode import Refused, decode_v3

__all__ = [
    "MAGIC",
    "WIRE_VERSION",
    "DecodedSnapshot",
    "Refused",
    "TelemetryReader",
    "bundle_parts",
    "decode_v3",
    "encode_message",
    "encode_snapshots",
    "is_v3",
    "read_telemetry",
    "snapshot_json",
]
