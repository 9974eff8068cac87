"""Where latency bends, where throughput stops rising, where TPOT outgrows throughput (pure; numpy).

Knee (:func:`find_knee`): the best two-segment fit (:mod:`.segment_fit`) of latency against load, kept when it
bends upwards, explains enough (``confidence = 1 - SSE_two / SSE_one``, at least ``min_confidence``) and rises
enough by the highest load (``min_rise`` above both the knee value and the pre-knee trend, and
:data:`MIN_RISE_SIGMAS` residual deviations); its latency is the measured one interpolated at the knee. A
latency that exploded and then sits at a ceiling keeps only the first point of that tail (:func:`cut_ceiling`).

Throughput plateau (:func:`throughput_plateau`): the lowest load within ``tolerance`` of the highest throughput,
when the test went on past it. TPOT outpaces throughput (:func:`tpot_outpaces_throughput`): the first load,
up to the plateau, where ``d ln(TPOT) / d ln(load)`` exceeds ``d ln(throughput) / d ln(load)`` (each a
three-point log-log slope): past it a larger batch costs more latency than it gains throughput.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tailhound.capacity.model import Knee
from tailhound.capacity.segment_fit import MIN_LATENCY_S, MIN_POINTS, SegmentFit, Space, candidate_fits, log_sse

#: two segments must explain at least this share of the one-line residual (1 - SSE_two / SSE_one)
MIN_CONFIDENCE = 0.5
#: by the highest load the latency stands at least this much (relative) above its knee value and the trend
MIN_RISE = 0.25
#: ... and that rise is at least this many residual standard deviations (when the fit has residual freedom)
MIN_RISE_SIGMAS = 3.0
#: a latency ceiling: the highest latency at least this many times the lowest, the tail within this band of it
CEILING_EXPLOSION = 10.0
CEILING_BAND = 0.1
#: throughput within this share of its maximum counts as the plateau
PLATEAU_TOLERANCE = 0.05


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
    knees = [f for f in candidate_fits(xs, ys, space, continuous) if _bends(f, min_confidence, min_rise)]
    if not knees:
        return None
    fit = min(knees, key=lambda f: log_sse(f, xs, ys))
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
