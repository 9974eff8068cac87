"""Prometheus remote write 1.0 encoded: the request Prometheus sends, and what it makes of a scrape.

:func:`encode_write_request` writes the ``WriteRequest`` of :mod:`tailhound.ingest.remote_write_messages`
as Prometheus does (gogo-protobuf, proto3: fields that hold their zero value left out; snappy block
format). :func:`series_from_exposition` turns a scrape of an exposition page into the series and metadata
Prometheus would send for it. For tests and for federation (the /federate endpoint serves exposition text);
the decoder is :mod:`tailhound.ingest.remote_write`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import cramjam

from tailhound.ingest.remote_write_messages import _DOUBLE, _MASK64, _STALE_BYTES, METRIC_TYPES, Metadata, Series

# -- writing ------------------------------------------------------------------------------------------------


def _put_varint(out: bytearray, n: int) -> None:
    n &= _MASK64
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _put_bytes(out: bytearray, field_no: int, data: bytes) -> None:
    _put_varint(out, field_no << 3 | 2)
    _put_varint(out, len(data))
    out += data


_ZERO = bytes(8)


def _sample_bytes(ts: int, value: float | None) -> bytes:
    """A Sample; like Prometheus (gogo-protobuf, proto3) without the fields that hold their zero value."""
    msg = bytearray()
    bits = _STALE_BYTES if value is None else _DOUBLE.pack(value)
    if bits != _ZERO:
        msg.append(0x09)  # field 1, fixed64
        msg += bits
    if ts:
        msg.append(0x10)  # field 2, varint
        _put_varint(msg, ts)
    return bytes(msg)


def _series_bytes(s: Series) -> bytes:
    msg = bytearray()
    for name, value in s.labels:
        label = bytearray()
        _put_bytes(label, 1, name.encode())
        _put_bytes(label, 2, value.encode())
        _put_bytes(msg, 1, bytes(label))
    points: list[tuple[int, float | None]] = [*s.samples, *((ts, None) for ts in s.stale)]
    points.sort(key=lambda p: p[0])
    for ts, value in points:
        _put_bytes(msg, 2, _sample_bytes(ts, value))
    return bytes(msg)


def encode_proto(series: Iterable[Series], metadata: Iterable[Metadata] = ()) -> bytes:
    """The ``WriteRequest`` protobuf message (uncompressed) of `series` and `metadata`."""
    out = bytearray()
    for s in series:
        _put_bytes(out, 1, _series_bytes(s))
    for m in metadata:
        msg = bytearray()
        type_no = METRIC_TYPES.index(m.type) if m.type in METRIC_TYPES else 0
        if type_no:
            msg.append(0x08)
            _put_varint(msg, type_no)
        for field_no, text in ((2, m.family), (4, m.help), (5, m.unit)):
            if text:
                _put_bytes(msg, field_no, text.encode())
        _put_bytes(out, 3, bytes(msg))
    return bytes(out)


def encode_write_request(series: Iterable[Series], metadata: Iterable[Metadata] = ()) -> bytes:
    """A remote-write 1.0 request body (protobuf, snappy block format), as Prometheus sends it."""
    return bytes(cramjam.snappy.compress_raw(encode_proto(series, metadata)))


# -- what Prometheus makes of a scrape ----------------------------------------------------------------------


@dataclass
class ScrapeSeries:
    """The series and metadata Prometheus stores for one scrape of a page (its remote write sends them)."""

    series: list[Series] = field(default_factory=list)
    metadata: list[Metadata] = field(default_factory=list)


def series_from_exposition(
    text: str, target: Mapping[str, str], ts_ms: int, *, up: bool = True, stale: Sequence[Series] = ()
) -> ScrapeSeries:
    """What a Prometheus scrape of the exposition `text` stores, as remote write sends it: every sample line a
    series with the target labels (``job``, ``instance`` ...; a label of the page wins over a target label of
    the same name, as with ``honor_labels: true``, else Prometheus renames it ``exported_<name>``), the labels
    sorted by name, value and timestamp `ts_ms`; ``up`` and the TYPE of each family as metadata. `stale`:
    series of an earlier scrape that this one lacks, sent with a stale marker at `ts_ms`. For tests and for
    federation (the /federate endpoint serves the same exposition text)."""
    from tailhound.agents.exposition import parse_exposition

    out = ScrapeSeries()
    for fam in parse_exposition(text):
        out.metadata.append(Metadata(fam.name, fam.type if fam.type in METRIC_TYPES else "unknown", fam.help))
        for name, labels, value in fam.samples:
            merged = {**target, **labels, "__name__": name}
            out.series.append(Series(tuple(sorted(merged.items())), ((ts_ms, float(value)),)))
    up_labels = tuple(sorted({**target, "__name__": "up"}.items()))
    out.series.append(Series(up_labels, ((ts_ms, 1.0 if up else 0.0),)))
    out.series.extend(Series(s.labels, (), (ts_ms,)) for s in stale)
    return out
