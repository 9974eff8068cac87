"""Prometheus remote write 1.0: a snappy-compressed protobuf ``prometheus.WriteRequest``, decoded.

The request body is the snappy *block* format (no framing) of a ``WriteRequest`` (the messages and the
Python values they decode to: :mod:`tailhound.ingest.remote_write_messages`). A small protobuf reader
(:mod:`tailhound.ingest.protobuf_wire`) decodes it: no protobuf dependency, and every loop is bounded by the
body's length and by :class:`DecodeLimits`. Exemplars are skipped; native histograms (field 4, sent only with
``send_native_histograms``) are skipped and counted (:attr:`WriteRequest.skipped`). A series as Prometheus
sends it every scrape (labels whose bytes were decoded before, then one sample) is read from its end without
walking its labels again. A stale marker is filed
under :attr:`Series.stale`, never under :attr:`Series.samples`.

Anything malformed raises :class:`RemoteWriteError` (400, or 413 for what is too large): the payload is
permanently bad, Prometheus must not send it again.

Encoding (tests, federation) lives in :mod:`tailhound.ingest.remote_write_encode`; this module re-exports it
and the message types, so that everything remote-write is importable from here.
"""

from __future__ import annotations

from collections.abc import Callable

from tailhound.ingest.protobuf_wire import (
    field_key,
    length_delimited,
    skip_field,
    truncated,
    utf8_text,
    varint,
    wrong_type,
)
from tailhound.ingest.remote_write_encode import ScrapeSeries as ScrapeSeries
from tailhound.ingest.remote_write_encode import encode_proto as encode_proto
from tailhound.ingest.remote_write_encode import encode_write_request as encode_write_request
from tailhound.ingest.remote_write_encode import series_from_exposition as series_from_exposition
from tailhound.ingest.remote_write_messages import _DOUBLE, _STALE_BYTES
from tailhound.ingest.remote_write_messages import DEFAULT_DECODE_LIMITS as DEFAULT_DECODE_LIMITS
from tailhound.ingest.remote_write_messages import METRIC_TYPES as METRIC_TYPES
from tailhound.ingest.remote_write_messages import STALE_NAN as STALE_NAN
from tailhound.ingest.remote_write_messages import STALE_NAN_BITS as STALE_NAN_BITS
from tailhound.ingest.remote_write_messages import DecodeLimits as DecodeLimits
from tailhound.ingest.remote_write_messages import Labels as Labels
from tailhound.ingest.remote_write_messages import Metadata as Metadata
from tailhound.ingest.remote_write_messages import RemoteWriteError as RemoteWriteError
from tailhound.ingest.remote_write_messages import Series as Series
from tailhound.ingest.remote_write_messages import WriteRequest as WriteRequest
from tailhound.ingest.remote_write_messages import is_stale as is_stale
from tailhound.ingest.snappy_block import decompress as decompress
from tailhound.ingest.snappy_block import snappy_length as snappy_length

#: Decoded labels, for those seen before: Prometheus sends the same series every scrape, so a known one skips
#: the decoding and its checks, and every series with a label shares one (name, value) object. A Label
#: message's bytes -> (name, value); a series' label fields as sent -> its labels (a tuple of those pairs:
#: ~0.4 KB a series). Bounded (emptied when full), and emptied when the limits they were checked against change.
_PAIRS: dict[bytes, tuple[str, str]] = {}
_LABEL_SETS: dict[bytes, Labels] = {}
_CACHE_LIMITS: list[DecodeLimits | None] = [None]
MAX_CACHED_LABELS = 50_000
MAX_CACHED_LABEL_SETS = 50_000
#: The last timestamp read by _known_series: its bytes (key 0x10 and varint) and value.
_TAIL: list = [b"", 0]


def _label(buf: bytes, pos: int, end: int, lim: DecodeLimits) -> tuple[str, str]:
    """The (name, value) of the Label message at buf[pos:end]; one object per distinct label (cached)."""
    raw = buf[pos:end]
    pair = _PAIRS.get(raw)
    if pair is not None:
        return pair
    name = value = ""
    while pos < end:
        field_no, wire, pos = field_key(buf, pos, end)
        if field_no == 1 or field_no == 2:
            if wire != 2:
                raise wrong_type("Label." + ("name" if field_no == 1 else "value"), wire, 2)
            start, pos = length_delimited(buf, pos, end, "a label")
            if field_no == 1 and pos - start > lim.max_label_name:
                raise RemoteWriteError(
                    "label_too_long", f"a label name of {pos - start} bytes (at most {lim.max_label_name})"
                )
            if field_no == 2 and pos - start > lim.max_label_value:
                raise RemoteWriteError(
                    "label_too_long", f"a label value of {pos - start} bytes (at most {lim.max_label_value})"
                )
            text = utf8_text(buf, start, pos, "a label")
            if field_no == 1:
                name = text
            else:
                value = text
        else:
            pos = skip_field(buf, pos, end, wire, "Label")
    pair = (name, value)
    if len(_PAIRS) >= MAX_CACHED_LABELS:
        _PAIRS.clear()
    _PAIRS[raw] = pair
    return pair


def _sample(buf: bytes, pos: int, end: int) -> tuple[int, float, bool]:
    """(timestamp ms, value, stale) of one Sample; absent fields are 0 (proto3 defaults)."""
    value, ts, stale = 0.0, 0, False
    while pos < end:
        field_no, wire, pos = field_key(buf, pos, end)
        if field_no == 1:
            if wire != 1:
                raise wrong_type("Sample.value", wire, 1)
            if pos + 8 > end:
                raise truncated("Sample.value")
            stale = buf[pos : pos + 8] == _STALE_BYTES
            value = _DOUBLE.unpack_from(buf, pos)[0]
            pos += 8
        elif field_no == 2:
            if wire != 0:
                raise wrong_type("Sample.timestamp", wire, 0)
            ts, pos = varint(buf, pos, end)
            if ts >= 1 << 63:
                ts -= 1 << 64  # int64: two's complement
        else:
            pos = skip_field(buf, pos, end, wire, "Sample")
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
            n, pos = varint(buf, pos, end)
            pos += n
    if pos > end:
        raise truncated("TimeSeries.labels")
    raw = buf[start:pos]
    labels = _LABEL_SETS.get(raw)
    if labels is None:
        out: list[tuple[str, str]] = []
        p = start
        while p < pos:
            p += 1
            a, p = length_delimited(buf, p, pos, "TimeSeries.labels")
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
                raise truncated("TimeSeries.samples")
            field_no = 2
        else:
            field_no, wire, pos = field_key(buf, pos, end)
            if field_no in (1, 2) and wire != 2:
                raise wrong_type("TimeSeries." + ("labels" if field_no == 1 else "samples"), wire, 2)
            if field_no == 2:
                start, pos = length_delimited(buf, pos, end, "TimeSeries.samples")
        if field_no == 2:
            n_samples += 1
            if n_samples > lim.max_samples_per_series:
                raise RemoteWriteError(
                    "too_many_samples", f"a series has more than {lim.max_samples_per_series} samples"
                )
            counts.samples += 1
            if counts.samples > lim.max_samples:
                raise RemoteWriteError("too_many_samples", f"more than {lim.max_samples} samples in one request", 413)
            if pos - start > 10 and buf[start] == 0x09 and buf[start + 9] == 0x10 and buf[pos - 1] < 0x80:
                # the usual layout: value (fixed64), then timestamp (a varint ending the message)
                ts, after = varint(buf, start + 10, pos)
                if after == pos:
                    if ts >= 1 << 63:
                        ts -= 1 << 64
                    if buf[start + 1 : start + 9] == _STALE_BYTES:
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
            start, pos = length_delimited(buf, pos, end, "TimeSeries.labels")
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
            pos = skip_field(buf, pos, end, wire, "TimeSeries")
    return Series(first if labels is None else tuple(labels), tuple(samples), tuple(stale))


def _known_series(
    buf: bytes,
    start: int,
    stop: int,
    _tail: list = _TAIL,
    _sets: dict = _LABEL_SETS,
    _new: Callable = tuple.__new__,
    _unpack: Callable = _DOUBLE.unpack_from,
) -> Series | None:
    """The series at buf[start:stop] when it is what Prometheus sends every scrape: labels decoded before (the
    same bytes), then one Sample laid out as usual (value, then timestamp); None for anything else. (The
    keyword defaults are the module's caches and helpers, bound once: this runs for every series.)"""
    tail, ts = _tail
    n = len(tail)
    if n and buf[stop - n : stop] == tail:  # the timestamp of the series before (a scrape's series share it)
        first = stop - n + 1
    else:
        j = stop - 1
        if j <= start or buf[j] >= 0x80:
            return None
        first = j  # the timestamp varint: continuation bytes back to the Sample's timestamp key (0x10)
        while first > start and buf[first - 1] >= 0x80 and j - first < 9:
            first -= 1
        if first - 1 <= start or buf[first - 1] != 0x10:
            return None
        ts = varint(buf, first, stop)[0]
        if ts >= 1 << 63:
            ts -= 1 << 64
        _tail[:] = (buf[first - 1 : stop], ts)
    a = first - 12  # the Sample field: key 0x12, length, key 0x09 and 8 bytes of value, key 0x10
    if a >= start and buf[a] == 0x12 and buf[a + 1] == stop - a - 2 and buf[a + 2] == 0x09:
        labels = _sets.get(buf[start:a])  # a run of whole Label fields, so `a` starts a field
        if labels is None:
            return None
        value = _unpack(buf, a + 3)[0]
        if value != value and buf[a + 3 : a + 11] == _STALE_BYTES:  # (only a NaN can be the marker)
            return _new(Series, (labels, (), (ts,)))
        return _new(Series, (labels, ((ts, value),), ()))
    a = first - 3  # or the value left out: 0 (proto3 writes no default)
    if a < start or buf[a] != 0x12 or buf[a + 1] != stop - a - 2:
        return None
    labels = _sets.get(buf[start:a])
    return None if labels is None else _new(Series, (labels, ((ts, 0.0),), ()))


def _metadata(buf: bytes, pos: int, end: int, lim: DecodeLimits) -> Metadata:
    type_, family, help_, unit = 0, "", "", ""
    while pos < end:
        field_no, wire, pos = field_key(buf, pos, end)
        if field_no == 1:
            if wire != 0:
                raise wrong_type("MetricMetadata.type", wire, 0)
            type_, pos = varint(buf, pos, end)
        elif field_no in (2, 4, 5):
            if wire != 2:
                raise wrong_type("MetricMetadata", wire, 2)
            start, pos = length_delimited(buf, pos, end, "MetricMetadata")
            limit = lim.max_label_value if field_no == 2 else lim.max_metadata_text
            if pos - start > limit:
                raise RemoteWriteError("label_too_long", f"a metadata text of {pos - start} bytes (at most {limit})")
            text = utf8_text(buf, start, pos, "MetricMetadata")
            if field_no == 2:
                family = text
            elif field_no == 4:
                help_ = text
            else:
                unit = text
        else:
            pos = skip_field(buf, pos, end, wire, "MetricMetadata")
    return Metadata(family, METRIC_TYPES[type_] if type_ < len(METRIC_TYPES) else "unknown", help_, unit)


def decode_proto(buf: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> WriteRequest:
    """An uncompressed ``WriteRequest`` message -> its series and metadata (raises :class:`RemoteWriteError`)."""
    lim = limits
    if _CACHE_LIMITS[0] != lim:  # the cached labels were checked against other limits
        _PAIRS.clear()
        _LABEL_SETS.clear()
        _CACHE_LIMITS[0] = lim
    series: list[Series] = []
    append = series.append
    metadata: list[Metadata] = []
    counts = _Counts()
    max_series, max_samples, known = lim.max_series, lim.max_samples, lim.max_samples_per_series > 0
    sets_get, unpack, new = _LABEL_SETS.get, _DOUBLE.unpack_from, tuple.__new__
    tail, tail_ts = _TAIL
    n_tail = len(tail)
    skip = n_tail + 11  # from a series' end back to its Sample field, when it ends with the remembered timestamp
    n_samples = 0
    pos, end = 0, len(buf)
    while pos < end:
        if buf[pos] == 0x0A and pos + 2 < end and buf[pos + 1] >= 0x80 and buf[pos + 2] < 0x80:
            # a TimeSeries of 128 bytes to 16 KiB, the usual: its key and length read here
            start = pos + 3
            pos = start + ((buf[pos + 1] & 0x7F) | buf[pos + 2] << 7)
            if pos > end:
                raise truncated("WriteRequest.timeseries")
            field_no = 1
        else:
            field_no, wire, pos = field_key(buf, pos, end)
            if field_no == 1:
                if wire != 2:
                    raise wrong_type("WriteRequest.timeseries", wire, 2)
                start, pos = length_delimited(buf, pos, end, "WriteRequest.timeseries")
        if field_no == 1:
            if len(series) >= max_series:
                raise RemoteWriteError("too_many_series", f"more than {max_series} series in one request", 413)
            if not known:  # (no sample allowed: the full reader says so)
                counts.samples = n_samples
                append(_series(buf, start, pos, lim, counts))
                n_samples = counts.samples
                continue
            # _known_series' usual case inline (the timestamp of the series before, a value): most series
            a = pos - skip
            if (
                n_tail
                and a >= start
                and buf[pos - n_tail : pos] == tail
                and buf[a] == 0x12
                and buf[a + 1] == skip - 2
                and buf[a + 2] == 0x09
            ):
                labels = sets_get(buf[start:a])
                if labels is not None:
                    n_samples += 1
                    if n_samples > max_samples:
                        raise RemoteWriteError(
                            "too_many_samples", f"more than {max_samples} samples in one request", 413
                        )
                    value = unpack(buf, a + 3)[0]
                    if value != value and buf[a + 3 : a + 11] == _STALE_BYTES:  # (only a NaN can be the marker)
                        append(new(Series, (labels, (), (tail_ts,))))
                    else:
                        append(new(Series, (labels, ((tail_ts, value),), ())))
                    continue
            one = _known_series(buf, start, pos)
            if one is None:
                counts.samples = n_samples
                append(_series(buf, start, pos, lim, counts))
                n_samples = counts.samples
            else:
                n_samples += 1
                if n_samples > max_samples:
                    raise RemoteWriteError("too_many_samples", f"more than {max_samples} samples in one request", 413)
                append(one)
            tail, tail_ts = _TAIL  # (either reader may have read another timestamp)
            n_tail = len(tail)
            skip = n_tail + 11
        elif field_no == 3:
            if wire != 2:
                raise wrong_type("WriteRequest.metadata", wire, 2)
            start, pos = length_delimited(buf, pos, end, "WriteRequest.metadata")
            if len(metadata) >= lim.max_metadata:
                raise RemoteWriteError("too_many_metadata", f"more than {lim.max_metadata} metadata entries", 413)
            metadata.append(_metadata(buf, start, pos, lim))
        else:
            pos = skip_field(buf, pos, end, wire, "WriteRequest")
    counts.samples = n_samples
    skipped = {k: v for k, v in (("native_histograms", counts.native_histograms), ("exemplars", counts.exemplars)) if v}
    return WriteRequest(series, metadata, skipped)


def decode_write_request(body: bytes, limits: DecodeLimits = DEFAULT_DECODE_LIMITS) -> WriteRequest:
    """A remote-write 1.0 request body (snappy + protobuf) -> :class:`WriteRequest`; raises
    :class:`RemoteWriteError` for anything malformed or over `limits`."""
    return decode_proto(decompress(body, limits), limits)
