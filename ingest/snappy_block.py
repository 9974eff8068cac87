"""The snappy *block* format (no framing) a remote-write body comes in, decompressed within the limits.

The length a block announces (its preamble) is checked against :class:`DecodeLimits` before anything is
decompressed; :mod:`tailhound.ingest.remote_write` re-exports both functions.
"""

from __future__ import annotations

import cramjam

from tailhound.ingest.remote_write_messages import DEFAULT_DECODE_LIMITS, DecodeLimits, RemoteWriteError


def _preamble(body: bytes, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at the start of `body` (at most `end` bytes)."""
    result = 0
    for pos, shift in zip(range(end), range(0, 70, 7), strict=False):
        b = body[pos]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + 1
    raise RemoteWriteError("truncated", "a varint runs past the end of its message")


def snappy_length(body: bytes) -> int:
    """The uncompressed length a snappy block announces (its preamble: a varint of at most 5 bytes)."""
    if not body:
        raise RemoteWriteError("bad_snappy", "empty body: not snappy block data")
    n, _ = _preamble(body, min(len(body), 5))
    if n >= 1 << 32:
        raise RemoteWriteError("bad_snappy", "snappy preamble longer than 32 bits")
    return n


def decompress(body: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> bytes:
    """Snappy block format -> bytes, within the limits (the announced length is checked first)."""
    if len(body) > limits.max_body_bytes:
        raise RemoteWriteError("too_large", f"request body of {len(body)} bytes (at most {limits.max_body_bytes})", 413)
    try:
        n = snappy_length(body)
    except RemoteWriteError as exc:
        if exc.reason == "truncated":
            raise RemoteWriteError("bad_snappy", "truncated snappy preamble") from None
        raise
    if n > limits.max_decoded_bytes:
        raise RemoteWriteError(
            "too_large", f"request decompresses to {n} bytes (at most {limits.max_decoded_bytes})", 413
        )
    try:
        out = cramjam.snappy.decompress_raw(body)
    except Exception as exc:  # cramjam.DecompressionError (and what a corrupt stream may raise besides)
        raise RemoteWriteError("bad_snappy", f"not snappy block data: {str(exc)[:200]}") from None
    data = bytes(out)
    if len(data) != n:
        raise RemoteWriteError("bad_snappy", f"snappy data of {len(data)} bytes, {n} announced")
    return data
