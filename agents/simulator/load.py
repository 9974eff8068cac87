"""Offered load: a daily request-rate curve per node, plus seeded noise and Poisson arrivals."""

from __future__ import annotations

import math
import random
import time

#: Request rate of one node at the daily peak (requests/s). One 8xH100 TP8 70B engine serves about
#: 12 requests/s of the simulated mix at saturation, so the healthy fleet runs at 45-85 % of capacity.
PEAK_RATE_RPS = 10.0
#: Trough of the daily curve as a fraction of the peak.
TROUGH_FRACTION = 0.45
#: Hour of day (UTC) of the daily peak (US working hours); 00:00 UTC is at ~86 % of the peak.
PEAK_HOUR_UTC = 20.0
#: Relative per-tick noise of the rate.
RATE_NOISE = 0.03


def daily_factor(ts: float) -> float:
    """Fraction of the peak rate at unix time `ts` (a cosine over 24 h, trough 12 h after the peak)."""
    tm = time.gmtime(ts)
    hour = tm.tm_hour + tm.tm_min / 60.0 + (ts % 60.0) / 3600.0
    phase = 2.0 * math.pi * (hour - PEAK_HOUR_UTC) / 24.0
    return TROUGH_FRACTION + (1.0 - TROUGH_FRACTION) * 0.5 * (1.0 + math.cos(phase))


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw; exact (Knuth) for small means, a rounded normal approximation above 40."""
    if mean <= 0.0:
        return 0
    if mean > 40.0:
        return max(0, int(round(rng.gauss(mean, math.sqrt(mean)))))
    limit = math.exp(-mean)
    k, p = 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


class LoadModel:
    """Arrival process of one node: daily curve x a fixed per-node share x slow-moving noise."""

    def __init__(self, rng: random.Random, peak_rps: float = PEAK_RATE_RPS) -> None:
        self._rng = rng
        self.node_share = rng.uniform(0.92, 1.08)
        self.peak_rps = peak_rps
        self._drift = 0.0

    def rate(self, ts: float, scale: float = 1.0) -> float:
        """Mean arrival rate (requests/s) at `ts`; `scale` multiplies it (traffic surges)."""
        # A mean-reverting random walk gives minutes-long wiggles on top of the daily curve.
        self._drift = 0.8 * self._drift + self._rng.gauss(0.0, RATE_NOISE)
        noise = max(0.5, 1.0 + self._drift)
        return self.peak_rps * self.node_share * daily_factor(ts) * noise * scale

    def arrivals(self, ts: float, interval_s: float, scale: float = 1.0) -> tuple[float, int]:
        """``(rate, number of requests that arrived during the interval ending at ts)``."""
        r = self.rate(ts, scale)
        return r, poisson(self._rng, r * interval_s)
