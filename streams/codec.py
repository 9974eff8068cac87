"""Telemetry decoding: JSON bytes -> :class:`Snapshot`, or :class:`Malformed` with a reason; and the
JSON codec of the worker's state tables.

Telemetry messages come in three versions: JSON with ``schema_version`` 1 (or none) is one :class:`Snapshot`, 2 is a
:class:`tailhound.snapshot.SnapshotBundle`, the snapshots of one node published together; version 3 is
MessagePack (:mod:`tailhound.wire`), decoded straight into the structs the step reads.
:func:`decode_message` takes all three and gives the snapshots in order; :func:`decode_snapshot` takes version 1
only (the model topic, which the worker itself writes one snapshot a message).

:func:`decode_snapshot` never raises: a bad message becomes a :class:`Malformed` value that the agent
routes to the dead-letter topic with its reason, and the worker keeps running. The worker calls it in
its agents (its topics carry raw bytes); :class:`SnapshotCodec` is the same decode as a Faust codec.

:class:`StateCodec` writes the tables' JSON values (plain dicts: what
:meth:`tailhound.streams.processor.SnapshotProcessor.step` returns to store) with pydantic-core's encoder, ~4x
faster than the standard library's on these float-heavy states, and compresses them (zlib): the changelog
carries a fifth of the JSON. The JSON is the same as Faust's "json" codec writes (floats in the shortest form
that reads back to the same float, NaN and Infinity as Python's json writes them), and uncompressed values
(older workers, Faust's codec) read back alike.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from typing import Any

import pydantic_core
from faust.serializers import codecs
from pydantic import ValidationError

from tailhound.snapshot import BUNDLE_SCHEMA_VERSION, LIMITS, Snapshot, SnapshotBundle
from tailhound.streams.packed_state import ZLIB_LEVEL, PackedState
from tailhound.wire import DecodedSnapshot, Refused, decode_v3, snapshot_json
from tailhound.wire.v3_decode import LayoutCache

CODEC_NAME = "tailhound-snapshot"
STATE_CODEC_NAME = "tailhound-state"
MAX_REASON = 1000


@dataclass(frozen=True)
class Malformed:
    reason: str
    stage: str
    raw: bytes
    #: what was wrong, in a few words that can be counted (a metric label): see :func:`rejection_kind`
    kind: str = "invalid"


def decode_snapshot(raw: bytes | None, max_bytes: int | None = LIMITS.max_message_bytes) -> Snapshot | Malformed:
    """`raw` as a snapshot, or why not. A message over `max_bytes` is not decoded at all (None: no limit);
    the other limits (:data:`tailhound.snapshot.LIMITS`) are checked while decoding."""
    if not raw:
        return Malformed("empty message value", "decode", raw or b"", "empty")
    if max_bytes is not None and len(raw) > max_bytes:
        return Malformed(
            f"message of {len(raw)} bytes is over the limit of {max_bytes} bytes (settings streams.max_message_bytes)",
            "limits",
            raw,
            "oversized",
        )
    try:
        return Snapshot.model_validate_json(raw)
    except ValidationError as exc:
        kind = rejection_kind(exc)
        if kind == "bad_json" and not _is_utf8(raw):
            return Malformed("message value is not UTF-8 text (telemetry is JSON)", "decode", raw, "not_utf8")
        return Malformed(describe_validation_error(exc), "validate", raw, kind)
    except Exception as exc:  # any decoder failure is a reason, not a crash
        return Malformed(f"cannot decode: {exc}"[:MAX_REASON], "decode", raw, "bad_json")


#: the first byte of a MessagePack telemetry message (a 3-array: version, node, parts); no JSON text starts so
MSGPACK_TRIPLE = b"\x93"
#: how an agent writes a bundle (``tailhound.snapshot.bundle_bytes``): taken for one without trying version 1
_BUNDLE_PREFIX = b'{"schema_version":%d,' % BUNDLE_SCHEMA_VERSION


class Parts(list):
    """The snapshots of one telemetry message, in order; `bundled` when it was a version-2 bundle or a
    version-3 message (then each part has no version-1 bytes of its own on the wire: :func:`part_bytes`).
    Version-3 parts are :class:`tailhound.wire.DecodedSnapshot` structs, which the step reads as snapshots."""

    bundled: bool = False


def decode_message(
    raw: bytes | None, max_bytes: int | None = LIMITS.max_message_bytes, layouts: LayoutCache | None = None
) -> Parts | Malformed:
    """A telemetry message of any version as its snapshots (one for version 1, the parts in order for versions
    2 and 3: :mod:`tailhound.wire`, told apart by its first bytes), or why not; never raises. Limits as
    :func:`decode_snapshot`, the size one for the whole message; a message with one bad part is rejected whole.
    `layouts`: the version-3 layouts read before (:class:`tailhound.wire.v3_decode.LayoutCache`), for parts
    that reference theirs."""
    if raw and raw[:1] == MSGPACK_TRIPLE and (max_bytes is None or len(raw) <= max_bytes):
        return _decode_v3(raw, layouts)  # (version 3, or a later MessagePack version: refused with its number)
    if raw and raw.startswith(_BUNDLE_PREFIX) and (max_bytes is None or len(raw) <= max_bytes):
        return _decode_bundle(raw)
    value = decode_snapshot(raw, max_bytes)
    if isinstance(value, Snapshot):
        return Parts((value,))
    if value.kind == "invalid" and _is_version(raw, BUNDLE_SCHEMA_VERSION):  # a bundle written differently
        return _decode_bundle(raw)
    return value


def part_bytes(raw: bytes, parts: Parts, snapshot: Snapshot | DecodedSnapshot) -> bytes:
    """`snapshot` (one of `parts`, decoded from `raw`) as a version-1 message: `raw` itself unless it was a
    bundle or of version 3, else the snapshot encoded alone as JSON."""
    if not parts.bundled:
        return raw
    return snapshot_json(snapshot)


def _decode_v3(raw: bytes, layouts: LayoutCache | None) -> Parts | Malformed:
    values = decode_v3(raw, layouts)
    if isinstance(values, Refused):
        return Malformed(values.reason, "decode" if values.kind == "bad_msgpack" else "validate", raw, values.kind)
    parts = Parts(values)
    parts.bundled = True  # its parts have no version-1 bytes of their own
    return parts


def _decode_bundle(raw: bytes) -> Parts | Malformed:
    try:
        parts = Parts(SnapshotBundle.model_validate_json(raw).snapshots)
        parts.bundled = True
        return parts
    except ValidationError as exc:
        return Malformed(describe_validation_error(exc), "validate", raw, rejection_kind(exc))
    except Exception as exc:  # any decoder failure is a reason, not a crash
        return Malformed(f"cannot decode: {exc}"[:MAX_REASON], "decode", raw, "bad_json")


def _is_version(raw: bytes | None, version: int) -> bool:
    """`raw` is a JSON object whose ``schema_version`` is `version` (only asked of messages that failed)."""
    try:
        value = pydantic_core.from_json(raw or b"")
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("schema_version") == version


def _is_utf8(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


#: pydantic error types of values out of range (a NaN fails them too: then it is "non_finite")
_RANGE_ERRORS = frozenset({"greater_than", "greater_than_equal", "less_than", "less_than_equal"})


def rejection_kind(exc: ValidationError) -> str:
    """The first error of `exc` in a few countable words: ``bad_json``, ``non_finite``, ``out_of_range``
    (a negative counter delta, a zero interval ...), ``too_many_samples``, ``too_many_labels``,
    ``label_too_long``, ``too_many_buckets``, else ``invalid``."""
    errors = exc.errors(include_url=False, include_context=False)
    if not errors:
        return "invalid"
    err = errors[0]
    kind, loc, value = err["type"], err["loc"], err.get("input")
    if kind == "json_invalid":
        return "bad_json"
    if kind == "finite_number" or (kind in _RANGE_ERRORS and isinstance(value, float) and value != value):
        return "non_finite"
    if kind in _RANGE_ERRORS:
        return "out_of_range"
    if "labels" in loc:
        return (
            "too_many_labels"
            if kind == "too_long" and loc[-1] == "labels"
            else ("label_too_long" if kind == "string_too_long" else "invalid")
        )
    if kind == "too_long" and loc:
        if loc[-1] == "samples":
            return "too_many_samples"
        if loc[-1] in ("le", "counts"):
            return "too_many_buckets"
    return "invalid"


def describe_validation_error(exc: ValidationError, limit: int = 3) -> str:
    parts = []
    for err in exc.errors()[:limit]:
        loc = ".".join(str(x) for x in err["loc"]) or "(message)"
        if err["type"] == "json_invalid":
            parts.append(f"invalid JSON: {err['msg']}")
            continue
        parts.append(f"{loc}: {err['msg']}")
    more = f" (+{exc.error_count() - limit} more)" if exc.error_count() > limit else ""
    return ("; ".join(parts) + more)[:MAX_REASON]


class SnapshotCodec(codecs.Codec):
    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, Snapshot | DecodedSnapshot):
            return snapshot_json(obj)
        if isinstance(obj, bytes | bytearray):
            return bytes(obj)
        raise TypeError(f"{CODEC_NAME} encodes Snapshot objects, not {type(obj).__name__}")

    def _loads(self, s: bytes) -> Any:
        return decode_snapshot(s)


#: a stored state inflating past this was not written by a worker (its JSON is sized before it is produced)
MAX_STATE_JSON_BYTES = 4 * LIMITS.max_state_bytes


class StateCodec(codecs.Codec):
    """JSON-able values (the node and model state tables), zlib-compressed; plain JSON is read as well."""

    def _dumps(self, obj: Any) -> bytes:
        if isinstance(obj, PackedState):  # a node state record, compressed already
            return obj.raw
        return zlib.compress(pydantic_core.to_json(obj, inf_nan_mode="constants"), ZLIB_LEVEL)

    def _loads(self, s: bytes) -> Any:
        return json.loads(inflate_state(s))


def inflate_state(raw: bytes) -> bytes:
    """A state value's JSON: a zlib stream starts with 0x78 ('x'), which no JSON text does (what workers before
    compression wrote reads as it is). Inflated at most to :data:`MAX_STATE_JSON_BYTES` (a ValueError past it)."""
    if raw[:1] != b"x":
        return raw
    inflater = zlib.decompressobj()
    out = inflater.decompress(raw, MAX_STATE_JSON_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError(f"a state record inflates past {MAX_STATE_JSON_BYTES:,} bytes")
    return out


def register() -> None:
    """Register the codecs with Faust (idempotent)."""
    codecs.register(CODEC_NAME, SnapshotCodec())
    codecs.register(STATE_CODEC_NAME, StateCodec())
