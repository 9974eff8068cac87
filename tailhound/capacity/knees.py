"""Where latency bends, where throughput stops rising, where TPOT outgrows throughput (pure; numpy).

Knee (:func:`find_knee`): a two-segment piecewise linear fit of latency against load, the "segmented
regression" one would draw by hand on the plot.

- **Continuous** by default: a hinge ``latency = a + b load + c max(0, load - k)``, one weighted linear
  least-squares fit per candidate breakpoint ``k`` (:func:`numpy.linalg.lstsq`: the fit scikit-learn's
  ``LinearRegression(sample_weight=...)`` makes, without its per-call overhead: ~70 candidates x 2 spaces take
  ~5 ms instead of ~80 ms), scanned coarse (a quarter of each gap between measured loads) then fine (1/32 of a
  gap around the best), with at least two points at or left of the bend and two right of it (the second of
  them at least a quarter gap away), so the bend can lie between two measured loads. ``continuous=False``
  fits the two segments independently (a weighted least-squares line each, split between two measured loads)
  and puts the bend where the two lines cross (clamped into the gap between the split points).
- **Relative errors**, in one of two spaces: past saturation the latency explodes (0.3 s -> 2 s -> 20 s), and
  a plain least-squares fit on seconds is then dominated by the last one or two points, which drags the bend
  to the right. Both spaces weigh every point by its relative error:

  - ``log``: the hinge fitted on ln(latency). Exact for a latency that grows *exponentially* past the knee;
    but a latency that grows *linearly* in seconds past the knee (a queue: a load test's step holds the
    excess load for a fixed time, so its P95 TTFT grows with ``load - capacity``) is concave in log space,
    and the log hinge alone puts that knee ~10-30 % early;
  - ``relative``: the hinge fitted on seconds, each point weighted by 1 / latency^2 (so the residuals are
    relative). Exact for linear growth past the knee; alone, ~15-35 % late for an exponential one.

  ``space="auto"`` (the default) fits both and keeps the one whose fitted curve is closer to the points in
  log space (sum of squared ln(measured / fitted), one yardstick for both). On synthetic curves with 5 %
  multiplicative noise and 15 load steps from 0 to 1.5x the knee (tests/capacity/test_knees.py, 20 seeds
  each), the knee lands within 2.2 % of the true bend for hinge, queue-like and exponential curves and within
  6.9 % for a small bend (+50 % by the end); with 10 % noise within 2.8 %. An M/M/1-like
  0.3 s / (1 - load / capacity) has no sharp bend: its knee lands at 0.72-0.80 of the capacity.

- The knee's latency is the **measured** latency interpolated at the knee load (linear between the two
  neighbouring points, in seconds), so it can be read off the plot.
- ``confidence = 1 - SSE_two / SSE_one`` in the chosen space: how much better two segments explain the curve
  than one line.

A latency that exploded (the highest at least :data:`CEILING_EXPLOSION` = 10 times the lowest) and then sits
at a ceiling (client timeouts, a full queue: the last points within :data:`CEILING_BAND` = 10 % of the
highest) keeps only the first point of that tail (:func:`cut_ceiling`): the flat run says nothing about
where the curve bent and would pull the fitted rise down and the bend to the left.

No knee (None) when there are fewer than :data:`MIN_POINTS` distinct loads, when the curve does not bend
upwards (the slope after the bend is not above the slope before it), when the bend explains too little
(confidence below ``min_confidence``, default :data:`MIN_CONFIDENCE`), or when it is too small to matter or
to tell from the noise: by the highest load the fitted latency must stand at least ``min_rise`` (default
:data:`MIN_RISE`, 25 %) above both its value at the knee and the pre-knee trend, and that rise must be at
least :data:`MIN_RISE_SIGMAS` times the residual standard deviation of the fit.

Throughput plateau (:func:`throughput_plateau`): the lowest load whose throughput is within ``tolerance``
(5 %) of the highest throughput measured, provided the test went on past it (a later load at least
``2 x tolerance`` higher): with throughput still proportional to load at the last step there is no plateau.

TPOT outpaces throughput (:func:`tpot_outpaces_throughput`): the elasticities ``d ln(TPOT) / d ln(load)`` and
``d ln(throughput) / d ln(load)``, each the slope of a least-squares line through a point and its two
neighbours in log-log space (one-sided at the ends: a little smoothing against per-step noise). The first
load where the TPOT elasticity exceeds the throughput elasticity and still does at the next point (or it is
the last point) is the answer, interpolated linearly where their difference changes sign. Only loads up to
the throughput plateau count, and without a crossing before it the plateau is the answer: from there on
throughput grows no more, and both elasticities are ~0, so a later "crossing" would be noise. Below saturation
throughput grows as fast as the load (elasticity ~1 in rate mode) and TPOT hardly at all; as the batch
fills, each extra sequence slows every decode step and adds less throughput: past the crossing a larger batch
costs more latency than it gains throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tailhound.capacity.model import Knee
from tailhound.errors import TailhoundError

if TYPE_CHECKING:
    import numpy as np

Space = Literal["auto", "log", "relative"]
SPACES: tuple[str, ...] = ("auto", "log", "relative")

#: fewer distinct loads than this: no knee (two segments need two points each)
MIN_POINTS = 4
#: two segments must explain at least this share of the one-line residual (1 - SSE_two / SSE_one)
MIN_CONFIDENCE = 0.5
#: by the highest load the latency stands at least this much (relative) above its knee value and the trend
MIN_RISE = 0.25
#: ... and that rise is at least this many residual standard deviations (when the fit has residual freedom)
MIN_RISE_SIGMAS = 3.0
#: candidate breakpoints: per gap between measured loads (coarse), then around the best (fine)
COARSE_GRID = 4
FINE_GRID = 16
#: a latency ceiling: the highest latency at least this many times the lowest, the tail within this band of it
CEILING_EXPLOSION = 10.0
CEILING_BAND = 0.1
#: throughput within this share of its maximum counts as the plateau
PLATEAU_TOLERANCE = 0.05
#: latencies are floored here (seconds) before logs and weights
MIN_LATENCY_S = 1e-6


@dataclass(frozen=True)
class SegmentFit:
    """A two-segment fit: the bend, the slopes either side, the fitted values (in the fitted space: ln(s) for
    ``log``, seconds for ``relative``), and the sums of squared (relative) residuals of one and two segments."""

    space: str
    breakpoint: float
    left_slope: float
    right_slope: float
    #: the fitted value at the breakpoint (left segment) and at the highest load (right segment)
    at_break: float
    at_end: float
    #: the pre-knee trend extrapolated to the highest load
    trend_at_end: float
    sse_one: float
    sse_two: float
    points: int
    continuous: bool

    @property
    def confidence(self) -> float:
        if self.sse_one <= 0.0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - self.sse_two / self.sse_one))

    @property
    def sigma(self) -> float | None:
        """Residual standard deviation (relative), None without residual freedom (4 parameters)."""
        free = self.points - 4
        return math.sqrt(self.sse_two / free) if free > 0 else None


def clean_points(xs: Sequence[float | None], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    """The (x, y) pairs with both finite, sorted by x; pairs at the same x are averaged."""
    by_x: dict[float, list[float]] = {}
    for x, y in zip(xs, ys, strict=True):
        if x is None or y is None or not math.isfinite(x) or not math.isfinite(y):
            continue
        by_x.setdefault(float(x), []).append(float(y))
    ox = sorted(by_x)
    return ox, [sum(by_x[x]) / len(by_x[x]) for x in ox]


def value_at(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """`ys` linearly interpolated at `x` over sorted `xs` (held flat beyond the ends)."""
    if not xs:
        raise ValueError("no points to interpolate")
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


@dataclass(frozen=True)
class _Line:
    """A weighted least-squares fit: intercept, coefficients, weighted sum of squared residuals."""

    intercept: float
    coef: tuple[float, ...]
    sse: float


def _wls(features: np.ndarray, y: np.ndarray, w: np.ndarray) -> _Line:
    """Weighted least squares with an intercept (what ``LinearRegression().fit(X, y, sample_weight=w)`` solves)."""
    import numpy as np

    design = np.column_stack((np.ones(len(y)), features))
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(design * sw[:, None], y * sw, rcond=None)
    resid = y - design @ coef
    return _Line(float(coef[0]), tuple(float(c) for c in coef[1:]), float(np.sum(w * resid * resid)))


def _one_line(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> _Line:
    return _wls(x.reshape(-1, 1), y, w)


def _hinge(x: np.ndarray, y: np.ndarray, w: np.ndarray, k: float) -> _Line:
    import numpy as np

    return _wls(np.column_stack((x, np.maximum(0.0, x - k))), y, w)


def _fit_space(xs: list[float], ys: list[float], space: str, continuous: bool) -> SegmentFit | None:
    try:
        import numpy as np
    except ImportError:
        # numpy is the loadtest extra's, not a base dependency
        raise TailhoundError("finding knees needs numpy: pip install 'tailhound[loadtest]'") from None

    x = np.asarray(xs, dtype=float)
    raw = np.maximum(np.asarray(ys, dtype=float), MIN_LATENCY_S)
    if space == "log":
        y, w = np.log(raw), np.ones_like(raw)
    else:
        y, w = raw, 1.0 / raw**2
    n = len(xs)
    sse_one = _one_line(x, y, w).sse
    x_end = float(x[-1])
    if continuous:
        # k from x1 to 3/4 of the way to x_{n-2}: two points at or left of k, two clearly right of it
        coarse = [
            float(x[i] + (x[i + 1] - x[i]) * j / COARSE_GRID) for i in range(1, n - 2) for j in range(COARSE_GRID)
        ]
        lo, hi = coarse[0], coarse[-1]
        scored = [(_hinge(x, y, w, k).sse, k) for k in coarse]
        _best_sse, k0 = min(scored)
        i0 = max(i for i in range(n) if x[i] <= k0)
        step = float(x[min(i0 + 1, n - 1)] - x[i0]) / COARSE_GRID
        fine = [min(hi, max(lo, k0 + step * (j / FINE_GRID * 2.0 - 1.0))) for j in range(FINE_GRID + 1)]
        best: tuple[_Line, float] | None = None
        for k in sorted({*fine, k0}):
            line = _hinge(x, y, w, k)
            if best is None or line.sse < best[0].sse:
                best = (line, k)
        assert best is not None
        line, k = best
        sse_two = line.sse
        b, c = line.coef
        at_break = line.intercept + b * k
        return SegmentFit(
            space=space,
            breakpoint=k,
            left_slope=b,
            right_slope=b + c,
            at_break=at_break,
            at_end=at_break + (b + c) * (x_end - k),
            trend_at_end=at_break + b * (x_end - k),
            sse_one=sse_one,
            sse_two=sse_two,
            points=n,
            continuous=True,
        )
    found = None
    for split in range(2, n - 1):  # left x[:split], right x[split:], two points each at least
        left, right = _one_line(x[:split], y[:split], w[:split]), _one_line(x[split:], y[split:], w[split:])
        if found is None or left.sse + right.sse < found[0]:
            found = (left.sse + right.sse, split, left, right)
    assert found is not None
    sse_two, split, left, right = found
    b_l, a_l, b_r, a_r = left.coef[0], left.intercept, right.coef[0], right.intercept
    lo_x, hi_x = float(x[split - 1]), float(x[split])
    k = (a_r - a_l) / (b_l - b_r) if b_l != b_r else (lo_x + hi_x) / 2.0
    k = min(hi_x, max(lo_x, k)) if math.isfinite(k) else (lo_x + hi_x) / 2.0
    return SegmentFit(
        space=space,
        breakpoint=k,
        left_slope=b_l,
        right_slope=b_r,
        at_break=a_l + b_l * k,
        at_end=a_r + b_r * x_end,
        trend_at_end=a_l + b_l * x_end,
        sse_one=sse_one,
        sse_two=sse_two,
        points=n,
        continuous=False,
    )


def _fits(xs: Sequence[float], ys: Sequence[float], space: Space, continuous: bool) -> list[SegmentFit]:
    if space not in SPACES:
        raise ValueError(f"space must be one of {', '.join(SPACES)}, got {space!r}")
    if len(xs) < MIN_POINTS:
        return []
    spaces = ("log", "relative") if space == "auto" else (space,)
    return [f for s in spaces if (f := _fit_space(list(xs), list(ys), s, continuous)) is not None]


def fit_two_segments(
    xs: Sequence[float], ys: Sequence[float], *, space: Space = "auto", continuous: bool = True
) -> SegmentFit | None:
    """The best two-segment fit of latencies `ys` (seconds) at sorted, distinct loads `xs`; None below
    :data:`MIN_POINTS`. ``space="auto"``: the log or the relative fit, whichever is closer in log space."""
    fits = _fits(xs, ys, space, continuous)
    return min(fits, key=lambda f: _log_sse(f, xs, ys)) if fits else None


def _log_sse(fit: SegmentFit, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Sum of squared ln(measured / fitted): the one yardstick for fits made in either space."""
    total = 0.0
    for x, y in zip(xs, ys, strict=True):
        slope = fit.left_slope if x <= fit.breakpoint else fit.right_slope
        f = fit.at_break + slope * (x - fit.breakpoint)
        if fit.space != "log":
            f = math.log(max(f, MIN_LATENCY_S))
        total += (math.log(max(y, MIN_LATENCY_S)) - f) ** 2
    return total


def cut_ceiling(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """Without the tail of a latency that exploded and then hit a ceiling (client timeouts, a full queue):
    when the highest latency is at least :data:`CEILING_EXPLOSION` times the lowest and the last points are
    all within :data:`CEILING_BAND` of it, only the first of them is kept (the others say nothing about
    where the curve bent, and a flat run would pull the fitted rise down and the bend left)."""
    if len(ys) < 2 or min(ys) <= 0 or max(ys) < CEILING_EXPLOSION * min(ys):
        return xs, ys
    floor = (1.0 - CEILING_BAND) * max(ys)
    first = len(ys)
    while first > 0 and ys[first - 1] >= floor:
        first -= 1
    return xs[: first + 1], ys[: first + 1]


def _rise(fit: SegmentFit) -> tuple[float, float]:
    """(relative rise from the knee to the end, relative rise of the end above the trend), in the fit's space."""
    if fit.space == "log":
        return math.expm1(fit.at_end - fit.at_break), math.expm1(fit.at_end - fit.trend_at_end)
    base = max(fit.at_break, MIN_LATENCY_S)
    return fit.at_end / base - 1.0, (fit.at_end - fit.trend_at_end) / base


def _bends(fit: SegmentFit, min_confidence: float, min_rise: float) -> bool:
    """Whether `fit` is a knee: an upward bend that explains enough, rises enough and stands out of the noise."""
    if fit.right_slope <= fit.left_slope or fit.confidence < min_confidence:
        return False
    from_knee, over_trend = _rise(fit)
    if min(from_knee, over_trend) < min_rise:
        return False
    sigma = fit.sigma
    if sigma is None:
        return True
    # the rise in the fit's own residual units: ln for log, relative for relative
    rise = fit.at_end - fit.at_break if fit.space == "log" else from_knee
    return rise >= MIN_RISE_SIGMAS * sigma


def find_knee(
    load: Sequence[float | None],
    latency: Sequence[float | None],
    *,
    space: Space = "auto",
    continuous: bool = True,
    min_confidence: float = MIN_CONFIDENCE,
    min_rise: float = MIN_RISE,
    min_points: int = MIN_POINTS,
) -> Knee | None:
    """The load where the latency curve bends upwards, or None (see the module docstring)."""
    xs, ys = clean_points(load, latency)
    xs, ys = cut_ceiling(xs, ys)
    if len(xs) < max(MIN_POINTS, min_points):
        return None
    knees = [f for f in _fits(xs, ys, space, continuous) if _bends(f, min_confidence, min_rise)]
    if not knees:
        return None
    fit = min(knees, key=lambda f: _log_sse(f, xs, ys))
    return Knee(
        load=max(0.0, fit.breakpoint),
        latency_s=max(0.0, value_at(fit.breakpoint, xs, ys)),
        confidence=round(fit.confidence, 4),
    )


def throughput_plateau(
    load: Sequence[float | None], throughput: Sequence[float | None], tolerance: float = PLATEAU_TOLERANCE
) -> float | None:
    """The lowest load whose throughput is within `tolerance` of the maximum, when the test went past it."""
    xs, ys = clean_points(load, throughput)
    if len(xs) < 3 or max(ys) <= 0:
        return None
    top = max(ys)
    first = next(x for x, y in zip(xs, ys, strict=True) if y >= (1.0 - tolerance) * top)
    if xs[-1] < first * (1.0 + 2.0 * tolerance):
        return None  # still rising with the load at the end of the test
    return first


def _log_slopes(lx: list[float], ly: list[float]) -> list[float]:
    """Least-squares slope through each point and its neighbours (one-sided at the ends)."""
    n = len(lx)
    out = []
    for i in range(n):
        lo, hi = max(0, i - 1), min(n, i + 2)
        if hi - lo < 3:  # an end: the point and its two nearest
            lo, hi = (0, min(n, 3)) if i == 0 else (max(0, n - 3), n)
        px, py = lx[lo:hi], ly[lo:hi]
        mx, my = sum(px) / len(px), sum(py) / len(py)
        var = sum((a - mx) ** 2 for a in px)
        out.append(sum((a - mx) * (b - my) for a, b in zip(px, py, strict=True)) / var if var > 0 else 0.0)
    return out


def tpot_outpaces_throughput(
    load: Sequence[float | None],
    tpot: Sequence[float | None],
    throughput: Sequence[float | None],
    plateau: float | None = None,
) -> float | None:
    """The load where TPOT's growth first exceeds throughput's (elasticities in log-log space), or None. With
    `plateau` (where throughput stops rising): only crossings up to it count, and without one the answer is the
    plateau itself (throughput's growth is ~0 from there on, so TPOT's outpaces it there at the latest; past
    it both are ~0 and a "crossing" would be noise)."""
    rows: dict[float, tuple[float, float]] = {}
    for x, t, q in zip(load, tpot, throughput, strict=True):
        if None in (x, t, q) or not all(math.isfinite(v) and v > 0 for v in (x, t, q)):  # type: ignore[arg-type]
            continue
        rows.setdefault(float(x), (float(t), float(q)))  # type: ignore[arg-type]
    xs = sorted(rows)
    if len(xs) < 3:
        return plateau
    lx = [math.log(x) for x in xs]
    e_tpot = _log_slopes(lx, [math.log(rows[x][0]) for x in xs])
    e_thr = _log_slopes(lx, [math.log(rows[x][1]) for x in xs])
    diff = [a - b for a, b in zip(e_tpot, e_thr, strict=True)]
    for i, d in enumerate(diff):
        if plateau is not None and xs[i] > plateau:
            break
        if d > 0 and (i + 1 == len(diff) or diff[i + 1] > 0):
            if i == 0:
                return xs[0]
            d0 = diff[i - 1]
            return xs[i - 1] + (xs[i] - xs[i - 1]) * (-d0) / (d - d0) if d0 <= 0 else xs[i]
    return plateau
