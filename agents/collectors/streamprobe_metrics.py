"""The streaming probe's metrics over the agent's life: histograms, outcome counters, the /health window.

What each collection measured (:class:`StreamResult`, :class:`HealthCheck`) is accounted here and rendered as
Prometheus text, so the probe itself only talks HTTP. Response headers are exported as 1/0 flags, never
their values.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tailhound.agents.collectors.sse import StreamTiming, percentile
from tailhound.agents.render import ExpositionWriter

log = logging.getLogger("tailhound.agents.collectors.streamprobe")

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


class ProbeMetrics:
    """Everything one endpoint's probe exports, kept across collections."""

    def __init__(self, name: str, model: str, health_window: int, lb_health_timeout_s: float | None = None) -> None:
        self.name, self.model, self.lb_health_timeout_s = name, model, lb_health_timeout_s
        self._ttft = LatencyHistogram(TTFT_BUCKETS)
        self._tpot = LatencyHistogram(TPOT_BUCKETS)
        self._duration = LatencyHistogram(TTFT_BUCKETS)
        self._health = LatencyHistogram(HEALTH_BUCKETS)
        self._health_window: deque[float] = deque(maxlen=health_window)
        self._stream_outcomes = dict.fromkeys(STREAM_OUTCOMES, 0)
        self._health_outcomes = dict.fromkeys(HEALTH_OUTCOMES, 0)
        self._buffered_total = 0
        self._last_outcome = "ok"

    def account(self, stream: StreamResult, checks: list[HealthCheck]) -> None:
        """One collection's stream probe and health checks."""
        self._stream_outcomes[stream.outcome] += 1
        if stream.outcome != self._last_outcome:
            level = logging.INFO if stream.outcome == "ok" else logging.WARNING
            log.log(level, "streamprobe %s: stream outcome %s -> %s", self.name, self._last_outcome, stream.outcome)
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

    def write(self, stream: StreamResult) -> ExpositionWriter:
        """The metrics so far, with `stream` as the last probe."""
        w = ExpositionWriter()
        sl = {"endpoint": self.name, "model": self.model}
        hl = {"endpoint": self.name}
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
        if self.lb_health_timeout_s is not None:
            w.gauge("tailhound_lb_health_timeout_seconds", self.lb_health_timeout_s, hl)
            if p95 is not None and p95 > 0:
                w.gauge(
                    "tailhound_lb_health_timeout_margin_ratio",
                    self.lb_health_timeout_s / p95,
                    hl,
                    help="LB health-check timeout / P95 of /health; below 1.5 instances flap.",
                )
        return w
