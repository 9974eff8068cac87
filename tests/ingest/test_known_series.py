"""The decoder's path for a known series (labels decoded before, one sample read from the end) decodes what the
full reader decodes: the same request twice, first with empty caches (every series the long way), then warm."""

from __future__ import annotations

import math

import pytest

from tailhound.ingest import remote_write as rw
from tailhound.ingest.remote_write import Series, decode_proto, encode_proto

T0 = 1_700_000_000_000


def labels(name: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"__name__": name, "job": "vllm", "instance": "10.0.0.5:8000", **more}.items()))


SERIES = [
    Series(labels("a"), ((T0, 1.5),)),
    Series(labels("zero"), ((T0, 0.0),)),  # proto3 leaves the value out
    Series(labels("neg_zero"), ((T0, -0.0),)),
    Series(labels("nan"), ((T0, math.nan),)),
    Series(labels("stale"), (), (T0,)),
    Series(labels("other_ts"), ((T0 + 1, 2.0),)),  # a different timestamp: the remembered one changes
    Series(labels("back"), ((T0, 3.0),)),
    Series(labels("small_ts"), ((5, 4.0),)),  # a one-byte timestamp varint
    Series(labels("no_ts"), ((0, 6.0),)),  # timestamp 0 is left out too
    Series(labels("negative_ts"), ((-1000, 7.0),)),  # int64: ten bytes
    Series(labels("two"), ((T0, 1.0), (T0 + 15_000, 2.0))),
    Series(labels("long", path="x" * 300), ((T0, 8.0),)),  # a length of two bytes
    Series(labels("huge", **{f"l{i}": "y" * 2000 for i in range(10)}), ((T0, 9.0),)),  # over 16 KiB: three
]


def comparable(series) -> list:
    return [
        (s.labels, [(t, "NaN" if math.isnan(v) else (v, math.copysign(1, v))) for t, v in s.samples], s.stale)
        for s in series
    ]


@pytest.mark.parametrize("order", ["as listed", "reversed"])
def test_the_known_series_path_decodes_what_the_full_reader_does(order):
    series = SERIES if order == "as listed" else SERIES[::-1]
    body = encode_proto(series)
    rw._LABEL_SETS.clear()
    rw._TAIL[:] = [b"", 0]
    cold = decode_proto(body)
    calls = []
    full = rw._series

    def counting(*args):  # the reader's own arguments
        calls.append(1)
        return full(*args)

    rw._series = counting
    try:
        warm = decode_proto(body)
    finally:
        rw._series = full
    assert comparable(cold.series) == comparable(warm.series) == comparable(series)
    assert cold.sample_count == warm.sample_count
    assert len(calls) < len(series) // 2  # most went the short way


def test_sample_limits_hold_on_the_known_series_path():
    body = encode_proto([Series(labels(f"m{i}"), ((T0, 1.0),)) for i in range(5)])
    decode_proto(body)  # labels known from here on
    with pytest.raises(rw.RemoteWriteError) as err:
        decode_proto(body, rw.DecodeLimits(max_samples=4))
    assert err.value.reason == "too_many_samples" and err.value.status == 413


def test_no_sample_allowed_is_an_error_on_the_known_series_path_too():
    """With max_samples_per_series 0 every series goes the full reader's way, which refuses its sample."""
    body = encode_proto([Series(labels(f"m{i}"), ((T0, 1.0),)) for i in range(3)])
    decode_proto(body)  # labels known from here on
    with pytest.raises(rw.RemoteWriteError) as err:
        decode_proto(body, rw.DecodeLimits(max_samples_per_series=0))
    assert err.value.reason == "too_many_samples"


def test_a_series_ending_like_the_one_before_but_laid_out_otherwise_is_read_in_full():
    """The same timestamp bytes at the end, but no Sample field before them where the short way looks."""
    odd = Series(labels("odd"), ((T0, 1.0), (T0, 2.0)))  # two samples: the short way refuses, the reader reads
    series = [Series(labels("a"), ((T0, 1.5),)), odd, Series(labels("b"), ((T0, 2.5),))]
    body = encode_proto(series)
    decode_proto(body)
    assert comparable(decode_proto(body).series) == comparable(series)
