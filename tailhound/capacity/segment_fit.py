"""Two-segment fits of latency against load: the "segmented regression" one would draw by hand on the plot.

Continuous by default: a hinge ``latency = a + b load + c max(0, load - k)``, one weighted linear least-squares
fit per candidate breakpoint ``k``, scanned coarse (a quarter of each gap between measured loads) then fine
around the best; ``continuous=False`` fits two independent lines and bends where they cross. Errors are
relative, in one of two spaces: ``log`` (the hinge on ln(latency): exact for exponential growth past the knee)
or ``relative`` (seconds weighted by 1 / latency^2: exact for a queue's linear growth); ``auto`` keeps the one
closer to the points in log space. How close they land on synthetic curves: tests/capacity/test_knees.py.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tailhound.errors import TailhoundError

if TYPE_CHECKING:
    import numpy as np

Space = Literal["auto", "log", "relative"]
SPACES: tuple[str, ...] = ("auto", "log", "relative")

#: fewer distinct loads than this: no knee (two segments need two points each)
MIN_POINTS = 4
#: candidate breakpoints: per gap between measured loads (coarse), then around the best (fine)
COARSE_GRID = 4
FINE_GRID = 16
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


def candidate_fits(xs: Sequence[float], ys: Sequence[float], space: Space, continuous: bool) -> list[SegmentFit]:
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
    fits = candidate_fits(xs, ys, space, continuous)
    return min(fits, key=lambda f: log_sse(f, xs, ys)) if fits else None


def log_sse(fit: SegmentFit, xs: Sequence[float], ys: Sequence[float]) -> float:
    """Sum of squared ln(measured / fitted): the one yardstick for fits made in either space."""
    total = 0.0
    for x, y in zip(xs, ys, strict=True):
        slope = fit.left_slope if x <= fit.breakpoint else fit.right_slope
        f = fit.at_break + slope * (x - fit.breakpoint)
        if fit.space != "log":
            f = math.log(max(f, MIN_LATENCY_S))
        total += (math.log(max(y, MIN_LATENCY_S)) - f) ** 2
    return total
