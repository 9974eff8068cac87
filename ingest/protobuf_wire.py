"""A small protobuf reader: varints, field keys, length-delimited values, unknown fields skipped by wire type.

What remote write's decoder needs and no more, with no protobuf dependency: every read is bounded by the
``end`` it is given, and anything malformed or truncated raises :class:`RemoteWriteError` (a 400: the payload
is permanently bad). Positions are passed and returned, never copied slices, so decoding allocates little.
"""

from __future__ import annotations

from tailhound.ingest.remote_write_messages import _MASK64, RemoteWriteError


def truncated(what: str) -> RemoteWriteError:
    return RemoteWriteError("truncated", f"{what} runs past the end of its message")


def varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; at most 10 bytes, as protobuf's uint64."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = 0
    for shift in range(0, 70, 7):
        if pos >= end:
            raise truncated("a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _MASK64, pos
    raise RemoteWriteError("bad_varint", "a varint is longer than 10 bytes")


def field_key(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(field number, wire type, position after the key)."""
    key, pos = varint(buf, pos, end)
    field_no, wire = key >> 3, key & 7
    if field_no == 0:
        raise RemoteWriteError("bad_field", "field number 0 is not valid protobuf")
    return field_no, wire, pos


def skip_field(buf: bytes, pos: int, end: int, wire: int, where: str) -> int:
    """The position after an unknown field's value of wire type `wire`."""
    if wire == 0:
        return varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = varint(buf, pos, end)
        pos += n
    elif wire == 5:
        pos += 4
    else:  # 3/4: groups (deprecated, never in these messages), 6/7: not wire types
        raise RemoteWriteError("bad_wire_type", f"{where}: wire type {wire} is not used by remote write")
    if pos > end:
        raise truncated(f"{where}: a field")
    return pos


def length_delimited(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """(start, stop) of the length-delimited value at `pos`."""
    n, pos = varint(buf, pos, end)
    stop = pos + n
    if stop > end:
        raise truncated(where)
    return pos, stop


def wrong_type(where: str, wire: int, want: int) -> RemoteWriteError:
    return RemoteWriteError("wrong_type", f"{where} has wire type {wire}, not {want}")


def utf8_text(buf: bytes, start: int, stop: int, where: str) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteWriteError("bad_utf8", f"{where} is not UTF-8") from None
