"""Request traces that drive the simulator's load (``--load-trace``): arrivals and token mix from a CSV.

A trace is a CSV file with a header naming at least ``arrived_at`` (seconds from the trace's start),
``num_prefill_tokens`` (prompt tokens) and ``num_decode_tokens`` (output tokens), one request a row in
arrival order: the format of the Azure LLM inference traces as microsoft/vidur republishes them. Reading is
bounded (:data:`MAX_TRACE_BYTES`, :data:`MAX_TRACE_ROWS`, :data:`MAX_TOKENS`); anything else is a ValueError
naming the line.

How a trace becomes the fleet's load (:class:`TraceLoad`):

- time runs 1:1 (a 15 s burst stays a 15 s burst) from ``SimConfig.load_trace_start_s`` into the trace (its
  start by default) at the simulation's start, and the trace loops when the run goes past its end (period:
  its span plus one mean inter-arrival gap);
- the rate is scaled to the fleet, so that the trace's busiest minute loads the fleet's engines to
  ``SimConfig.load_trace_peak`` of their capacity for the trace's own token mix (engine.mix_capacity_rps);
  each node gets a Poisson share of the tick's scaled requests (its load-balancer share, times what faults
  and noise do to its arrivals), every request drawn from that tick's trace requests with its prompt and
  output tokens.
"""

from __future__ import annotations

import bisect
import csv
import io
import math
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from .load import poisson

#: Bounds on what a trace file may hold (the public Azure traces: 0.4 MB, 19,366 rows at most).
MAX_TRACE_BYTES = 32 * 1024 * 1024
MAX_TRACE_ROWS = 500_000
MAX_TOKENS = 1_000_000
COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
#: Window over which the trace's peak rate is measured for scaling it to the fleet (s).
PEAK_WINDOW_S = 60.0


@dataclass(frozen=True)
class RequestTrace:
    """The requests of one trace: arrival times (s from its start, non-decreasing), prompt and output tokens."""

    name: str
    arrivals: tuple[float, ...]
    prompts: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def period_s(self) -> float:
        """Loop period: the span plus one mean gap, so the seam neither doubles nor drops the rate."""
        span = self.arrivals[-1] - self.arrivals[0]
        return self.arrivals[-1] + span / (len(self.arrivals) - 1)

    @property
    def mean_rps(self) -> float:
        return len(self.arrivals) / self.period_s

    def peak_rps(self, window_s: float = PEAK_WINDOW_S) -> float:
        """The highest arrival rate over aligned windows of `window_s` seconds."""
        counts: dict[int, int] = {}
        for t in self.arrivals:
            k = int(t // window_s)
            counts[k] = counts.get(k, 0) + 1
        return max(counts.values()) / window_s

    def mean_tokens(self) -> tuple[float, float]:
        """(mean prompt tokens, mean output tokens) over the whole trace."""
        n = len(self.arrivals)
        return sum(self.prompts) / n, sum(self.outputs) / n

    def window(self, t0: float, t1: float) -> list[int]:
        """Indices of the requests arriving in [t0, t1) of looped trace time."""
        period, out = self.period_s, []
        k = math.floor(t0 / period)
        while k * period < t1:  # a window longer than the period spans several loops
            lo = bisect.bisect_left(self.arrivals, t0 - k * period)
            hi = bisect.bisect_left(self.arrivals, t1 - k * period)
            out.extend(range(lo, hi))
            k += 1
        return out


def _number(text: str, line: int, column: str) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"line {line}: {column} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"line {line}: {column} must be a finite number >= 0, got {text!r}")
    return value


def parse_trace(text: str, name: str = "trace") -> RequestTrace:
    """Parse a trace's CSV text (bounded in rows and token counts)."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        raise ValueError(f"{name}: empty trace")
    header = [h.strip() for h in header]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{name}: missing column(s) {', '.join(missing)}; a trace needs {', '.join(COLUMNS)}")
    idx = [header.index(c) for c in COLUMNS]
    arrivals: list[float] = []
    prompts: list[int] = []
    outputs: list[int] = []
    for line, row in enumerate(reader, start=2):
        if not row:
            continue
        if len(arrivals) >= MAX_TRACE_ROWS:
            raise ValueError(f"{name}: more than {MAX_TRACE_ROWS} requests")
        if len(row) < len(header):
            raise ValueError(f"{name}: line {line}: {len(row)} fields, the header has {len(header)}")
        t = _number(row[idx[0]], line, COLUMNS[0])
        p, g = (_number(row[i], line, c) for i, c in zip(idx[1:], COLUMNS[1:], strict=True))
        if arrivals and t < arrivals[-1]:
            raise ValueError(f"{name}: line {line}: arrived_at {t} is before the previous request's")
        if not (1 <= p <= MAX_TOKENS and 1 <= g <= MAX_TOKENS):
            raise ValueError(f"{name}: line {line}: token counts must be 1..{MAX_TOKENS}")
        arrivals.append(t)
        prompts.append(int(p))
        outputs.append(int(g))
    if len(arrivals) < 2 or arrivals[-1] <= arrivals[0]:
        raise ValueError(f"{name}: a trace needs at least two requests at different times")
    return RequestTrace(name, tuple(arrivals), tuple(prompts), tuple(outputs))


def load_trace(path: str | Path) -> RequestTrace:
    """Read a trace file (at most MAX_TRACE_BYTES, UTF-8 CSV)."""
    path = Path(path)
    with path.open("rb") as fh:
        data = fh.read(MAX_TRACE_BYTES + 1)
    if len(data) > MAX_TRACE_BYTES:
        raise ValueError(f"{path}: larger than {MAX_TRACE_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
    return parse_trace(text, path.name)


class TraceQueue:
    """One engine's waiting trace requests (FIFO, as (prompt, output) tokens) and the mean lengths of what it
    serves next, which set its capacity the way the built-in mix's means do."""

    def __init__(self, default_means: tuple[float, float], max_output: int) -> None:
        self.pending: deque[tuple[int, int]] = deque()
        self.means = default_means
        self.max_output = max_output
        self._sums = (0, 0)

    def clear(self) -> None:
        """The engine restarted: nothing waits."""
        self.pending.clear()
        self._sums = (0, 0)

    def next_means(self, requests: list[tuple[int, int]]) -> tuple[float, float]:
        """Mean prompt and output tokens of what waits plus `requests` (the last means when nothing does)."""
        n = len(self.pending) + len(requests)
        if n:
            cap = self.max_output
            self.means = (
                (self._sums[0] + sum(p for p, _ in requests)) / n,
                (self._sums[1] + sum(min(g, cap) for _, g in requests)) / n,
            )
        return self.means

    def advance(
        self, requests: list[tuple[int, int]], admitted: int, served: int, aborted: int, waiting: int
    ) -> list[tuple[int, int]]:
        """Move a tick's requests through the queue: `admitted` of them join (a retry storm's re-sent
        requests repeat the tick's), the first `served` leave to be completed, the next `aborted` gave up;
        what the queue bound refused (TGI's 429s, a closed-loop client holding back) is the newest. Returns
        the served ones; afterwards the queue holds exactly `waiting` requests, the engine's count."""
        pending = self.pending
        if not requests and admitted:  # re-sent requests of a tick the trace left empty: the last means
            requests = [(max(1, round(self.means[0])), max(1, round(self.means[1])))]
        for k in range(admitted):
            pending.append(requests[k % len(requests)])
        out = [pending.popleft() for _ in range(min(served, len(pending)))]
        for _ in range(min(aborted, len(pending))):
            pending.popleft()
        while len(pending) > waiting:
            pending.pop()
        cap = self.max_output
        self._sums = (sum(p for p, _ in pending), sum(min(g, cap) for _, g in pending))
        return out


class TraceLoad:
    """The fleet's arrivals from a trace: per tick the trace's requests, scaled by `scale`, split over nodes."""

    def __init__(self, trace: RequestTrace, scale: float, nodes: int, start_s: float = 0.0) -> None:
        if not math.isfinite(scale) or scale <= 0:
            raise ValueError(f"trace scale must be > 0, got {scale}")
        self.trace = trace
        self.scale = scale
        self.nodes = nodes
        self.start_s = start_s
        self._window: list[int] = []
        self._t = -1.0

    def node_requests(self, rng: random.Random, t_s: float, dt: float, share: float) -> list[tuple[int, int]]:
        """One node's requests of the tick starting `t_s` s after the start, as (prompt, output) tokens.

        `share` is the node's weight (1: an even 1/nodes of the fleet's traffic)."""
        if t_s != self._t:  # every node of a tick reads the same window
            at = self.start_s + t_s
            self._t, self._window = t_s, self.trace.window(at, at + dt)
        window = self._window
        if not window:
            return []
        n = poisson(rng, len(window) * self.scale * share / self.nodes)
        tr = self.trace
        picks = [window[int(rng.random() * len(window))] for _ in range(n)]
        return [(tr.prompts[i], tr.outputs[i]) for i in picks]
