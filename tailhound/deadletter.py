"""The dead-letter record: a telemetry message that could not be used, with the reason.

Published to the ``deadletter`` topic keyed like the original message. ``payload`` holds the original
bytes as text when they are UTF-8, else base64 (``payload_encoding`` says which).

A dead letter always fits in one Kafka message, whatever it is about: the payload keeps at most
:data:`MAX_PAYLOAD_BYTES` of the original bytes (``payload_truncated`` says it was cut), the reason at most
:data:`MAX_REASON` characters and the key at most :data:`MAX_KEY` characters; ``payload_size`` and
``payload_sha256`` always describe the whole original, so a truncated message can still be told apart
and matched with what its producer sent. A record is at most ~90 KB (:func:`DeadLetter.encoded`), far
under any producer's request limit (1 MB).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

#: bytes of the original message kept in `payload` (a whole 8-GPU dcgm-exporter snapshot is ~34 KB)
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_REASON = 1000
MAX_KEY = 256


class DeadLetter(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = 1
    ts: float = Field(description="Wall-clock unix seconds when the message was rejected.")
    reason: str
    stage: str = Field(description="Where it was rejected: decode, validate, key, time, limits, evaluate, ...")
    kind: str | None = Field(
        default=None,
        description="What was wrong, in a word that can be counted (the worker's "
        "tailhound_telemetry_rejected{reason} label): oversized, not_utf8, bad_json, future_ts, wrong_key, ...",
    )
    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    payload: str
    payload_encoding: Literal["utf-8", "base64"] = "utf-8"
    payload_truncated: bool = Field(
        default=False, description=f"`payload` holds only the first {MAX_PAYLOAD_BYTES} bytes of the original."
    )
    payload_size: int | None = Field(default=None, description="Bytes of the original message value.")
    payload_sha256: str | None = Field(default=None, description="SHA-256 (hex) of the whole original value.")

    @classmethod
    def from_bytes(
        cls,
        raw: bytes | None,
        *,
        reason: str,
        key: str | None = None,
        max_payload: int = MAX_PAYLOAD_BYTES,
        **fields: object,
    ) -> DeadLetter:
        """The record of `raw`, bounded: payload cut to `max_payload` bytes (at a character boundary when
        it is UTF-8 text), reason and key cut to MAX_REASON and MAX_KEY characters."""
        raw = raw or b""
        size, digest = len(raw), hashlib.sha256(raw).hexdigest()
        kept = raw[:max_payload]
        truncated = len(kept) < size
        reason = reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"
        key = key if key is None or len(key) <= MAX_KEY else key[: MAX_KEY - 1] + "…"
        common = dict(
            reason=reason, key=key, payload_truncated=truncated, payload_size=size, payload_sha256=digest, **fields
        )
        text = _utf8_prefix(kept, whole=not truncated)
        if text is not None:
            return cls(payload=text, payload_encoding="utf-8", **common)  # type: ignore[arg-type]
        return cls(payload=base64.b64encode(kept).decode(), payload_encoding="base64", **common)  # type: ignore[arg-type]

    def original_bytes(self) -> bytes:
        """The original value (its first MAX_PAYLOAD_BYTES when `payload_truncated`)."""
        return base64.b64decode(self.payload) if self.payload_encoding == "base64" else self.payload.encode()

    def encoded(self) -> bytes:
        """The record as published (JSON)."""
        return self.model_dump_json().encode()


def _utf8_prefix(kept: bytes, whole: bool) -> str | None:
    """`kept` as text when it is UTF-8; a cut may split the last character (its 1-3 bytes are dropped)."""
    try:
        return kept.decode("utf-8")
    except UnicodeDecodeError as exc:
        if whole or exc.reason != "unexpected end of data":
            return None
        try:
            return kept[: exc.start].decode("utf-8")
        except UnicodeDecodeError:
            return None
