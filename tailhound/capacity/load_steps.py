"""The load driver's per-request records -> one result per step of the ramp.

``requests``, ``throughput_rps`` and ``output_tokens_per_s`` count the requests that completed (successfully)
within the step's window, whenever they started; ``ttft``, ``tpot`` and ``errors`` the requests that *started*
in the step (the load they met), measured to their end; ``concurrency_mean`` is the mean number of requests in
flight over the window; ``engine`` the means of the engine's gauges scraped during it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tailhound.capacity.model import Percentiles, StepResult

#: Least observations for each percentile (fewer: None, "too few requests to say").
MIN_COUNT = {"p50": 1, "p95": 20, "p99": 100}
#: Engine figures of a step: result key -> (catalog signal, how the series of one scrape combine).
ENGINE_FIGURES = {
    "queue": ("engine.requests_waiting", "sum"),
    "batch": ("engine.requests_running", "sum"),
    "kv_cache_usage": ("engine.kv_cache_usage", "mean"),
}


def percentiles(values: list[float]) -> Percentiles:
    from tailhound.agents.collectors.sse import percentile

    n = len(values)
    if not n:
        return Percentiles()
    ordered = sorted(values)
    out = {k: round(percentile(ordered, int(k[1:]) / 100), 6) for k, least in MIN_COUNT.items() if n >= least}
    return Percentiles(**out, mean=round(sum(ordered) / n, 6), count=n)


@dataclass
class _Step:
    index: int
    offered: float
    start: float
    end: float | None = None
    started: int = 0
    late: int = 0
    missed: int = 0
    scrapes: list[dict[str, float]] = field(default_factory=list)


@dataclass
class _Request:
    step: int
    t0: float
    t1: float
    ttft: float | None
    tpot: float | None
    tokens: int
    err: str | None
    #: still running when the test ended (not an error; its TTFT, when known, is a lower bound)
    cut: bool = False


class Aggregator:
    """The driver's records -> step results."""

    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.requests: list[_Request] = []
        self.errors_by_reason: dict[str, int] = {}
        self.stopped: str | None = None
        self.ended = False
        self.ready = False

    @property
    def current(self) -> _Step | None:
        return self.steps[-1] if self.steps and self.steps[-1].end is None else None

    def take(self, obj: dict) -> str | None:
        """One driver line; returns its kind."""
        kind = obj.get("k")
        if kind == "r":
            req = _Request(
                int(obj["s"]),
                float(obj["t0"]),
                float(obj["t1"]),
                obj.get("ttft"),
                obj.get("tpot"),
                int(obj.get("tok") or 0),
                obj.get("err"),
                bool(obj.get("cut")),
            )
            self.requests.append(req)
            if req.err and not req.cut:
                reason = req.err.split(":")[0]
                self.errors_by_reason[reason] = self.errors_by_reason.get(reason, 0) + 1
        elif kind == "step":
            self.steps.append(_Step(int(obj["i"]), float(obj["offered"]), float(obj["at"])))
        elif kind == "step_end":
            for st in self.steps:
                if st.index == int(obj["i"]):
                    st.end = float(obj["at"])
                    st.started, st.late, st.missed = int(obj["started"]), int(obj["late"]), int(obj["missed"])
        elif kind == "end":
            self.stopped = obj.get("stopped")
            self.ended = True
        elif kind == "ready":
            self.ready = True
        return kind

    def step_result(self, st: _Step, end: float | None = None) -> StepResult | None:
        end = st.end if st.end is not None else end
        if end is None or end - st.start <= 0:
            return None
        start, duration = st.start, end - st.start
        done = [r for r in self.requests if r.err is None and start <= r.t1 < end]
        mine = [r for r in self.requests if r.step == st.index]
        ok = [r for r in mine if r.err is None]
        cut = [r for r in mine if r.cut]
        overlap = sum(max(0.0, min(r.t1, end) - max(r.t0, start)) for r in self.requests)
        return StepResult(
            index=st.index,
            offered=st.offered,
            started_at=start,
            duration_s=round(duration, 6),
            requests=len(done),
            errors=sum(1 for r in mine if r.err is not None and not r.cut),
            unfinished=len(cut),
            throughput_rps=round(len(done) / duration, 6),
            output_tokens_per_s=round(sum(r.tokens for r in done) / duration, 6),
            concurrency_mean=round(overlap / duration, 6),
            ttft=percentiles([r.ttft for r in ok if r.ttft is not None]),
            tpot=percentiles([r.tpot for r in ok if r.tpot is not None]),
            engine={
                k: round(sum(s[k] for s in st.scrapes if k in s) / n, 6)
                for k in ENGINE_FIGURES
                if (n := sum(1 for s in st.scrapes if k in s))
            },
        )

    def live(self) -> dict:
        """The running step so far (for progress)."""
        st = self.current
        if st is None:
            return {}
        mine = [r for r in self.requests if r.step == st.index]
        ok = [r for r in mine if r.err is None]
        return {
            "index": st.index,
            "offered": st.offered,
            "elapsed": time.time() - st.start,
            "done": len(ok),
            "errors": len(mine) - len(ok),
            "ttft": percentiles([r.ttft for r in ok if r.ttft is not None]),
            "tpot": percentiles([r.tpot for r in ok if r.tpot is not None]),
            "engine": st.scrapes[-1] if st.scrapes else {},
        }
