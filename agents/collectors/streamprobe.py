"""Streaming probe: client-side TTFT/TPOT through the public path, buffered-stream detection, /health P95.

Each collection sends one small streamed chat completion to an OpenAI-compatible endpoint the way a user
reaches it (through the load balancer / CDN) and times every SSE event as it arrives. A proxy that
buffers the stream (nginx ``proxy_buffering on``, a CDN "response buffering" option) shows up as all
tokens arriving in one or two bursts, with TTFT ~= the whole duration. In parallel it times a few
``GET /health`` calls and keeps their P95 over a rolling window, so the load balancer's health-check
timeout can be compared with it (the playbook wants the timeout >= 1.5 x P95, or instances flap).

A failed probe is an observation, not an error: it is counted by outcome. ``collect()`` raises
:class:`CollectError` only when nothing answered at all. Header values (tokens) come from environment
variables and are never logged or rendered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.collectors import CollectError, local_node, now, probe_node
from tailhound.agents.collectors.httpbody import read_body
from tailhound.agents.collectors.sse import (
    SSEParser,
    SSEProtocolError,
    StreamTiming,
    analyse_stream,
    delta_content,
    percentile,
)
from tailhound.agents.render import ExpositionWriter
from tailhound.durations import Duration
from tailhound.recording import ScrapeRecord

log = logging.getLogger(__name__)

STREAM_OUTCOMES = ("ok", "http_error", "timeout", "connect_error", "protocol_error")
HEALTH_OUTCOMES = ("ok", "error", "timeout")
#: vLLM's TTFT buckets (up to 80 s); also used for the whole probe's duration.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
HEALTH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: A P95 over fewer successful /health samples than this is not reported.
MIN_HEALTH_SAMPLES = 5
#: The probe asks for a few dozen tokens; a longer body is not what it asked for.
MAX_STREAM_BYTES = 1 << 20
#: A /health answer is a few bytes; it is read whole (its time counts) but never kept.
MAX_HEALTH_BYTES = 64 * 1024
_RESERVED_LABELS = frozenset({"endpoint", "model", "outcome", "le"})
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class StreamProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    endpoint: str = Field(description="Base URL reached through the public path, e.g. https://llm.example.com")
    name: str = Field(min_length=1, description="Endpoint name, the `endpoint` label.")
    model: str = Field(min_length=1)
    prompt: str = "Count from 1 to 20, one number per line."
    max_tokens: int = Field(default=32, ge=1, le=4096)
    interval_s: Duration = Field(default=30.0, gt=0)
    timeout_s: Duration = Field(default=30.0, gt=0, description="Limit for the whole streamed request.")
    headers_from_env: dict[str, str] = Field(default_factory=dict, description="Header name -> env var name.")
    health_path: str | None = "/health"
    health_samples: int = Field(default=5, ge=1, le=100, description="/health calls per collection.")
    health_window: int = Field(default=100, ge=MIN_HEALTH_SAMPLES, description="Rolling window of the P95.")
    health_timeout_s: Duration | None = Field(default=None, gt=0, description="Per /health call; default timeout_s.")
    lb_health_timeout_s: Duration | None = Field(default=None, gt=0, description="The load balancer's check timeout.")
    burst_gap_s: Duration = Field(default=0.005, gt=0, description="A longer gap between events starts a new burst.")
    labels: dict[str, str] = Field(default_factory=dict)
    node: str | None = Field(
        default=None,
        pattern=r"^\S+$",
        description=("Node the probe describes (default: the endpoint's host; a loopback endpoint: the agent's node)."),
    )

    @field_validator("endpoint")
    @classmethod
    def _check_endpoint(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"endpoint must be an http(s) URL with a host, not {v!r}")
        if parts.username or parts.password:
            raise ValueError("endpoint must not carry credentials; use headers_from_env")
        if parts.query or parts.fragment:
            raise ValueError("endpoint must be a base URL without query or fragment")
        return v.rstrip("/")

    @field_validator("health_path")
    @classmethod
    def _check_health_path(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith("/"):
            raise ValueError(f"health_path must start with '/', not {v!r}")
        return v

    @field_validator("headers_from_env")
    @classmethod
    def _check_headers(cls, v: dict[str, str]) -> dict[str, str]:
        for header, env in v.items():
            if not _HEADER_NAME.match(header) or not _ENV_NAME.match(env):
                raise ValueError(f"bad header/env variable name pair {header!r} -> {env!r}")
        return v

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_NAME.match(key) or key in _RESERVED_LABELS:
                raise ValueError(f"label {key!r} is not a label name or is set by the probe")
        return v


class LatencyHistogram:
    """A cumulative Prometheus histogram kept over the agent's life."""

    def __init__(self, le: Sequence[float]) -> None:
        self.le = tuple(le)
        self._bins = [0] * (len(self.le) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self._bins[bisect_left(self.le, value)] += 1
        self.count += 1
        self.sum += value

    def cumulative(self) -> list[float]:
        out, acc = [], 0
        for c in self._bins[:-1]:
            acc += c
            out.append(float(acc))
        return out


def buffering_header_gauges(headers: Mapping[str, str]) -> dict[str, float]:
    """Response headers that explain buffering, as 1/0 flags (values are never exported)."""
    out: dict[str, float] = {}
    if "x-accel-buffering" in headers:
        out["tailhound_stream_x_accel_buffering_disabled"] = float(headers["x-accel-buffering"].strip().lower() == "no")
    if "content-type" in headers:
        out["tailhound_stream_content_type_event_stream"] = float(
            headers["content-type"].split(";")[0].strip().lower() == "text/event-stream"
        )
    if "cache-control" in headers:
        directives = {d.strip().lower() for d in headers["cache-control"].split(",")}
        out["tailhound_stream_cache_control_no_cache"] = float(bool(directives & {"no-cache", "no-store"}))
    out["tailhound_stream_via_proxy"] = float("via" in headers)
    out["tailhound_stream_content_encoded"] = float(headers.get("content-encoding", "identity") != "identity")
    return out


@dataclass
class StreamResult:
    outcome: str
    timing: StreamTiming | None = None
    header_gauges: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class HealthCheck:
    outcome: str
    latency_s: float | None = None
    connect_failed: bool = False


class StreamProbeCollector:
    """Probes one endpoint's streaming path and /health; one record a collection."""

    job = "streamprobe"

    def __init__(self, config: StreamProbeConfig, node: str | None = None) -> None:
        self.config = config
        self.interval_s = config.interval_s
        self.node = config.node or probe_node(urlsplit(config.endpoint).hostname, node or local_node())
        self._client: aiohttp.ClientSession | None = None
        self._ttft = LatencyHistogram(TTFT_BUCKETS)
        self._tpot = LatencyHistogram(TPOT_BUCKETS)
        self._duration = LatencyHistogram(TTFT_BUCKETS)
        self._health = LatencyHistogram(HEALTH_BUCKETS)
        self._health_window: deque[float] = deque(maxlen=config.health_window)
        self._stream_outcomes = dict.fromkeys(STREAM_OUTCOMES, 0)
        self._health_outcomes = dict.fromkeys(HEALTH_OUTCOMES, 0)
        self._buffered_total = 0
        self._last_outcome = "ok"
        self._missing_env_warned: set[str] = set()

    # -- I/O --------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        # aiohttp, not httpx: a request costs ~5x less CPU, which matters at 1 Hz (BENCHMARKS.md)
        if self._client is None:
            self._client = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.timeout_s))
        return self._client

    def _request_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        for header, env in self.config.headers_from_env.items():
            value = os.environ.get(env)
            if value:
                headers[header] = value
            elif env not in self._missing_env_warned:
                self._missing_env_warned.add(env)
                log.warning(
                    "streamprobe %s: env variable %s for header %s is not set; sending without it",
                    self.config.name,
                    env,
                    header,
                )
        return headers

    async def collect(self) -> list[CollectedRecord]:
        ts = now()
        headers = self._request_headers()
        stream, checks = await asyncio.gather(self._probe_stream(headers), self._check_health(headers))
        self._account(stream, checks)
        if stream.outcome == "connect_error" and all(c.connect_failed for c in checks):
            raise CollectError(f"streamprobe {self.config.name}: cannot connect to {self.config.endpoint}")
        labels = {"endpoint": self.config.name, **self.config.labels}
        return [
            CollectedRecord(
                ts=ts,
                node=self.node,
                job=self.job,
                writer=self._write(stream),
                labels=labels,
                interval_s=self.interval_s,
            )
        ]

    def failure_records(self, ts: float, reason: str) -> list[ScrapeRecord]:
        labels = {"endpoint": self.config.name, **self.config.labels}
        return [
            ScrapeRecord(ts=ts, node=self.node, job=self.job, labels=labels, interval_s=self.interval_s, error=reason)
        ]

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _probe_stream(self, headers: dict[str, str]) -> StreamResult:
        cfg = self.config
        body = {
            "model": cfg.model,
            "messages": [{"role": "user", "content": cfg.prompt}],
            "max_tokens": cfg.max_tokens,
            "stream": True,
        }
        result = StreamResult("protocol_error")
        arrivals: list[float] = []
        last_event: float | None = None
        start = time.perf_counter()
        try:
            async with (
                asyncio.timeout(cfg.timeout_s),
                self._http().post(
                    f"{cfg.endpoint}/v1/chat/completions",
                    json=body,
                    allow_redirects=False,
                    headers={**headers, "Accept": "text/event-stream"},
                ) as resp,
            ):
                result.header_gauges = buffering_header_gauges(resp.headers)
                if not 200 <= resp.status < 300:
                    result.outcome = "http_error"
                    return result
                parser, received, done = SSEParser(), 0, False
                async for chunk in resp.content.iter_any():
                    arrived = time.perf_counter()
                    received += len(chunk)
                    if received > MAX_STREAM_BYTES:
                        raise SSEProtocolError(f"the stream exceeds {MAX_STREAM_BYTES} bytes")
                    for event in parser.feed(chunk):
                        last_event = arrived
                        if event.is_done:
                            done = True
                            break
                        if delta_content(event):
                            arrivals.append(arrived)
                    if done:
                        break
                if not done:
                    done = any(e.is_done for e in parser.finish())
                result.outcome = "ok" if done and arrivals else "protocol_error"
        except TimeoutError:
            result.outcome = "timeout"
        except aiohttp.ClientConnectorError:
            result.outcome = "connect_error"
        except (aiohttp.ClientError, SSEProtocolError) as exc:
            log.debug("streamprobe %s: stream failed: %s", cfg.name, type(exc).__name__)
            result.outcome = "protocol_error"
        if arrivals:
            result.timing = analyse_stream(arrivals, start, cfg.burst_gap_s, end=last_event)
        return result

    async def _check_health(self, headers: dict[str, str]) -> list[HealthCheck]:
        cfg = self.config
        if cfg.health_path is None:
            return []
        url, limit = f"{cfg.endpoint}{cfg.health_path}", cfg.health_timeout_s or cfg.timeout_s
        checks: list[HealthCheck] = []
        for _ in range(cfg.health_samples):
            start = time.perf_counter()
            try:
                async with (
                    asyncio.timeout(limit),
                    self._http().get(url, headers=headers, allow_redirects=False) as resp,
                ):
                    await read_body(resp, MAX_HEALTH_BYTES, url)
                latency = time.perf_counter() - start
                ok = 200 <= resp.status < 300
                checks.append(HealthCheck("ok", latency) if ok else HealthCheck("error"))
            except TimeoutError:
                checks.append(HealthCheck("timeout"))
                break  # a hanging /health would only repeat the same timeout; keep the collection bounded
            except aiohttp.ClientConnectorError:
                checks.append(HealthCheck("error", connect_failed=True))
            except (aiohttp.ClientError, CollectError):  # CollectError: an oversized or cut /health answer
                checks.append(HealthCheck("error"))
        return checks

    # -- state and rendering ----------------------------------------------------------------------

    def _account(self, stream: StreamResult, checks: list[HealthCheck]) -> None:
        self._stream_outcomes[stream.outcome] += 1
        if stream.outcome != self._last_outcome:
            level = logging.INFO if stream.outcome == "ok" else logging.WARNING
            log.log(
                level, "streamprobe %s: stream outcome %s -> %s", self.config.name, self._last_outcome, stream.outcome
            )
            self._last_outcome = stream.outcome
        timing = stream.timing
        if timing is not None:
            if timing.ttft_s is not None:
                self._ttft.observe(timing.ttft_s)
            if timing.tpot_s is not None and not timing.buffered:  # a held stream's TPOT is ~0, not a token time
                self._tpot.observe(timing.tpot_s)
            if timing.duration_s is not None:
                self._duration.observe(timing.duration_s)
            self._buffered_total += int(bool(timing.buffered))
        for check in checks:
            self._health_outcomes[check.outcome] += 1
            if check.latency_s is not None:
                self._health.observe(check.latency_s)
                self._health_window.append(check.latency_s)

    def _write(self, stream: StreamResult) -> ExpositionWriter:
        cfg = self.config
        w = ExpositionWriter()
        sl = {"endpoint": cfg.name, "model": cfg.model}
        hl = {"endpoint": cfg.name}
        for name, hist, help_ in (
            ("tailhound_stream_ttft_seconds", self._ttft, "Client-side time to first content token."),
            ("tailhound_stream_tpot_seconds", self._tpot, "Client-side mean time between content events."),
            ("tailhound_stream_duration_seconds", self._duration, "Client-side time to the end of the stream."),
        ):
            w.histogram(name, hist.le, hist.cumulative(), hist.count, hist.sum, sl, help=help_)
        for outcome, n in self._stream_outcomes.items():
            w.counter(
                "tailhound_stream_requests_total",
                n,
                {**sl, "outcome": outcome},
                help="Streamed probe requests by outcome.",
            )
        w.counter(
            "tailhound_stream_buffered_total",
            self._buffered_total,
            sl,
            help="Probes whose stream arrived buffered (all tokens in <= 2 bursts).",
        )
        timing = stream.timing
        if timing is not None:
            for name, value, help_ in (
                ("tailhound_stream_last_ttft_seconds", timing.ttft_s, "TTFT of the last probe."),
                (
                    "tailhound_stream_last_tpot_seconds",
                    None if timing.buffered else timing.tpot_s,
                    "TPOT of the last probe (absent when it was buffered).",
                ),
                ("tailhound_stream_last_duration_seconds", timing.duration_s, "Duration of the last probe."),
                (
                    "tailhound_stream_first_byte_share",
                    timing.first_byte_share,
                    "TTFT / duration of the last probe; near 1 when a proxy buffered the stream.",
                ),
            ):
                if value is not None:
                    w.gauge(name, value, sl, help=help_)
            w.gauge("tailhound_stream_chunks", timing.chunks, sl, help="Content events in the last probe.")
            w.gauge("tailhound_stream_bursts", timing.bursts, sl, help="Bursts the content events arrived in.")
            if timing.buffered is not None:
                w.gauge(
                    "tailhound_stream_buffered",
                    float(timing.buffered),
                    sl,
                    help="1 when a proxy/CDN held the last stream and flushed it at once.",
                )
        for name, value in stream.header_gauges.items():
            w.gauge(name, value, sl, help="A response header of the last probe that explains buffering (1/0).")
        w.histogram(
            "tailhound_health_duration_seconds",
            self._health.le,
            self._health.cumulative(),
            self._health.count,
            self._health.sum,
            hl,
            help="Latency of successful /health checks.",
        )
        for outcome, n in self._health_outcomes.items():
            w.counter("tailhound_health_checks_total", n, {**hl, "outcome": outcome}, help="/health checks by outcome.")
        window = list(self._health_window)
        w.gauge("tailhound_health_window_samples", len(window), hl)
        p95 = percentile(window, 0.95) if len(window) >= MIN_HEALTH_SAMPLES else None
        if p95 is not None:
            w.gauge("tailhound_health_p95_seconds", p95, hl, help="P95 of /health latency over the rolling window.")
            w.gauge("tailhound_health_p50_seconds", percentile(window, 0.5), hl)
        if cfg.lb_health_timeout_s is not None:
            w.gauge("tailhound_lb_health_timeout_seconds", cfg.lb_health_timeout_s, hl)
            if p95 is not None and p95 > 0:
                w.gauge(
                    "tailhound_lb_health_timeout_margin_ratio",
                    cfg.lb_health_timeout_s / p95,
                    hl,
                    help="LB health-check timeout / P95 of /health; below 1.5 instances flap.",
                )
        return w
