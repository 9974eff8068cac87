"""The Faust codec for telemetry: JSON bytes -> :class:`Snapshot`, or :class:`Malformed` with a reason.

Faust treats a codec exception as a decode error and only logs it (or crashes the agent), so the
codec never raises: a bad message becomes a :class:`Malformed` value that the agent routes to the
dead-letter topic with its reason, and the worker keeps running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faust.serializers import codecs
from pydantic import ValidationError

from tailhound.snapshot import Snapshot

CODEC_NAME = "tailhound-snapshot"
MAX_REASON = 1000


@dataclass(frozen=True)
class Malformed:
    reason: str
    stage: str
    raw: bytes


def decode_snapshot(raw: bytes | None) -> Snapshot | Malformed:
    if not raw:
        return Malformed("empty message value", "decode", raw or b"")
    try:
        return Snapshot.model_validate_json(raw)
    except ValidationError as exc:
        return Malformed(describe_validation_error(exc), "validate", raw)
    except Exception as exc:  # noqa: BLE001 - any decoder failure is a reason, not a crash
        return Malformed(f"cannot decode: {exc}"[:MAX_REASON], "decode", raw)


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
        if isinstance(obj, Snapshot):
            return obj.model_dump_json().encode()
        if isinstance(obj, bytes | bytearray):
            return bytes(obj)
        raise TypeError(f"{CODEC_NAME} encodes Snapshot objects, not {type(obj).__name__}")

    def _loads(self, s: bytes) -> Any:
        return decode_snapshot(s)


def register() -> None:
    """Register the codec with Faust (idempotent)."""
    codecs.register(CODEC_NAME, SnapshotCodec())
