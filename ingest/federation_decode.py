"""Decompress a ``/federate`` body as it arrives, never past the byte limit: a few KB of brotli or gzip can
inflate to gigabytes in one call of a plain decoder (httpx's, before any size check), so every call here asks
for at most the bytes still allowed and the decoder keeps the rest of its input for the next call.

``Content-Encoding`` ``identity``, ``gzip``, ``deflate`` and ``br`` (with the ``brotli`` package, 1.2 or later:
its output limit, kept to 128 KiB past the limit) are decoded; anything else (``zstd``, two encodings
stacked) is refused with the reason, as is a body over the limit once decoded (:class:`DecodeRefused`).
"""

from __future__ import annotations

import zlib
from typing import Any

try:  # optional: brotli is what httpx uses for br; without an output limit it cannot be bounded
    import brotli as _brotli

    _BROTLI_BOUNDED = hasattr(_brotli.Decompressor, "can_accept_more_data")
except ImportError:  # pragma: no cover - depends on the installation
    _brotli = None
    _BROTLI_BOUNDED = False


_BROTLI_STEP = 64 * 1024


class DecodeRefused(Exception):
    """The body cannot be decoded within the limit (or at all); the message says why."""


def accept_encoding() -> str:
    """What to ask for: the encodings :class:`BoundedDecoder` decodes."""
    return "gzip, deflate, br" if _BROTLI_BOUNDED else "gzip, deflate"


class BoundedDecoder:
    """Feed raw chunks; get the decoded body, at most `limit` bytes (:class:`DecodeRefused` beyond)."""

    def __init__(self, content_encoding: str, limit: int) -> None:
        encoding = content_encoding.strip().lower() or "identity"
        if "," in encoding:
            raise DecodeRefused(f"Content-Encoding {content_encoding!r}: one encoding at most")
        if encoding == "br" and not _BROTLI_BOUNDED:
            raise DecodeRefused("Content-Encoding br needs the brotli package 1.2 or later (an output limit)")
        if encoding not in ("identity", "gzip", "x-gzip", "deflate", "br"):
            raise DecodeRefused(f"Content-Encoding {content_encoding!r} is not supported (gzip, deflate, br)")
        self.encoding = encoding
        self.limit = limit
        self.size = 0
        self._z: Any = None
        self._first = True
        if encoding in ("gzip", "x-gzip"):
            self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._z = zlib.decompressobj()
        elif encoding == "br":
            self._z = _brotli.Decompressor()  # type: ignore[union-attr]

    def feed(self, data: bytes) -> bytes:
        if self.encoding == "identity":
            return self._keep(data)
        if self.encoding == "br":
            return self._brotli(data)
        return self._zlib(data)

    def finish(self) -> None:
        """The body ended: a compressed stream must have ended too."""
        if self.encoding == "br" and not self._z.is_finished():
            raise DecodeRefused("the brotli stream is truncated")
        if self.encoding in ("gzip", "x-gzip", "deflate") and not self._z.eof:
            raise DecodeRefused(f"the {self.encoding} stream is truncated")

    def _keep(self, out: bytes) -> bytes:
        self.size += len(out)
        if self.size > self.limit:
            raise DecodeRefused(f"the body is over {self.limit} bytes once decoded (max_body_bytes)")
        return out

    def _room(self) -> int:
        return self.limit - self.size + 1  # one byte more than allowed: enough to tell it is too much

    def _zlib(self, data: bytes) -> bytes:
        parts = []
        while data:
            try:
                out = self._z.decompress(data, self._room())
            except zlib.error as exc:
                if self._first and self.encoding == "deflate":  # some servers send raw deflate, no zlib header
                    self._z, self._first = zlib.decompressobj(-zlib.MAX_WBITS), False
                    continue
                raise DecodeRefused(f"the {self.encoding} stream is corrupt: {exc}") from None
            self._first = False
            parts.append(self._keep(out))
            data = self._z.unconsumed_tail
            if self._z.eof and self._z.unused_data:  # a second gzip member follows
                if self.encoding == "deflate":
                    raise DecodeRefused("data after the end of the deflate stream")
                data = self._z.unused_data
                self._z = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return b"".join(parts)

    def _brotli(self, data: bytes) -> bytes:
        # brotli's output limit is rounded up to its blocks (about twice a 64 KiB step): small steps keep the
        # overshoot under 128 KiB whatever the limit
        parts = []
        try:
            parts.append(self._keep(self._z.process(data, output_buffer_limit=min(self._room(), _BROTLI_STEP))))
            while not self._z.can_accept_more_data() and not self._z.is_finished():
                parts.append(self._keep(self._z.process(b"", output_buffer_limit=min(self._room(), _BROTLI_STEP))))
        except _brotli.error as exc:  # type: ignore[union-attr]
            raise DecodeRefused(f"the brotli stream is corrupt: {exc}") from None
        return b"".join(parts)
