"""Demand: the requests that ARRIVE at an engine, as opposed to the ones it finishes (pure).

Capacity is a demand problem; a node that got slower at the same load is a supply problem. Engines
report what they finish (histogram counts, ``request_success_total``; vLLM's HTTP counter is observed
when a response completes), and finishing is what a supply drop lowers and a drained backlog raises,
so neither says whether more work came in. Arrivals do, by conservation:

    arrived over the window = finished over the window + (in flight now - in flight a window ago)

with in flight = running + waiting. ``engine.arrival_rate`` is that, per engine, in requests per
second over :data:`WINDOW_S` (the latency window, so "finished" is ``latency.e2e.window_count``). A
backlog draining after a fault finishes many requests while in-flight falls: arrivals stay level. It is
None until the node's in-flight history spans most of the window.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

ARRIVAL_RATE = "engine.arrival_rate"
#: the latency tracker's window: ``latency.e2e.window_count`` counts requests finished within it
WINDOW_S = 300.0
#: in-flight requests of an engine: running + waiting
INFLIGHT = ("engine.requests_running", "engine.requests_waiting")
FINISHED = "latency.e2e.window_count"
#: the history must reach back this share of the window
MIN_SPAN = 0.8

#: (signal, entity) -> [(ts, value), ...] oldest first
History = Callable[[str, str], list[tuple[float, float]]]


def history_windows(reads: set[str] | frozenset[str]) -> dict[str, float]:
    """Signals whose short history demand needs (when a rule reads it) -> how far back."""
    return {s: WINDOW_S * 1.1 for s in INFLIGHT} if ARRIVAL_RATE in reads else {}


def _at(points: list[tuple[float, float]], ts: float) -> float | None:
    """The value at `ts`: the last point at or before it."""
    found = None
    for t, v in points:
        if t > ts + 1e-6:
            break
        found = v
    return found


def arrival_rates(view: Mapping[str, dict[str, float] | None], history: History, now: float) -> dict[str, float]:
    """``engine.arrival_rate`` per engine that reports its finished count and in-flight gauges."""
    finished = view.get(FINISHED) or {}
    out: dict[str, float] = {}
    for engine, done in finished.items():
        inflight_now = inflight_then = 0.0
        known = True
        for signal in INFLIGHT:
            current = (view.get(signal) or {}).get(engine)
            points = history(signal, engine)
            if current is None or not points or now - points[0][0] < WINDOW_S * MIN_SPAN:
                known = False
                break
            then = _at(points, now - WINDOW_S)
            inflight_now += current
            inflight_then += then if then is not None else points[0][1]
        if known:
            out[engine] = max(0.0, (done + inflight_now - inflight_then) / WINDOW_S)
    return out
