"""One hop of a network path, as mtr and the built-in tracer (:mod:`tailhound.agents.collectors.traceroute`)
both report it; :mod:`tailhound.agents.collectors.hops` turns hops into samples."""

from __future__ import annotations

from dataclasses import dataclass

#: the address of a hop that never answered (mtr's spelling)
UNKNOWN_HOST = "???"


@dataclass(frozen=True)
class Hop:
    """One hop of an mtr report; times in seconds, loss as a ratio."""

    number: int
    address: str
    loss_ratio: float
    sent: int
    last_s: float
    avg_s: float
    best_s: float
    worst_s: float
    stdev_s: float

    @property
    def answered(self) -> bool:
        return self.address != UNKNOWN_HOST and self.loss_ratio < 1.0
