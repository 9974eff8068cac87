"""Telemetry messages of any version as :class:`tailhound.snapshot.Snapshot` objects, for whatever reads the topic.

The worker decodes with :func:`tailhound.streams.codec.decode_message` (bounded, dead letters, structs the step
reads). Tools, benchmarks and tests that read the telemetry topic want the public model instead, whichever version
the publisher wrote: :class:`TelemetryReader` takes version 1 (one JSON snapshot), 2 (a JSON bundle of a node's
snapshots) and 3 (MessagePack, :mod:`tailhound.wire.v3`), tells them apart by their first bytes as the worker does,
and keeps the version-3 layouts it has read, so a reader that follows the topic in order reads the messages that
only reference theirs (``publish.layout_every_s``). A message it cannot read raises
:class:`tailhound.errors.MalformedMessage` with the reason.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from pydantic import ValidationError

from tailhound.errors import MalformedMessage
from tailhound.snapshot import BUNDLE_SCHEMA_VERSION, Snapshot, SnapshotBundle
from tailhound.wire.decoded import snapshot_json
from tailhound.wire.v3 import is_v3
from tailhound.wire.v3_decode import LayoutCache, Refused, decode_v3


class _Version(msgspec.Struct):
    """The one field that tells a JSON telemetry message's version (none: version 1)."""

    schema_version: int = 1


_VERSION = msgspec.json.Decoder(_Version)


class TelemetryReader:
    """Reads telemetry messages in the order of one topic (or partition), remembering version-3 layouts."""

    def __init__(self, max_layouts: int = 32_768) -> None:
        self.layouts = LayoutCache(max_layouts)

    def read(self, raw: bytes) -> list[Snapshot]:
        """The snapshots of message `raw`, in order (one for version 1, the parts for versions 2 and 3)."""
        if not raw:
            raise MalformedMessage("empty telemetry message")
        if is_v3(raw):
            decoded = decode_v3(raw, self.layouts)
            if isinstance(decoded, Refused):
                raise MalformedMessage(f"version-3 message not read ({decoded.kind}): {decoded.reason}")
            # the structs carry the public model's fields by name: their version-1 JSON is the model's
            return [Snapshot.model_validate_json(snapshot_json(d)) for d in decoded]
        try:
            version = _VERSION.decode(raw).schema_version
            if version == BUNDLE_SCHEMA_VERSION:
                return list(SnapshotBundle.model_validate_json(raw).snapshots)
            return [Snapshot.model_validate_json(raw)]
        except (msgspec.DecodeError, ValidationError) as exc:
            raise MalformedMessage(f"not a telemetry message: {str(exc)[:500]}") from exc

    def read_all(self, values: Iterable[bytes]) -> list[Snapshot]:
        """The snapshots of messages `values`, read in order, flattened."""
        return [snap for raw in values for snap in self.read(raw)]


def read_telemetry(values: Iterable[bytes]) -> list[Snapshot]:
    """The snapshots of telemetry messages `values` (any version, in topic order), flattened."""
    return TelemetryReader().read_all(values)
