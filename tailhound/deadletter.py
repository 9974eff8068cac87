"""The dead-letter record: a telemetry message that could not be used, with the reason.

Published to the ``deadletter`` topic keyed like the original message. ``payload`` holds the original
bytes as text when they are UTF-8, else base64 (``payload_encoding`` says which), so nothing is lost.
"""

from __future__ import annotations

import base64
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class DeadLetter(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = 1
    ts: float = Field(description="Wall-clock unix seconds when the message was rejected.")
    reason: str
    stage: str = Field(description="Where it was rejected: decode, validate, key, ...")
    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    payload: str
    payload_encoding: Literal["utf-8", "base64"] = "utf-8"

    @classmethod
    def from_bytes(cls, raw: bytes | None, **fields: object) -> DeadLetter:
        raw = raw or b""
        try:
            return cls(payload=raw.decode("utf-8"), payload_encoding="utf-8", **fields)  # type: ignore[arg-type]
        except UnicodeDecodeError:
            return cls(payload=base64.b64encode(raw).decode(), payload_encoding="base64", **fields)  # type: ignore[arg-type]

    def original_bytes(self) -> bytes:
        return base64.b64decode(self.payload) if self.payload_encoding == "base64" else self.payload.encode()
