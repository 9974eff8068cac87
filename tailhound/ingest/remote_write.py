"""Prometheus remote write 1.0: a snappy-compressed protobuf ``prometheus.WriteRequest``, decoded and encoded.

The request body is the snappy *block* format (no framing) of::

    message WriteRequest  { repeated TimeSeries timeseries = 1; repeated MetricMetadata metadata = 3; }
    message TimeSeries    { repeated Label labels = 1; repeated Sample samples = 2;
                            repeated Exemplar exemplars = 3; repeated Histogram histograms = 4; }
    message Label         { string name = 1; string value = 2; }
    message Sample        { double value = 1; int64 timestamp = 2; }   // timestamp: unix milliseconds
    message MetricMetadata { MetricType type = 1; string metric_family_name = 2; string help = 4; string unit = 5; }

A small protobuf reader decodes it (varints, length-delimited fields, fixed64 doubles, unknown fields
skipped by their wire type): no protobuf dependency, and every loop is bounded by the body's length and by
:class:`DecodeLimits`. Exemplars are skipped; native histograms (field 4, sent only with
``send_native_histograms``) are skipped and counted (:attr:`WriteRequest.skipped`).

Prometheus marks the end of a series (a target gone, a series no longer exposed, a failed scrape) with a
*stale marker*: the NaN whose bits are ``0x7ff0000000000002``. It is not a value: :func:`decode_write_request`
files it under :attr:`Series.stale`, never under :attr:`Series.samples`; an ordinary NaN stays a value.

Anything malformed raises :class:`RemoteWriteError` with a reason code (``truncated``, ``bad_snappy``,
``too_many_series`` ...) and the HTTP status a receiver answers (400, or 413 for what is too large): the
payload is permanently bad, Prometheus must not send it again.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import cramjam

#: The bits of Prometheus' stale marker (value.StaleNaN), and the marker as the 8 bytes a Sample carries.
STALE_NAN_BITS = 0x7FF0000000000002
_STALE_BYTES = struct.pack("<Q", STALE_NAN_BITS)
#: The stale marker as a float (a NaN; compare bits with :func:`is_stale`, never values).
STALE_NAN: float = struct.unpack("<d", _STALE_BYTES)[0]

#: MetricMetadata.MetricType -> the exposition TYPE it stands for.
METRIC_TYPES = ("unknown", "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset")

_DOUBLE = struct.Struct("<d")
_MASK64 = (1 << 64) - 1


def is_stale(value: float) -> bool:
    """True for Prometheus' stale marker (a NaN with a particular payload), False for any other value."""
    return value != value and struct.pack("<d", value) == _STALE_BYTES


class RemoteWriteError(ValueError):
    """A request body that is not a valid remote-write 1.0 request (or over a limit): why, in a countable
    ``reason``, and the HTTP ``status`` to answer (400, 413 for a body or a message too large)."""

    def __init__(self, reason: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


@dataclass(frozen=True)
class DecodeLimits:
    """What one request may hold; over a limit the request is refused whole (400/413: Prometheus drops it).

    Far above what Prometheus sends (``queue_config.max_samples_per_send``: 500 in 2.x before 2.45, 2000
    since; a batch of a few hundred series is 10-40 KB compressed). The per-label limits are those of the
    agent's exposition parser (:class:`tailhound.agents.exposition_lines.Limits`); the tighter snapshot limits
    (label name 256 characters, metric name 200) drop single series later (:mod:`tailhound.ingest.grouping`).
    """

    max_body_bytes: int = 8 << 20  # compressed request body
    max_decoded_bytes: int = 64 << 20  # the snappy preamble's length, checked before decompressing
    max_series: int = 100_000  # TimeSeries in one request
    max_samples: int = 500_000  # samples (stale markers included) in one request
    max_samples_per_series: int = 10_000
    max_labels: int = 64  # labels of one series, __name__ included
    max_label_name: int = 1024  # bytes (UTF-8)
    max_label_value: int = 4096  # bytes (UTF-8)
    max_metadata: int = 100_000  # MetricMetadata entries in one request
    max_metadata_text: int = 16384  # bytes of one help or unit text


DEFAULT_DECODE_LIMITS = DecodeLimits()

Labels = tuple[tuple[str, str], ...]


class Series(NamedTuple):
    """One TimeSeries: its labels in the order sent (Prometheus sorts them by name), its samples as
    (timestamp in unix ms, value) and the timestamps of its stale markers."""

    labels: Labels
    samples: tuple[tuple[int, float], ...] = ()
    stale: tuple[int, ...] = ()

    @property
    def name(self) -> str | None:
        for k, v in self.labels:
            if k == "__name__":
                return v
        return None


class Metadata(NamedTuple):
    """One MetricMetadata: the TYPE (``counter``, ``gauge`` ... see :data:`METRIC_TYPES`) of a metric family."""

    family: str
    type: str = "unknown"
    help: str = ""
    unit: str = ""


class WriteRequest(NamedTuple):
    series: list[Series]
    metadata: list[Metadata]
    #: what was left out on purpose, by kind: ``native_histograms`` (series' histogram samples), ``exemplars``
    skipped: dict[str, int]

    @property
    def sample_count(self) -> int:
        return sum(len(s.samples) for s in self.series)


# -- reading ------------------------------------------------------------------------------------------------


def _truncated(what: str) -> RemoteWriteError:
    return RemoteWriteError("truncated", f"{what} runs past the end of its message")


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """(value, position after it) of the varint at `pos`; at most 10 bytes, as protobuf's uint64."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    result = 0
    for shift in range(0, 70, 7):
        if pos >= end:
            raise _truncated("a varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result & _MASK64, pos
    raise RemoteWriteError("bad_varint", "a varint is longer than 10 bytes")


def _key(buf: bytes, pos: int, end: int) -> tuple[int, int, int]:
    """(field number, wire type, position after the key)."""
    key, pos = _varint(buf, pos, end)
    field_no, wire = key >> 3, key & 7
    if field_no == 0:
        raise RemoteWriteError("bad_field", "field number 0 is not valid protobuf")
    return field_no, wire, pos


def _skip(buf: bytes, pos: int, end: int, wire: int, where: str) -> int:
    """The position after an unknown field's value of wire type `wire`."""
    if wire == 0:
        return _varint(buf, pos, end)[1]
    if wire == 1:
        pos += 8
    elif wire == 2:
        n, pos = _varint(buf, pos, end)
        pos += n
    elif wire == 5:
        pos += 4
    else:  # 3/4: groups (deprecated, never in these messages), 6/7: not wire types
        raise RemoteWriteError("bad_wire_type", f"{where}: wire type {wire} is not used by remote write")
    if pos > end:
        raise _truncated(f"{where}: a field")
    return pos


def _length(buf: bytes, pos: int, end: int, where: str) -> tuple[int, int]:
    """(start, stop) of the length-delimited value at `pos`."""
    n, pos = _varint(buf, pos, end)
    stop = pos + n
    if stop > end:
        raise _truncated(where)
    return pos, stop


def _wrong_type(where: str, wire: int, want: int) -> RemoteWriteError:
    return RemoteWriteError("wrong_type", f"{where} has wire type {wire}, not {want}")


def _text(buf: bytes, start: int, stop: int, where: str) -> str:
    try:
        return buf[start:stop].decode("utf-8")
    except UnicodeDecodeError:
        raise RemoteWriteError("bad_utf8", f"{where} is not UTF-8") from None


#: Decoded labels, for those seen before: Prometheus sends the same series every scrape, so a known one skips
#: the decoding and its checks, and every series with a label shares one (name, value) object. A Label
#: message's bytes -> (name, value); a series' label fields as sent -> its labels (a tuple of those pairs:
#: ~0.4 KB a series). Bounded (emptied when full), and emptied when the limits they were checked against change.
_PAIRS: dict[bytes, tuple[str, str]] = {}
_LABEL_SETS: dict[bytes, Labels] = {}
_CACHE_LIMITS: list[DecodeLimits | None] = [None]
MAX_CACHED_LABELS = 50_000
MAX_CACHED_LABEL_SETS = 50_000


def _label(buf: bytes, pos: int, end: int, lim: DecodeLimits) -> tuple[str, str]:
    """The (name, value) of the Label message at buf[pos:end]; one object per distinct label (cached)."""
    raw = buf[pos:end]
    pair = _PAIRS.get(raw)
    if pair is not None:
        return pair
    name = value = ""
    while pos < end:
        field_no, wire, pos = _key(buf, pos, end)
        if field_no == 1 or field_no == 2:
            if wire != 2:
                raise _wrong_type("Label." + ("name" if field_no == 1 else "value"), wire, 2)
            start, pos = _length(buf, pos, end, "a label")
            if field_no == 1 and pos - start > lim.max_label_name:
                raise RemoteWriteError("label_too_long", f"a label name of {pos - start} bytes (at most "
                                       f"{lim.max_label_name})")
            if field_no == 2 and pos - start > lim.max_label_value:
                raise RemoteWriteError("label_too_long", f"a label value of {pos - start} bytes (at most "
                                       f"{lim.max_label_value})")
            text = _text(buf, start, pos, "a label")
            if field_no == 1:
                name = text
            else:
                value = text
        else:
            pos = _skip(buf, pos, end, wire, "Label")
    pair = (name, value)
    if len(_PAIRS) >= MAX_CACHED_LABELS:
        _PAIRS.clear()
    _PAIRS[raw] = pair
    return pair


def _sample(buf: bytes, pos: int, end: int) -> tuple[int, float, bool]:
    """(timestamp ms, value, stale) of one Sample; absent fields are 0 (proto3 defaults)."""
    value, ts, stale = 0.0, 0, False
    while pos < end:
        field_no, wire, pos = _key(buf, pos, end)
        if field_no == 1:
            if wire != 1:
                raise _wrong_type("Sample.value", wire, 1)
            if pos + 8 > end:
                raise _truncated("Sample.value")
            stale = buf[pos:pos + 8] == _STALE_BYTES
            value = _DOUBLE.unpack_from(buf, pos)[0]
            pos += 8
        elif field_no == 2:
            if wire != 0:
                raise _wrong_type("Sample.timestamp", wire, 0)
            ts, pos = _varint(buf, pos, end)
            if ts >= 1 << 63:
                ts -= 1 << 64  # int64: two's complement
        else:
            pos = _skip(buf, pos, end, wire, "Sample")
    return ts, value, stale


class _Counts:
    __slots__ = ("samples", "native_histograms", "exemplars")

    def __init__(self) -> None:
        self.samples = self.native_histograms = self.exemplars = 0




def _labels_at(buf: bytes, pos: int, end: int, lim: DecodeLimits) -> tuple[Labels, int]:
    """The labels at the start of a TimeSeries (Prometheus writes them first) and the position after them."""
    start = pos
    while pos < end and buf[pos] == 0x0A:  # field 1 (labels), length-delimited
        pos += 1
        if pos < end and buf[pos] < 0x80:
            pos += buf[pos] + 1
        else:
            n, pos = _varint(buf, pos, end)
            pos += n
    if pos > end:
        raise _truncated("TimeSeries.labels")
    raw = buf[start:pos]
    labels = _LABEL_SETS.get(raw)
    if labels is None:
        out: list[tuple[str, str]] = []
        p = start
        while p < pos:
            p += 1
            a, p = _length(buf, p, pos, "TimeSeries.labels")
            if len(out) >= lim.max_labels:
                raise RemoteWriteError("too_many_labels", f"a series has more than {lim.max_labels} labels")
            out.append(_label(buf, a, p, lim))
        labels = tuple(out)
        if len(_LABEL_SETS) >= MAX_CACHED_LABEL_SETS:
            _LABEL_SETS.clear()
        _LABEL_SETS[raw] = labels
    return labels, pos


def _series(buf: bytes, pos: int, end: int, lim: DecodeLimits, counts: _Counts) -> Series:
    first, pos = _labels_at(buf, pos, end, lim)
    labels: list[tuple[str, str]] | None = None  # labels after other fields (never from Prometheus)
    samples: list[tuple[int, float]] = []
    stale: list[int] = []
    n_samples = 0
    unpack = _DOUBLE.unpack_from
    while pos < end:
        if buf[pos] == 0x12 and pos + 1 < end and buf[pos + 1] < 0x80:  # a Sample of under 128 bytes
            start = pos + 2
            pos = start + buf[pos + 1]
            if pos > end:
                raise _truncated("TimeSeries.samples")
            field_no = 2
        else:
            field_no, wire, pos = _key(buf, pos, end)
            if field_no in (1, 2) and wire != 2:
                raise _wrong_type("TimeSeries." + ("labels" if field_no == 1 else "samples"), wire, 2)
            if field_no == 2:
                start, pos = _length(buf, pos, end, "TimeSeries.samples")
        if field_no == 2:
            n_samples += 1
            if n_samples > lim.max_samples_per_series:
                raise RemoteWriteError("too_many_samples", f"a series has more than {lim.max_samples_per_series} "
                                       "samples")
            counts.samples += 1
            if counts.samples > lim.max_samples:
                raise RemoteWriteError("too_many_samples", f"more than {lim.max_samples} samples in one request",
                                       413)
            if pos - start > 10 and buf[start] == 0x09 and buf[start + 9] == 0x10 and buf[pos - 1] < 0x80:
                # the usual layout: value (fixed64), then timestamp (a varint ending the message)
                ts, after = _varint(buf, start + 10, pos)
                if after == pos:
                    if ts >= 1 << 63:
                        ts -= 1 << 64
                    if buf[start + 1:start + 9] == _STALE_BYTES:
                        stale.append(ts)
                    else:
                        samples.append((ts, unpack(buf, start + 1)[0]))
                    continue
            ts, value, is_stale_ = _sample(buf, start, pos)
            if is_stale_:
                stale.append(ts)
            else:
                samples.append((ts, value))
        elif field_no == 1:
            start, pos = _length(buf, pos, end, "TimeSeries.labels")
            if labels is None:
                labels = list(first)
            if len(labels) >= lim.max_labels:
                raise RemoteWriteError("too_many_labels", f"a series has more than {lim.max_labels} labels")
            labels.append(_label(buf, start, pos, lim))
        else:
            if field_no == 3:
                counts.exemplars += 1
            elif field_no == 4:
                counts.native_histograms += 1
            pos = _skip(buf, pos, end, wire, "TimeSeries")
    return Series(first if labels is None else tuple(labels), tuple(samples), tuple(stale))


def _metadata(buf: bytes, pos: int, end: int, lim: DecodeLimits) -> Metadata:
    type_, family, help_, unit = 0, "", "", ""
    while pos < end:
        field_no, wire, pos = _key(buf, pos, end)
        if field_no == 1:
            if wire != 0:
                raise _wrong_type("MetricMetadata.type", wire, 0)
            type_, pos = _varint(buf, pos, end)
        elif field_no in (2, 4, 5):
            if wire != 2:
                raise _wrong_type("MetricMetadata", wire, 2)
            start, pos = _length(buf, pos, end, "MetricMetadata")
            limit = lim.max_label_value if field_no == 2 else lim.max_metadata_text
            if pos - start > limit:
                raise RemoteWriteError("label_too_long", f"a metadata text of {pos - start} bytes (at most {limit})")
            text = _text(buf, start, pos, "MetricMetadata")
            if field_no == 2:
                family = text
            elif field_no == 4:
                help_ = text
            else:
                unit = text
        else:
            pos = _skip(buf, pos, end, wire, "MetricMetadata")
    return Metadata(family, METRIC_TYPES[type_] if type_ < len(METRIC_TYPES) else "unknown", help_, unit)


def decode_proto(buf: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> WriteRequest:
    """An uncompressed ``WriteRequest`` message -> its series and metadata (raises :class:`RemoteWriteError`)."""
    lim = limits
    if _CACHE_LIMITS[0] != lim:  # the cached labels were checked against other limits
        _PAIRS.clear()
        _LABEL_SETS.clear()
        _CACHE_LIMITS[0] = lim
    series: list[Series] = []
    metadata: list[Metadata] = []
    counts = _Counts()
    pos, end = 0, len(buf)
    while pos < end:
        field_no, wire, pos = _key(buf, pos, end)
        if field_no == 1:
            if wire != 2:
                raise _wrong_type("WriteRequest.timeseries", wire, 2)
            start, pos = _length(buf, pos, end, "WriteRequest.timeseries")
            if len(series) >= lim.max_series:
                raise RemoteWriteError("too_many_series", f"more than {lim.max_series} series in one request", 413)
            series.append(_series(buf, start, pos, lim, counts))
        elif field_no == 3:
            if wire != 2:
                raise _wrong_type("WriteRequest.metadata", wire, 2)
            start, pos = _length(buf, pos, end, "WriteRequest.metadata")
            if len(metadata) >= lim.max_metadata:
                raise RemoteWriteError("too_many_metadata", f"more than {lim.max_metadata} metadata entries", 413)
            metadata.append(_metadata(buf, start, pos, lim))
        else:
            pos = _skip(buf, pos, end, wire, "WriteRequest")
    skipped = {k: v for k, v in (("native_histograms", counts.native_histograms), ("exemplars", counts.exemplars))
               if v}
    return WriteRequest(series, metadata, skipped)


def snappy_length(body: bytes) -> int:
    """The uncompressed length a snappy block announces (its preamble: a varint of at most 5 bytes)."""
    if not body:
        raise RemoteWriteError("bad_snappy", "empty body: not snappy block data")
    n, pos = _varint(body, 0, min(len(body), 5))
    if n >= 1 << 32:
        raise RemoteWriteError("bad_snappy", "snappy preamble longer than 32 bits")
    return n


def decompress(body: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> bytes:
    """Snappy block format -> bytes, within the limits (the announced length is checked first)."""
    if len(body) > limits.max_body_bytes:
        raise RemoteWriteError("too_large", f"request body of {len(body)} bytes (at most {limits.max_body_bytes})",
                               413)
    try:
        n = snappy_length(body)
    except RemoteWriteError as exc:
        if exc.reason == "truncated":
            raise RemoteWriteError("bad_snappy", "truncated snappy preamble") from None
        raise
    if n > limits.max_decoded_bytes:
        raise RemoteWriteError("too_large", f"request decompresses to {n} bytes (at most {limits.max_decoded_bytes})",
                               413)
    try:
        out = cramjam.snappy.decompress_raw(body)
    except Exception as exc:  # cramjam.DecompressionError (and what a corrupt stream may raise besides)
        raise RemoteWriteError("bad_snappy", f"not snappy block data: {str(exc)[:200]}") from None
    data = bytes(out)
    if len(data) != n:
        raise RemoteWriteError("bad_snappy", f"snappy data of {len(data)} bytes, {n} announced")
    return data


def decode_write_request(body: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> WriteRequest:
    """A remote-write 1.0 request body (snappy + protobuf) -> :class:`WriteRequest`; raises
    :class:`RemoteWriteError` for anything malformed or over `limits`."""
    return decode_proto(decompress(body, limits), limits)


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


def series_from_exposition(text: str, target: Mapping[str, str], ts_ms: int, *, up: bool = True,
                           stale: Sequence[Series] = ()) -> ScrapeSeries:
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
