"""The "realistic" noise profile: what a real fleet adds on top of the basic profile's smooth curves.

- fleet-wide traffic swings (the same users reach every node): a slow log-normal wander (6 %, minutes)
  and, about twice an hour, a burst of +8..22 % for 1-3 minutes (a client's batch job, a retry wave);
- per node: a slow wander of its share of the traffic (4 %) and of the request mix (prompt lengths
  +-12 %, capped to 0.75..1.35 of the usual), and of the inlet temperature (+-1 C: HVAC cycles);
- network blips: a tick with a few times the usual TCP retransmits (still far below 0.5 %), a probe
  whose first SYN was lost (+1 s connect, one probe in 250), a probe answered 10-60 ms late (1 in 50);
- missed scrapes: the engine's or dcgm-exporter's endpoint times out for one collection (1 in 500 / 1000).

Every draw comes from streams of its own (seeded by the fleet seed and node), so turning the profile on
changes nothing in what the other models draw, and the basic profile draws nothing here at all.
"""

from __future__ import annotations

import math
import random

from .faults import NodeEffects

FLEET_SWING_SIGMA, FLEET_SWING_TAU_S = 0.06, 300.0
BURST_EVERY_S = 1800.0
BURST_AMPLITUDE = (1.08, 1.22)
BURST_DURATION_S = (60.0, 180.0)
SHARE_SIGMA, SHARE_TAU_S = 0.04, 600.0
MIX_SIGMA, MIX_TAU_S, MIX_RANGE = 0.12, 600.0, (0.75, 1.35)
INLET_SIGMA_C, INLET_TAU_S = 1.0, 900.0
RETRANS_BLIP_P, RETRANS_BLIP_RATIO = 0.02, (0.0008, 0.003)
PROBE_SYN_RETRY_P = 0.004
PROBE_SLOW_P, PROBE_SLOW_S = 0.02, (0.01, 0.06)
MISSED_SCRAPE_P = {"engine": 0.002, "dcgm": 0.001}


class _Wander:
    """A stationary AR(1) process with standard deviation `sigma` and time constant `tau_s`."""

    def __init__(self, rng: random.Random, sigma: float, tau_s: float) -> None:
        self._rng = rng
        self.sigma = sigma
        self.tau_s = tau_s
        self.value = rng.gauss(0.0, sigma)

    def step(self, dt: float) -> float:
        phi = math.exp(-dt / self.tau_s)
        self.value = phi * self.value + self._rng.gauss(0.0, self.sigma * math.sqrt(1.0 - phi * phi))
        return self.value


class FleetNoise:
    """Traffic swings shared by every node of the fleet."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._swing = _Wander(rng, FLEET_SWING_SIGMA, FLEET_SWING_TAU_S)
        self._burst_left_s = 0.0
        self._burst = 1.0

    def step(self, dt: float) -> float:
        """The fleet's traffic multiplier for the next tick."""
        rng = self._rng
        level = math.exp(self._swing.step(dt))
        if self._burst_left_s <= 0.0 and rng.random() < dt / BURST_EVERY_S:
            self._burst = rng.uniform(*BURST_AMPLITUDE)
            self._burst_left_s = rng.uniform(*BURST_DURATION_S)
        if self._burst_left_s > 0.0:
            self._burst_left_s -= dt
            return level * self._burst
        return level


class NodeNoise:
    """One node's own wander and blips."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._share = _Wander(rng, SHARE_SIGMA, SHARE_TAU_S)
        self._mix = _Wander(rng, MIX_SIGMA, MIX_TAU_S)
        self._inlet = _Wander(rng, INLET_SIGMA_C, INLET_TAU_S)

    def apply(self, eff: NodeEffects, dt: float, fleet_scale: float, engine_source: str) -> None:
        """Fold this tick's noise into the node's effects."""
        rng = self._rng
        eff.arrival_scale *= fleet_scale * math.exp(self._share.step(dt))
        lo, hi = MIX_RANGE
        eff.prompt_scale *= min(hi, max(lo, math.exp(self._mix.step(dt))))
        eff.inlet_offset_c += self._inlet.step(dt)
        if rng.random() < RETRANS_BLIP_P:
            eff.retrans_blip += rng.uniform(*RETRANS_BLIP_RATIO)
        if rng.random() < PROBE_SYN_RETRY_P:
            eff.probe_syn_retry = True
        if rng.random() < PROBE_SLOW_P:
            eff.probe_extra_s += rng.uniform(*PROBE_SLOW_S)
        missed = set(eff.missed_scrapes)
        for source, p in MISSED_SCRAPE_P.items():
            if rng.random() < p:
                missed.add(engine_source if source == "engine" else source)
        eff.missed_scrapes = frozenset(missed)
