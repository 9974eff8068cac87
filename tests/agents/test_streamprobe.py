"""Streaming probe: SSE parsing, TTFT/TPOT, buffered-stream detection, /health P95 and failure outcomes."""

from __future__ import annotations

import json
import logging

import pytest
from pydantic import ValidationError

from tailhound.agents.collectors import CollectError, local_node
from tailhound.agents.collectors.sse import SSEParser, SSEProtocolError, analyse_stream, delta_content, percentile
from tailhound.agents.collectors.streamprobe import StreamProbeCollector, StreamProbeConfig
from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import HistogramSample
from tests.agents.sse_servers import ServerSpec, closed_port_url, serve, sse_events


def value(record: ScrapeRecord, name: str, **labels: str) -> float | None:
    for s in to_samples(parse_exposition(record.body)):
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.count if isinstance(s, HistogramSample) else s.value
    return None


def config(url: str, **kw) -> StreamProbeConfig:
    base = {"endpoint": url, "name": "public", "model": "test-model", "timeout_s": 3.0, "health_samples": 5}
    return StreamProbeConfig(**{**base, **kw})


async def collect_once(cfg: StreamProbeConfig, times: int = 1) -> list[ScrapeRecord]:
    probe = StreamProbeCollector(cfg)
    try:
        out: list[ScrapeRecord] = []
        for _ in range(times):
            out += await probe.collect()
        return out
    finally:
        await probe.close()


# -- pure parts ------------------------------------------------------------------------------------


def test_parser_one_byte_at_a_time_with_comments_crlf_and_multiline_data() -> None:
    stream = (
        b'\xef\xbb\xbf: keepalive\r\n\r\nevent: message\r\ndata: {"a":\r\ndata:1}\r\nid: 7\r\n\r\n'
        b"data: caf\xc3\xa9\r\rdata: [DONE]\n\n"
    )
    parser = SSEParser()
    events = [e for i in range(len(stream)) for e in parser.feed(stream[i : i + 1])]
    events += parser.finish()
    assert [e.data for e in events] == ['{"a":\n1}', "café", "[DONE]"]
    assert events[0].id == "7" and events[0].event == "message"
    assert [e.is_done for e in events] == [False, False, True]


def test_parser_whole_stream_in_one_chunk_and_lone_cr_at_the_end() -> None:
    parser = SSEParser()
    events = parser.feed(b"".join(sse_events(3)))
    assert [delta_content(e) for e in events[:-1]] == ["", "1\n", "2\n", "3\n", ""]
    assert events[-1].is_done
    tail = SSEParser()
    assert tail.feed(b"data: y\r\r") == []  # the final "\r" may still be the first half of "\r\n"
    assert [e.data for e in tail.finish()] == ["y"]


def test_parser_rejects_an_endless_line() -> None:
    with pytest.raises(SSEProtocolError):
        SSEParser(max_line_bytes=64).feed(b"data: " + b"x" * 100)


def test_delta_content_reads_chat_chunks_and_rejects_errors() -> None:
    events = SSEParser().feed(
        b'data: {"choices":[{"delta":{"reasoning_content":"hm"}}]}\n\n'
        b'data: {"choices":[{"text":"legacy"}]}\n\ndata: {"choices":[]}\n\n'
    )
    assert [delta_content(e) for e in events] == ["hm", "legacy", ""]
    for bad in (b"data: not json\n\n", b'data: {"error":{"message":"overloaded"}}\n\n', b"data: [1]\n\n"):
        with pytest.raises(SSEProtocolError):
            delta_content(SSEParser().feed(bad)[0])


def test_analyse_stream_streaming_versus_buffered() -> None:
    streamed = analyse_stream([1.1 + 0.02 * i for i in range(10)], start=1.0, burst_gap_s=0.005, end=1.3)
    assert streamed.chunks == 10 and streamed.bursts == 10 and streamed.buffered is False
    assert streamed.ttft_s == pytest.approx(0.1) and streamed.tpot_s == pytest.approx(0.02)
    assert streamed.duration_s == pytest.approx(0.3) and streamed.first_byte_share == pytest.approx(1 / 3)
    flushed = analyse_stream([1.5] * 6 + [1.5001] * 4, start=1.0, burst_gap_s=0.005, end=1.5001)
    assert flushed.bursts == 1 and flushed.buffered is True and flushed.first_byte_share > 0.99
    two_flushes = analyse_stream([1.4] * 5 + [1.5] * 5, start=1.0, burst_gap_s=0.005)
    assert two_flushes.bursts == 2 and two_flushes.buffered is True
    few = analyse_stream([1.2, 1.2, 1.2], start=1.0, burst_gap_s=0.005)
    assert few.buffered is None and few.tpot_s == 0.0
    one = analyse_stream([1.2], start=1.0, burst_gap_s=0.005)
    assert one.tpot_s is None and one.ttft_s == pytest.approx(0.2)
    assert analyse_stream([], start=1.0, burst_gap_s=0.005).ttft_s is None


def test_percentile_interpolates() -> None:
    assert percentile([1.0], 0.95) == 1.0
    assert percentile([4.0, 1.0, 3.0, 2.0, 5.0], 0.5) == 3.0
    assert percentile([float(i) for i in range(1, 101)], 0.95) == pytest.approx(95.05)
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_config_validation() -> None:
    cfg = config("http://127.0.0.1:8000/")
    assert cfg.endpoint == "http://127.0.0.1:8000" and cfg.interval_s == 30 and cfg.health_path == "/health"
    assert StreamProbeCollector(cfg).node == local_node()  # a loopback endpoint is the agent's own node
    assert StreamProbeCollector(cfg, node="gpu-1").node == "gpu-1"
    public = config("https://llm.example.com")
    assert StreamProbeCollector(public, node="gpu-1").node == "llm.example.com"
    assert StreamProbeCollector(config("https://llm.example.com", node="lb-1"), node="gpu-1").node == "lb-1"
    for url in ("ftp://x", "https://user:pw@x", "http://x/?q=1", "no-scheme"):
        with pytest.raises(ValidationError):
            config(url)
    for bad in (
        {"unknown": 1},
        {"labels": {"endpoint": "x"}},
        {"labels": {"bad-name": "x"}},
        {"headers_from_env": {"Authorization": "not-an env"}},
        {"health_path": "health"},
    ):
        with pytest.raises(ValidationError):
            config("http://127.0.0.1:1", **bad)


# -- against the test servers ----------------------------------------------------------------------


async def test_streaming_server_is_not_buffered() -> None:
    async with serve(
        ServerSpec(
            mode="stream", tokens=12, first_token_delay_s=0.1, token_gap_s=0.02, headers={"X-Accel-Buffering": "no"}
        )
    ) as srv:
        (rec,) = await collect_once(config(srv.url, labels={"cluster": "eu"}))
    assert rec.job == "streamprobe" and rec.node == local_node() and rec.interval_s == 30
    assert rec.labels == {"endpoint": "public", "cluster": "eu"} and rec.error is None
    sl = {"endpoint": "public", "model": "test-model"}
    assert value(rec, "tailhound_stream_requests_total", outcome="ok", **sl) == 1
    assert value(rec, "tailhound_stream_buffered", **sl) == 0
    assert value(rec, "tailhound_stream_chunks", **sl) == 12
    assert value(rec, "tailhound_stream_bursts", **sl) >= 6  # ~one burst per token; a busy host may merge a few
    assert 0.1 < value(rec, "tailhound_stream_last_ttft_seconds", **sl) < 1.1
    assert 0.01 < value(rec, "tailhound_stream_last_tpot_seconds", **sl) < 0.2
    assert value(rec, "tailhound_stream_first_byte_share", **sl) < 0.6
    assert value(rec, "tailhound_stream_x_accel_buffering_disabled", **sl) == 1
    assert value(rec, "tailhound_stream_content_type_event_stream", **sl) == 1
    assert value(rec, "tailhound_stream_ttft_seconds", **sl) == 1  # histogram count
    assert value(rec, "tailhound_health_checks_total", endpoint="public", outcome="ok") == 5
    assert value(rec, "tailhound_health_p95_seconds", endpoint="public") is not None


async def test_buffering_proxy_is_detected() -> None:
    async with serve(
        ServerSpec(
            mode="buffered", tokens=12, first_token_delay_s=0.1, token_gap_s=0.02, headers={"Via": "1.1 edge-cache"}
        )
    ) as srv:
        (rec,) = await collect_once(config(srv.url))
    sl = {"endpoint": "public", "model": "test-model"}
    assert value(rec, "tailhound_stream_requests_total", outcome="ok", **sl) == 1
    assert value(rec, "tailhound_stream_buffered", **sl) == 1
    assert value(rec, "tailhound_stream_buffered_total", **sl) == 1
    assert value(rec, "tailhound_stream_chunks", **sl) == 12
    assert value(rec, "tailhound_stream_bursts", **sl) <= 2
    assert value(rec, "tailhound_stream_first_byte_share", **sl) > 0.95
    assert value(rec, "tailhound_stream_last_ttft_seconds", **sl) > 0.3  # delay + the generation time it held
    assert value(rec, "tailhound_stream_last_tpot_seconds", **sl) is None  # not a per-token time when held
    assert value(rec, "tailhound_stream_tpot_seconds", **sl) == 0  # and kept out of the TPOT histogram
    assert value(rec, "tailhound_stream_ttft_seconds", **sl) == 1
    assert value(rec, "tailhound_stream_via_proxy", **sl) == 1
    assert value(rec, "tailhound_stream_x_accel_buffering_disabled", **sl) is None


async def test_histograms_are_cumulative_and_output_parses() -> None:
    async with serve(ServerSpec(first_token_delay_s=0.01, token_gap_s=0.01, tokens=4)) as srv:
        first, second = await collect_once(config(srv.url, health_samples=3), times=2)
    for rec in (first, second):
        samples = to_samples(parse_exposition(rec.body))
        assert samples and all(s.name.startswith("tailhound_") for s in samples)
    sl = {"endpoint": "public", "model": "test-model"}
    for name in ("tailhound_stream_ttft_seconds", "tailhound_stream_tpot_seconds", "tailhound_stream_duration_seconds"):
        assert (value(first, name, **sl), value(second, name, **sl)) == (1, 2)
    assert value(second, "tailhound_health_duration_seconds", endpoint="public") == 6
    assert value(second, "tailhound_stream_requests_total", outcome="ok", **sl) == 2
    assert value(second, "tailhound_stream_requests_total", outcome="timeout", **sl) == 0
    assert value(first, "tailhound_health_p95_seconds", endpoint="public") is None  # 3 < 5 samples
    assert value(second, "tailhound_health_p95_seconds", endpoint="public") is not None
    assert value(second, "tailhound_health_window_samples", endpoint="public") == 6


async def test_slow_health_gives_a_thin_lb_timeout_margin() -> None:
    async with serve(ServerSpec(first_token_delay_s=0.01, token_gap_s=0.005, tokens=4, health_delay_s=0.05)) as srv:
        (rec,) = await collect_once(config(srv.url, lb_health_timeout_s=0.06))
    p95 = value(rec, "tailhound_health_p95_seconds", endpoint="public")
    assert 0.05 <= p95 < 0.5
    assert value(rec, "tailhound_health_p50_seconds", endpoint="public") <= p95
    assert value(rec, "tailhound_lb_health_timeout_seconds", endpoint="public") == 0.06
    ratio = value(rec, "tailhound_lb_health_timeout_margin_ratio", endpoint="public")
    assert ratio == pytest.approx(0.06 / p95) and ratio < 1.5


async def test_failing_and_hanging_health_are_counted() -> None:
    async with serve(ServerSpec(first_token_delay_s=0.01, token_gap_s=0.005, tokens=4, health_status=503)) as srv:
        (rec,) = await collect_once(config(srv.url, lb_health_timeout_s=3.0))
    assert value(rec, "tailhound_health_checks_total", endpoint="public", outcome="error") == 5
    assert value(rec, "tailhound_health_checks_total", endpoint="public", outcome="ok") == 0
    assert value(rec, "tailhound_health_p95_seconds", endpoint="public") is None
    assert value(rec, "tailhound_lb_health_timeout_margin_ratio", endpoint="public") is None
    async with serve(ServerSpec(first_token_delay_s=0.01, token_gap_s=0.005, tokens=4, health_hangs=True)) as srv:
        (rec,) = await collect_once(config(srv.url, health_timeout_s=0.3))
    assert value(rec, "tailhound_health_checks_total", endpoint="public", outcome="timeout") == 1
    assert value(rec, "tailhound_stream_requests_total", endpoint="public", outcome="ok") == 1


async def test_stream_timeout_is_an_outcome() -> None:
    async with serve(ServerSpec(first_token_delay_s=1.0, health_delay_s=0.0)) as srv:
        (rec,) = await collect_once(config(srv.url, timeout_s=0.3, health_samples=1))
    assert value(rec, "tailhound_stream_requests_total", outcome="timeout") == 1
    assert value(rec, "tailhound_stream_last_ttft_seconds") is None


async def test_http_500_and_broken_stream_are_counted_not_raised() -> None:
    async with serve(ServerSpec(mode="error500")) as srv:
        (rec,) = await collect_once(config(srv.url))
    assert value(rec, "tailhound_stream_requests_total", outcome="http_error") == 1
    assert value(rec, "tailhound_stream_requests_total", outcome="ok") == 0
    assert value(rec, "tailhound_stream_chunks") is None
    async with serve(ServerSpec(mode="garbage")) as srv:
        (rec,) = await collect_once(config(srv.url))
    assert value(rec, "tailhound_stream_requests_total", outcome="protocol_error") == 1


async def test_closed_port_raises_collect_error() -> None:
    probe = StreamProbeCollector(config(closed_port_url()))
    try:
        with pytest.raises(CollectError):
            await probe.collect()
        with pytest.raises(CollectError):
            await probe.collect()
    finally:
        await probe.close()
    with pytest.raises(CollectError):
        await collect_once(config(closed_port_url(), health_path=None))


async def test_header_values_from_env_are_sent_but_never_exposed(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "Bearer sk-tailhound-test-7f3a9c"
    monkeypatch.setenv("TAILHOUND_PROBE_TOKEN", secret)
    caplog.set_level(logging.DEBUG)
    async with serve(ServerSpec(mode="error500")) as srv:
        cfg = config(
            srv.url,
            headers_from_env={"Authorization": "TAILHOUND_PROBE_TOKEN", "X-Missing": "TAILHOUND_UNSET_VAR_FOR_TEST"},
        )
        (rec,) = await collect_once(cfg)
        sent = [h.get("Authorization") for _, h in srv.requests]
    assert sent and all(h == secret for h in sent)
    assert all("X-Missing" not in h for _, h in srv.requests)
    assert secret not in rec.to_line() and "sk-tailhound" not in json.dumps(cfg.model_dump())
    assert "sk-tailhound" not in caplog.text
    assert "TAILHOUND_UNSET_VAR_FOR_TEST" in caplog.text  # the missing variable is named, once
