"""A node's state record as the worker hands it to its table: the bytes the changelog carries (zlib-compressed
JSON, :class:`tailhound.streams.codec.StateCodec`), with what is read without decoding at hand.

The processor keeps each node's decoded state itself, so the table's copy is only read back to learn that it
is still the one written (``version``), to expire silent nodes (``partition``, ``last_ts``, ``persisted_at``)
and after a restart or a rebalance. Keeping it packed costs a fifth of the JSON's bytes instead of the
~120 KB the decoded dict of a busy node takes, and the record is encoded once (``model_dump_json``), not
dumped to a dict and encoded again. Any other read decodes it, once."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

#: zlib level of the state records: 5.4 KB for a node's 28 KB of JSON after 30 minutes, ~70 us (BENCHMARKS.md)
ZLIB_LEVEL = 3
#: fields read without decoding the record
AT_HAND = ("version", "partition", "last_ts", "persisted_at")


class PackedState(Mapping[str, Any]):
    """A state record's compressed bytes; ``version``, ``partition``, ``last_ts`` and ``persisted_at`` at hand."""

    __slots__ = ("raw", "json_bytes", "_at_hand", "_value")

    def __init__(self, raw: bytes, json_bytes: int, at_hand: dict[str, Any]) -> None:
        #: what the changelog carries; `json_bytes`: the size of the JSON it inflates to
        self.raw, self.json_bytes = raw, json_bytes
        self._at_hand = at_hand
        self._value: dict[str, Any] | None = None

    @classmethod
    def pack(cls, json_text: bytes, at_hand: dict[str, Any]) -> PackedState:
        return cls(zlib.compress(json_text, ZLIB_LEVEL), len(json_text), at_hand)

    @property
    def version(self) -> Any:
        return self._at_hand.get("version")

    def decoded(self) -> dict[str, Any]:
        """The whole record (read once, then kept)."""
        if self._value is None:
            self._value = json.loads(zlib.decompress(self.raw))
        return self._value

    def json_text(self) -> bytes:
        return zlib.decompress(self.raw)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._at_hand:
            return self._at_hand[key]
        return self.decoded().get(key, default)

    def __getitem__(self, key: str) -> Any:
        if key in self._at_hand:
            return self._at_hand[key]
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __repr__(self) -> str:
        return f"PackedState(version={self.version}, {len(self.raw)} bytes, {self.json_bytes} of JSON)"
