"""Capacity from recorded production telemetry: the load varies by itself, so bin it and read the curves.

Recordings (``tailhound record`` / ``tailhound simulate --record``) run through the agent's pipeline and the
streams step as replay does, with no rules (the approach of :mod:`tailhound.streams.loadfit`): the
processor's view gives each engine's gauges and counter rates, and a
:class:`~tailhound.streams.latency.LatencyTracker` of its own, with a window of `window_s`, the latency
percentiles over the same span as the load. Every `window_s` of event time each engine contributes one
:class:`TelemetryWindow` (windows with fewer than `min_requests` TTFT/TPOT observations are left out):

- ``throughput``: requests completed per second: the window's ``latency.e2e`` observation count / `window_s`
  (what the model stage's ``model.engine_request_rate`` counts); requests that were aborted in the queue
  have no end-to-end latency, so they do not count as served. Without an e2e histogram:
  ``engine.requests_finished.rate`` (mean over the window; on vLLM it counts aborted requests too);
- ``load``: the offered load, requests arriving per second. vLLM and NIM count no arrivals, so it is
  estimated as finished + (waiting at the end - waiting at the start) / window: what was served, plus what
  joined the queue (aborted requests count as finished on vLLM). TGI counts arrivals
  (``engine.requests_received.rate``): used when present;
- ``queue``, ``running``: ``engine.requests_waiting`` and ``engine.requests_running`` (means over the window);
- TTFT and TPOT P50/P95/P99 and means over the window.

:func:`bin_windows` pools the windows of every engine of a model (engines of one model share a capacity
curve) into :data:`DEFAULT_BINS` equal-width load bins; a bin needs `min_windows` windows; its latencies and
its queue are the medians of its windows' (robust to stray windows: a queue left over from an earlier
overload sits in a window of moderate load), its load, throughput and batch the means. The bins
are :class:`~tailhound.capacity.recommend.LoadPoint` s in requests/s, analysed like a load test's steps
(:func:`recommend_from_telemetry`, ``source: telemetry:<file>``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.capacity.model import Percentiles
from tailhound.capacity.recommend import CapacityAnalysis, LoadPoint, analyse
from tailhound.recording import ScrapeRecord
from tailhound.streams.latency import LatencyTracker
from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
from tailhound.streams.ruleset.rulefile import RuleSet

ENGINE_SOURCES = ("vllm", "tgi", "nim", "sglang")
DEFAULT_WINDOW_S = 60.0
DEFAULT_MIN_REQUESTS = 20
DEFAULT_BINS = 24
DEFAULT_MIN_WINDOWS = 2
UNKNOWN_MODEL = "unknown"


@dataclass(frozen=True)
class TelemetryWindow:
    """One engine over one window of event time ending at ``ts``."""

    model: str
    node: str
    engine: str
    ts: float
    load: float
    throughput: float
    ttft: Percentiles
    tpot: Percentiles
    queue: float | None
    running: float | None


@dataclass
class _Acc:
    """What one engine's snapshots of the current window added up."""

    start_ts: float
    waiting_start: float | None
    finished: list[float] = field(default_factory=list)
    received: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)


def _percentiles(values: dict[str, dict[str, float]], signal: str, entity: str) -> Percentiles:
    def get(stat: str) -> float | None:
        return (values.get(f"{signal}.{stat}") or {}).get(entity)

    count = get("window_count")
    return Percentiles(
        p50=get("p50"), p95=get("p95"), p99=get("p99"), mean=get("mean"), count=int(count) if count is not None else 0
    )


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def telemetry_windows(
    records: Iterable[ScrapeRecord], window_s: float = DEFAULT_WINDOW_S, min_requests: int = DEFAULT_MIN_REQUESTS
) -> list[TelemetryWindow]:
    """Per engine and window of `window_s` event time: its load, throughput, queue, batch and latencies."""
    if not math.isfinite(window_s) or window_s <= 0:
        raise ValueError(f"window_s must be > 0, got {window_s!r}")
    builder = SnapshotBuilder()
    processor = SnapshotProcessor(RuleSet(rules=[]), all_stats=True)  # it reads the whole view
    store = MemoryStateStore()
    tracker = LatencyTracker(window_s=window_s)
    accs: dict[tuple[str, str], _Acc] = {}
    out: list[TelemetryWindow] = []
    for rec in records:
        snap = builder.build(rec)
        step = processor.step(store.get(snap.node), snap)
        if step.changed:
            store[snap.node] = step.state
        if snap.source not in ENGINE_SOURCES or snap.error is not None:
            continue
        tracker.observe(snap)
        view = processor.view(snap.node, snap.ts)
        running_now = view.get("engine.requests_running") or {}
        waiting_now = view.get("engine.requests_waiting") or {}
        finished_now = view.get("engine.requests_finished.rate") or {}
        received_now = view.get("engine.requests_received.rate") or {}
        entities = set(running_now) | set(waiting_now) | set(finished_now)
        latency: dict[str, dict[str, float]] | None = None
        for entity in sorted(entities):
            key = (snap.node, entity)
            acc = accs.get(key)
            if acc is None:  # the window starts here: its first values are the baseline
                accs[key] = _Acc(start_ts=snap.ts, waiting_start=waiting_now.get(entity))
                continue
            for series, now in (
                (acc.finished, finished_now),
                (acc.received, received_now),
                (acc.waiting, waiting_now),
                (acc.running, running_now),
            ):
                if entity in now:
                    series.append(float(now[entity]))
            span = snap.ts - acc.start_ts
            if span < window_s - 1e-6:
                continue
            accs[key] = _Acc(start_ts=snap.ts, waiting_start=waiting_now.get(entity))
            if latency is None:
                latency = tracker.engine_values(snap.ts, snap.node)
            ttft, tpot = _percentiles(latency, "latency.ttft", entity), _percentiles(latency, "latency.tpot", entity)
            finished = _mean(acc.finished)
            e2e = (latency.get("latency.e2e.window_count") or {}).get(entity)
            throughput = e2e / window_s if e2e is not None else finished  # (the tracker's window: window_s)
            if throughput is None or finished is None or max(ttft.count, tpot.count) < min_requests:
                continue
            received = _mean(acc.received)
            if received is not None:
                load = received
            else:
                end = waiting_now.get(entity)
                grew = (end - acc.waiting_start) / span if end is not None and acc.waiting_start is not None else 0.0
                load = max(0.0, finished + grew)
            model = (
                _model_of(tracker, snap.node, entity)
                or snap.labels.get("model_name")
                or snap.labels.get("model")
                or UNKNOWN_MODEL
            )
            out.append(
                TelemetryWindow(
                    model=model,
                    node=snap.node,
                    engine=entity,
                    ts=snap.ts,
                    load=load,
                    throughput=throughput,
                    ttft=ttft,
                    tpot=tpot,
                    queue=_mean(acc.waiting),
                    running=_mean(acc.running),
                )
            )
    return out


def _model_of(tracker: LatencyTracker, node: str, entity: str) -> str | None:
    for signal in ("latency.ttft", "latency.tpot", "latency.e2e"):
        series = tracker.series.get((signal, node, entity))
        if series is not None and series.model:
            return series.model
    return None


def _median(values: Iterable[float | None]) -> float | None:
    vs = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(vs) if vs else None


def _median_percentiles(ps: Sequence[Percentiles]) -> Percentiles:
    return Percentiles(
        p50=_median(p.p50 for p in ps),
        p95=_median(p.p95 for p in ps),
        p99=_median(p.p99 for p in ps),
        mean=_median(p.mean for p in ps),
        count=sum(p.count for p in ps),
    )


def bin_windows(
    windows: Sequence[TelemetryWindow], bins: int = DEFAULT_BINS, min_windows: int = DEFAULT_MIN_WINDOWS
) -> list[LoadPoint]:
    """The windows (of one model) in `bins` equal-width load bins -> load points, lowest load first."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    ws = [w for w in windows if math.isfinite(w.load)]
    if not ws:
        return []
    lo, hi = min(w.load for w in ws), max(w.load for w in ws)
    width = (hi - lo) / bins if hi > lo else 1.0
    grouped: dict[int, list[TelemetryWindow]] = {}
    for w in ws:
        grouped.setdefault(min(bins - 1, int((w.load - lo) / width)), []).append(w)
    out = []
    for _i, group in sorted(grouped.items()):
        if len(group) < min_windows:
            continue
        out.append(
            LoadPoint(
                load=sum(w.load for w in group) / len(group),
                throughput_rps=sum(w.throughput for w in group) / len(group),
                ttft=_median_percentiles([w.ttft for w in group]),
                tpot=_median_percentiles([w.tpot for w in group]),
                queue=_median(w.queue for w in group),
                batch=_mean([w.running for w in group if w.running is not None]),
                requests=sum(max(w.ttft.count, w.tpot.count) for w in group),
            )
        )
    return out


def points_by_model(
    windows: Sequence[TelemetryWindow], bins: int = DEFAULT_BINS, min_windows: int = DEFAULT_MIN_WINDOWS
) -> dict[str, list[LoadPoint]]:
    """Model -> its load points (every engine of the model pooled)."""
    models: dict[str, list[TelemetryWindow]] = {}
    for w in windows:
        models.setdefault(w.model, []).append(w)
    return {m: bin_windows(ws, bins, min_windows) for m, ws in sorted(models.items())}


def recommend_from_telemetry(
    records: Iterable[ScrapeRecord],
    *,
    source: str,
    percentile: str = "p95",
    window_s: float = DEFAULT_WINDOW_S,
    min_requests: int = DEFAULT_MIN_REQUESTS,
    bins: int = DEFAULT_BINS,
    min_windows: int = DEFAULT_MIN_WINDOWS,
) -> list[CapacityAnalysis]:
    """One analysis per model of the recordings (`source`: ``telemetry:<file>``); models whose windows fill
    fewer than two bins are left out (ValueError when none is left)."""
    windows = telemetry_windows(records, window_s=window_s, min_requests=min_requests)
    out = []
    skipped = []
    for model, points in points_by_model(windows, bins, min_windows).items():
        if len(points) < 2:
            skipped.append(model)
            continue
        analysis = analyse(points, model=model, source=source, mode="rate", percentile=percentile)
        analysis.notes.insert(
            0, f"{len(points)} load bins from {sum(1 for w in windows if w.model == model)} windows of {window_s:g} s"
        )
        out.append(analysis)
    if not out:
        why = f" (too few windows for {', '.join(skipped)})" if skipped else ""
        raise ValueError(f"no engine telemetry with at least {min_requests} requests per {window_s:g} s window{why}")
    return out
