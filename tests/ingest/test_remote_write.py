"""Remote write 1.0 decoding and encoding: real Prometheus 2.42 payloads, round trips, malformed input, bounds."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import cramjam
import pytest

from tailhound.ingest import remote_write as rw
from tailhound.ingest import remote_write_encode
from tailhound.ingest.remote_write import (
    STALE_NAN,
    DecodeLimits,
    Metadata,
    RemoteWriteError,
    Series,
    decode_proto,
    decode_write_request,
    decompress,
    encode_proto,
    encode_write_request,
    is_stale,
    series_from_exposition,
)

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURE = json.loads((FIXTURES / "capture.json").read_text())
AGENT_FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"


def body(name: str, folder: Path = FIXTURES) -> bytes:
    return (folder / name).read_bytes()


def snappy(raw: bytes) -> bytes:
    return bytes(cramjam.snappy.compress_raw(raw))


def varint(n: int) -> bytes:
    out = bytearray()
    remote_write_encode._put_varint(out, n)
    return bytes(out)


def field(no: int, payload: bytes) -> bytes:
    return varint(no << 3 | 2) + varint(len(payload)) + payload


def label(name: bytes, value: bytes) -> bytes:
    return field(1, field(1, name) + field(2, value))


def sample(value: float, ts: int) -> bytes:
    return field(2, b"\x09" + struct.pack("<d", value) + b"\x10" + varint(ts))


def series_msg(*parts: bytes) -> bytes:
    return field(1, b"".join(parts))


def decode_raw(raw: bytes, **limits) -> rw.WriteRequest:
    return decode_write_request(snappy(raw), DecodeLimits(**limits))


def reason(raw: bytes, **limits) -> str:
    with pytest.raises(RemoteWriteError) as exc:
        decode_raw(raw, **limits)
    return exc.value.reason


# -- the real payloads --------------------------------------------------------------------------------------


def test_the_captured_requests_decode_as_capture_json_lists_them():
    assert CAPTURE["prometheus"].startswith("prometheus, version 2.42.0")
    assert len(CAPTURE["requests"]) == 21
    for entry in CAPTURE["requests"]:
        assert entry["headers"]["Content-Encoding"] == "snappy"
        assert entry["headers"]["X-Prometheus-Remote-Write-Version"] == "0.1.0"
        req = decode_write_request(body(entry["file"]))
        assert len(req.series) == entry["series"] and len(req.metadata) == entry["metadata"]
        assert req.sample_count == entry["samples"]
        assert sum(len(s.stale) for s in req.series) == entry["stale_markers"]
        assert req.skipped == {}


def test_a_data_request_holds_one_scrape_of_each_target_with_prometheus_own_series():
    req = decode_write_request(body("001.bin"))
    by_job: dict[str, list[Series]] = {}
    for s in req.series:
        by_job.setdefault(dict(s.labels)["job"], []).append(s)
    assert {j: len(v) for j, v in by_job.items()} == {"vllm": 21, "dcgm": 11}
    for job, series in by_job.items():
        assert len({ts for s in series for ts, _ in s.samples}) == 1  # one timestamp per scrape
        names = {s.name for s in series}
        assert {
            "up",
            "scrape_duration_seconds",
            "scrape_samples_scraped",
            "scrape_series_added",
            "scrape_samples_post_metric_relabeling",
        } <= names
        for s in series:
            labels = dict(s.labels)
            assert labels["node"] == "gpu-node-2" and labels["cluster"] == "lab" and labels["job"] == job
            assert [k for k, _ in s.labels] == sorted(k for k, _ in s.labels)  # Prometheus sorts the labels
    temp = next(s for s in by_job["dcgm"] if s.name == "DCGM_FI_DEV_GPU_TEMP" and dict(s.labels)["gpu"] == "0")
    assert temp.samples[0][1] == 61.0
    sentinel = next(s for s in by_job["dcgm"] if s.name == "DCGM_FI_DEV_MEMORY_TEMP")
    assert sentinel.samples[0][1] == 9223372036854775794.0  # dcgm's NOT_SUPPORTED: a value for Prometheus


def test_metadata_requests_carry_the_type_of_every_family():
    req = decode_write_request(body("000.bin"))
    assert req.series == []
    types = {m.family: m.type for m in req.metadata}
    assert types == {
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens_total": "counter",
        "vllm:prompt_tokens_created": "gauge",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:time_to_first_token_seconds_created": "gauge",
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "DCGM_FI_DEV_SM_CLOCK": "gauge",
        "DCGM_FI_DEV_GPU_TEMP": "gauge",
        "DCGM_FI_DEV_MEMORY_TEMP": "gauge",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "counter",
    }
    assert next(m for m in req.metadata if m.family == "DCGM_FI_DEV_GPU_TEMP").help == "GPU temperature (in C)."


def test_stale_markers_are_not_values():
    vanished = decode_write_request(body("005.bin"))  # one vLLM series gone while the target is up
    stale = [s for s in vanished.series if s.stale]
    assert [dict(s.labels)["finished_reason"] for s in stale] == ["length"]
    assert stale[0].samples == ()
    down = decode_write_request(body("008.bin"))  # a failed scrape: up 0, every series of the target stale
    vllm = [s for s in down.series if dict(s.labels)["job"] == "vllm"]
    assert sum(1 for s in vllm if s.stale and not s.samples) == 15
    up = next(s for s in vllm if s.name == "up")
    assert up.samples[0][1] == 0.0 and up.stale == ()
    assert not any(math.isnan(v) for s in down.series for _, v in s.samples)


def test_prometheus_payloads_encode_back_byte_for_byte():
    for path in sorted(FIXTURES.glob("*.bin")) + sorted((FIXTURES / "probe").glob("*.bin")):
        raw = decompress(path.read_bytes())
        req = decode_proto(raw)
        assert encode_proto(req.series, req.metadata) == raw, path.name


def test_a_503_answered_request_is_resent_unchanged():
    probe = json.loads((FIXTURES / "probe" / "capture.json").read_text())
    assert probe["probes"]["503"] == {"request": "011.bin", "resent_as": ["012.bin"]}
    assert probe["probes"]["429"]["resent_as"] == []  # Prometheus 2.42 drops a batch answered 429
    assert body("011.bin", FIXTURES / "probe") == body("012.bin", FIXTURES / "probe")
    two = decode_write_request(body("014.bin", FIXTURES / "probe"))
    vllm_up = [s for s in two.series if s.name == "up" and dict(s.labels)["job"] == "vllm"]
    # two scrapes of one target in one request: the same series twice, one sample each
    assert len(vllm_up) == 2 and vllm_up[0].labels == vllm_up[1].labels
    assert vllm_up[1].samples[0][0] - vllm_up[0].samples[0][0] == 1000


# -- round trips --------------------------------------------------------------------------------------------


def test_round_trip_keeps_labels_values_timestamps_stale_markers_and_metadata():
    series = [
        Series(
            (("__name__", "x_total"), ("job", "vllm"), ("ünï", 'a "quoted"\nvalue\\')),
            ((1_700_000_000_000, 1.5), (1_700_000_005_000, 0.0), (1_700_000_010_000, -0.0)),
            (1_700_000_015_000,),
        ),
        Series((("__name__", "g"),), ((-5, math.inf), (0, -math.inf), (1, 1e308))),
        Series((("__name__", "empty"),)),
    ]
    meta = [Metadata("x", "counter", "help text", "seconds"), Metadata("g", "gauge"), Metadata("u", "unknown")]
    req = decode_write_request(encode_write_request(series, meta))
    assert req.series == series
    assert req.metadata == meta
    assert math.copysign(1, req.series[0].samples[2][1]) == -1  # -0.0 kept


def test_an_ordinary_nan_stays_a_value():
    req = decode_write_request(encode_write_request([Series((("__name__", "n"),), ((1000, math.nan),))]))
    ((ts, v),) = req.series[0].samples
    assert ts == 1000 and math.isnan(v) and req.series[0].stale == ()


def test_is_stale_tells_the_marker_from_other_nans():
    assert is_stale(STALE_NAN)
    assert not is_stale(math.nan) and not is_stale(0.0) and not is_stale(math.inf)
    assert struct.pack("<d", STALE_NAN) == struct.pack("<Q", 0x7FF0000000000002)


def test_unknown_fields_of_every_wire_type_are_skipped_and_native_histograms_counted():
    unknown = (
        varint(9 << 3 | 0)
        + varint(300)
        + varint(10 << 3 | 1)
        + bytes(8)
        + varint(11 << 3 | 5)
        + bytes(4)
        + field(12, b"anything")
    )
    raw = (
        unknown
        + series_msg(
            field(1, field(1, b"__name__") + unknown + field(2, b"a")),
            field(2, unknown + b"\x09" + struct.pack("<d", 2.0) + b"\x10" + varint(7)),
            field(3, b"exemplar"),
            field(4, b"native histogram"),
            unknown,
        )
        + field(3, varint(1 << 3) + varint(1) + field(2, b"c_total") + unknown)
        + field(2, b"reserved field 2")
    )
    req = decode_raw(raw)
    assert req.series == [Series((("__name__", "a"),), ((7, 2.0),))]
    assert req.metadata == [Metadata("c_total", "counter")]
    assert req.skipped == {"native_histograms": 1, "exemplars": 1}


def test_samples_in_another_field_order_and_labels_after_samples():
    odd = series_msg(
        field(2, b"\x10" + varint(5) + b"\x09" + struct.pack("<d", 3.0)),
        label(b"__name__", b"late_labels"),
        field(2, b"\x10" + varint(6)),
    )  # value 0.0 left out
    assert decode_raw(odd).series == [Series((("__name__", "late_labels"),), ((5, 3.0), (6, 0.0)))]


def test_negative_timestamps_are_int64():
    req = decode_raw(series_msg(label(b"__name__", b"x"), sample(1.0, -1_000 & ((1 << 64) - 1))))
    assert req.series[0].samples == ((-1000, 1.0),)


def test_series_from_exposition_is_what_prometheus_stores():
    text = (AGENT_FIXTURES / "vllm_v1.prom").read_text()
    out = series_from_exposition(text, {"job": "vllm", "instance": "h:8000"}, 5000)
    assert len(out.series) == 17  # 16 sample lines and up
    assert {m.family: m.type for m in out.metadata}["vllm:time_to_first_token_seconds"] == "histogram"
    for s in out.series:
        assert [k for k, _ in s.labels] == sorted(k for k, _ in s.labels)
        assert dict(s.labels)["job"] == "vllm" and s.samples[0][0] == 5000
    down = series_from_exposition("", {"job": "vllm", "instance": "h:8000"}, 6000, up=False, stale=out.series[:2])
    assert [s.name for s in down.series] == ["up", out.series[0].name, out.series[1].name]
    assert down.series[0].samples == ((6000, 0.0),) and down.series[1].stale == (6000,)


# -- malformed ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"\x0a", "truncated"),  # a length varint missing
        (b"\x0a\xff", "truncated"),  # a varint cut short
        (b"\x0a\x05abc", "truncated"),  # a message longer than what is left
        (series_msg(field(1, b"\x0a\x09__name")), "truncated"),
        (series_msg(label(b"__name__", b"x"), field(2, b"\x09\x00\x00")), "truncated"),  # a double cut short
        (b"\x0a" + b"\xff" * 10 + b"\x01", "bad_varint"),  # longer than 10 bytes
        (b"\x08\x01", "wrong_type"),  # timeseries as a varint
        (b"\x19" + bytes(8), "wrong_type"),  # metadata (field 3) as fixed64
        (series_msg(b"\x08\x01"), "wrong_type"),  # labels as a varint
        (series_msg(b"\x10\x01"), "wrong_type"),  # samples as a varint
        (series_msg(field(1, b"\x08\x01")), "wrong_type"),  # a label name as a varint
        (series_msg(field(2, b"\x08\x01")), "wrong_type"),  # a sample value as a varint
        (series_msg(field(2, b"\x11" + bytes(8))), "wrong_type"),  # a timestamp as fixed64
        (field(3, b"\x0a\x01x"), "wrong_type"),  # a metadata type as a string
        (b"\x2b", "bad_wire_type"),  # a group start (field 5)
        (b"\x2e", "bad_wire_type"),  # wire type 6 (field 5)
        (b"\x02\x00", "bad_field"),  # field number 0
        (series_msg(label(b"__name__", b"\xff\xfe")), "bad_utf8"),
    ],
)
def test_malformed_protobuf_is_refused_with_a_reason(raw, expected):
    assert reason(raw) == expected


@pytest.mark.parametrize(
    "data", [b"", b"\xff\xff\xff\xff\xff\xff", b"\x05abc", b"\x0a\x00\x01\x02", b"not snappy at all, just text"]
)
def test_bad_snappy_is_refused(data):
    with pytest.raises(RemoteWriteError) as exc:
        decode_write_request(data)
    assert exc.value.reason == "bad_snappy" and exc.value.status == 400


def test_snappy_data_shorter_than_announced_is_refused():
    good = snappy(series_msg(label(b"__name__", b"x")))
    with pytest.raises(RemoteWriteError) as exc:
        decode_write_request(good[:-3])
    assert exc.value.reason == "bad_snappy"


def test_the_announced_size_is_checked_before_decompressing(monkeypatch):
    bomb = varint(1 << 30) + b"\x00" * 16  # announces 1 GiB
    called = []
    monkeypatch.setattr(cramjam.snappy, "decompress_raw", lambda *a: called.append(a))
    with pytest.raises(RemoteWriteError) as exc:
        decode_write_request(bomb)
    assert (exc.value.reason, exc.value.status) == ("too_large", 413) and called == []


def test_a_body_over_the_limit_is_refused():
    data = snappy(series_msg(label(b"__name__", b"x" * 100)))
    with pytest.raises(RemoteWriteError) as exc:
        decode_write_request(data, DecodeLimits(max_body_bytes=len(data) - 1))
    assert (exc.value.reason, exc.value.status) == ("too_large", 413)
    decode_write_request(data, DecodeLimits(max_body_bytes=len(data)))


def test_count_and_size_limits():
    one = series_msg(label(b"__name__", b"x"), label(b"a", b"b"), sample(1.0, 1), sample(2.0, 2))
    assert reason(one * 3, max_series=2) == "too_many_series"
    assert reason(one, max_labels=1) == "too_many_labels"
    assert reason(one, max_samples_per_series=1) == "too_many_samples"
    assert reason(one * 3, max_samples=5) == "too_many_samples"
    assert reason(one, max_label_name=1) == "label_too_long"
    assert reason(series_msg(label(b"a", b"v" * 11)), max_label_value=10) == "label_too_long"
    meta = field(3, varint(1 << 3) + varint(2) + field(2, b"m"))
    assert reason(meta * 3, max_metadata=2) == "too_many_metadata"
    assert reason(field(3, field(4, b"h" * 11)), max_metadata_text=10) == "label_too_long"
    assert len(decode_raw(one * 2, max_series=2, max_labels=2, max_samples=4).series) == 2


def test_limits_apply_to_label_sets_seen_before_under_other_limits():
    one = series_msg(label(b"__name__", b"x"), label(b"a", b"b"), sample(1.0, 1))
    decode_raw(one)  # cached under the default limits
    assert reason(one, max_labels=1) == "too_many_labels"
    assert reason(one, max_label_value=0) == "label_too_long"


def test_a_stale_marker_series_round_trips_through_prometheus_bytes():
    raw = decompress(body("008.bin"))
    req = decode_proto(raw)
    stale = [s for s in req.series if s.stale]
    assert len(stale) == 15 and all(encode_proto([s]) in raw for s in stale)
