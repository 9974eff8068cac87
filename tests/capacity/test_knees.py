"""Knee detection on synthetic latency curves with a known bend, plateau and TPOT-vs-throughput crossing.

Tolerance: the knee is found within 10 % of the true bend load (15 load steps from 0 to 1.5x the knee,
5 % multiplicative noise, 20 seeds per curve).
"""

from __future__ import annotations

import math
import random

import pytest

from tailhound.capacity.knees import (
    clean_points,
    cut_ceiling,
    find_knee,
    throughput_plateau,
    tpot_outpaces_throughput,
    value_at,
)
from tailhound.capacity.segment_fit import fit_two_segments

TOLERANCE = 0.10
SEEDS = range(20)
STEPS = 15


def hinge(x: float, k: float) -> float:  # flat, then +0.4 s per request/s
    return 0.3 + max(0.0, x - k) * 0.4


def queue(x: float, k: float) -> float:  # a load test's step: the P95 grows with the excess load
    return 0.3 + 0.02 * x + max(0.0, x - k) * 60.0 / k


def explode(x: float, k: float) -> float:  # exponential past the knee: 0.3 s -> ~40 s
    return 0.3 * math.exp(0.8 * max(0.0, x - k))


def gentle(x: float, k: float) -> float:  # +50 % by the end: a small bend
    return 0.3 + max(0.0, x - k) * 0.05


def curve(shape, knee: float, seed: int, noise: float = 0.05, steps: int = STEPS, top: float = 1.5):
    rng = random.Random(seed)
    loads = [knee * top * (i + 1) / steps for i in range(steps)]
    return loads, [shape(x, knee) * math.exp(rng.gauss(0.0, noise)) for x in loads]


@pytest.mark.parametrize("shape", [hinge, queue, explode, gentle])
def test_a_known_knee_is_found_within_tolerance(shape):
    errors = []
    for seed in SEEDS:
        knee = random.Random(1000 + seed).uniform(8.0, 16.0)  # not on a step
        loads, lat = curve(shape, knee, seed)
        found = find_knee(loads, lat)
        assert found is not None, (shape.__name__, seed)
        errors.append(abs(found.load - knee) / knee)
        assert 0.5 <= found.confidence <= 1.0
        # the latency reported is the measured curve at the knee, near the pre-knee level
        assert found.latency_s == pytest.approx(value_at(found.load, loads, lat))
    assert max(errors) <= TOLERANCE, (shape.__name__, [round(e, 3) for e in errors])


def test_noisier_curves_still_within_tolerance():
    for seed in SEEDS:
        loads, lat = curve(queue, 12.0, seed, noise=0.10)
        found = find_knee(loads, lat)
        assert found is not None and abs(found.load - 12.0) / 12.0 <= TOLERANCE, seed


def test_an_explosion_after_the_knee_does_not_drag_it_right():
    """Latency from 0.3 s to minutes past the knee: a fit on seconds would follow the last points."""
    loads, lat = curve(explode, 10.0, 7)
    assert max(lat) / min(lat) > 50
    assert abs(find_knee(loads, lat).load - 10.0) <= 0.5
    assert abs(find_knee(loads, lat, space="log").load - 10.0) <= 0.5


def test_a_ceiling_after_the_explosion_is_cut():
    """Client timeouts: the latency explodes, then sits at 600 s; only the first ceiling point is kept."""
    loads = [float(x) for x in range(1, 21)]
    lat = [0.4 if x <= 12 else min(600.0, 0.4 * 8 ** (x - 12)) for x in loads]
    xs, ys = cut_ceiling(loads, lat)
    assert ys[-1] == 600.0 and ys.count(600.0) == 1 and len(xs) == 16
    found = find_knee(loads, lat)
    assert found is not None and abs(found.load - 12.0) <= 0.6
    # no explosion (TPOT rising then flat at the batch cap): nothing cut
    tpot = [0.03 + 0.002 * min(x, 14) for x in loads]
    assert cut_ceiling(loads, tpot) == (loads, tpot)


@pytest.mark.parametrize("continuous", [True, False])
def test_the_discontinuous_fit_finds_the_bend_too(continuous):
    loads, lat = curve(queue, 11.3, 3)
    assert abs(find_knee(loads, lat, continuous=continuous).load - 11.3) / 11.3 <= TOLERANCE


def test_an_mm1_curve_bends_before_its_capacity():
    """A smooth 1 / (1 - load / capacity): no sharp bend; the knee lands where it turns up, below capacity."""
    capacity = 14.0
    for seed in SEEDS:
        rng = random.Random(seed)
        loads = [capacity * 0.95 * (i + 1) / STEPS for i in range(STEPS)]
        lat = [0.3 / (1.0 - x / capacity) * math.exp(rng.gauss(0.0, 0.05)) for x in loads]
        found = find_knee(loads, lat)
        assert found is not None and 0.6 * capacity <= found.load <= 0.95 * capacity, (seed, found)


@pytest.mark.parametrize(
    "name,fn",
    [
        ("flat", lambda x: 0.3),
        ("straight line", lambda x: 0.3 + 0.05 * x),
        ("line through ~0", lambda x: 0.01 + 0.05 * x),
        ("concave: rises, then flat at the batch cap", lambda x: 0.03 + 0.002 * min(x, 12.0)),
        ("falling", lambda x: 1.0 / (1.0 + x)),
    ],
)
def test_no_knee_without_an_upward_bend(name, fn):
    for seed in SEEDS:
        rng = random.Random(seed)
        loads = [18.0 * (i + 1) / STEPS for i in range(STEPS)]
        lat = [fn(x) * math.exp(rng.gauss(0.0, 0.05)) for x in loads]
        assert find_knee(loads, lat) is None, (name, seed)


def test_too_few_points():
    assert find_knee([1, 2, 3], [0.3, 0.3, 5.0]) is None
    assert find_knee([1, 2, 3, 3, None], [0.3, 0.3, 5.0, 6.0, 7.0]) is None  # 3 distinct loads
    assert find_knee([], []) is None
    assert fit_two_segments([1, 2, 3], [1, 1, 1]) is None
    # four points are enough for an obvious bend
    assert find_knee([1, 2, 3, 4], [0.3, 0.31, 3.0, 6.0]) is not None


def test_points_are_cleaned_sorted_and_averaged():
    xs, ys = clean_points([3, None, 1, 2, 1, float("nan")], [3.0, 1.0, 1.0, 2.0, 3.0, 1.0])
    assert xs == [1.0, 2.0, 3.0] and ys == [2.0, 2.0, 3.0]
    assert value_at(1.5, [1, 2], [10, 20]) == 15 and value_at(0, [1, 2], [10, 20]) == 10
    assert value_at(9, [1, 2], [10, 20]) == 20


def test_bad_space():
    with pytest.raises(ValueError, match="space"):
        fit_two_segments([1, 2, 3, 4], [1, 1, 2, 3], space="seconds")  # type: ignore[arg-type]


def test_throughput_plateau():
    loads = [2.0 * i for i in range(1, 11)]  # 2 .. 20 requests/s offered
    thr = [min(x, 12.0) * (1.0 + 0.01 * ((i % 3) - 1)) for i, x in enumerate(loads)]
    assert throughput_plateau(loads, thr) == 12.0  # the first load within 5 % of the max
    # still proportional at the end of the test: no plateau
    assert throughput_plateau(loads, loads) is None
    assert throughput_plateau([1, 2], [1, 2]) is None
    assert throughput_plateau([1, 2, 3], [0, 0, 0]) is None


def test_tpot_outpaces_throughput_in_concurrency_mode():
    """Concurrency N, TPOT = 20 ms + 0.1 ms x N, throughput = N / (0.1 + 300 x TPOT): d ln TPOT / d ln N =
    0.1 N / (20 + 0.1 N) and d ln thr / d ln N ~ 1 - that, so they cross at N = 200."""
    n = [16.0 * i for i in range(1, 21)]
    tpot = [0.02 + 0.0001 * x for x in n]
    thr = [x / (0.1 + 300 * t) for x, t in zip(n, tpot, strict=True)]
    at = tpot_outpaces_throughput(n, tpot, thr)
    assert at is not None and abs(at - 200.0) / 200.0 <= 0.05


def test_tpot_outpaces_throughput_never_when_tpot_stays_flat():
    n = [10.0 * i for i in range(1, 11)]
    assert tpot_outpaces_throughput(n, [0.03] * 10, [x / 10 for x in n]) is None
    assert tpot_outpaces_throughput([1, 2], [0.1, 0.2], [1, 1]) is None
    # points without a value are skipped
    assert tpot_outpaces_throughput([1, 2, None, 4], [0.1, None, 0.1, 0.1], [1, 2, 3, 4]) is None


def test_tpot_outpaces_throughput_at_the_plateau_at_the_latest():
    """Past the plateau throughput and TPOT are both flat: a noisy "crossing" there does not count, and
    without a crossing before it the plateau is where TPOT's growth outpaces throughput's."""
    rate = [float(x) for x in range(1, 16)]
    thr = [min(x, 10.0) for x in rate]
    tpot = [0.03 * (1.02 if i % 2 else 1.0) if x > 10 else 0.03 for i, x in enumerate(rate)]
    assert tpot_outpaces_throughput(rate, tpot, thr) is not None  # noise past the plateau
    assert tpot_outpaces_throughput(rate, tpot, thr, plateau=10.0) == 10.0
    assert tpot_outpaces_throughput([1, 2], [0.1, 0.1], [1, 2], plateau=2.0) == 2.0
    # a crossing before the plateau still wins
    n = [16.0 * i for i in range(1, 21)]
    tp = [0.02 + 0.0001 * x for x in n]
    q = [x / (0.1 + 300 * t) for x, t in zip(n, tp, strict=True)]
    assert abs(tpot_outpaces_throughput(n, tp, q, plateau=300.0) - 200.0) <= 10.0
