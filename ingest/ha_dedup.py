"""One replica of each HA pair: two Prometheus servers that scrape the same targets both remote-write them.

An HA pair differs only in an external label (``replica: a`` / ``replica: b``; ``__replica__`` in Cortex and
Mimir). Taking both would file every scrape twice, a few seconds apart, with the same counters: twice the
snapshots, and half of them late. :class:`HaTracker` does what Cortex's HA tracker does: per cluster (the
:attr:`HaConfig.cluster_label` value, one cluster when the series have none) it accepts the replica that
sent first and drops the others' series, until the accepted one has sent nothing for
:attr:`HaConfig.failover_s`; the next replica that sends is accepted then. The replica label is taken off
the accepted series, so a fail-over continues the same sources (the builder's deltas go on).

Bounded: at most :attr:`HaConfig.max_clusters` clusters are tracked (the least recently seen is forgotten).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

from tailhound.durations import Duration
from tailhound.ingest.remote_write import Series

log = logging.getLogger("tailhound.ingest")


class HaConfig(BaseModel):
    """How HA pairs are told apart (``external_labels`` of each Prometheus)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    replica_label: str = Field(
        default="replica",
        pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$",
        description="The external label naming the replica (dropped from the series).",
    )
    cluster_label: str = Field(
        default="cluster", pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$", description="The external label naming the pair (kept)."
    )
    failover_s: Duration = Field(
        default=30.0, gt=0, le=3600, description="Accept another replica when the accepted one sent nothing this long."
    )
    max_clusters: int = Field(default=10_000, ge=1)


class _Elected:
    __slots__ = ("replica", "seen")

    def __init__(self, replica: str, seen: float) -> None:
        self.replica, self.seen = replica, seen


class HaTracker:
    """Per cluster, the replica whose series are accepted. ``stats``: ``ha_dropped_series``, ``ha_failovers``."""

    def __init__(self, config: HaConfig) -> None:
        self.config = config
        self._elected: OrderedDict[str, _Elected] = OrderedDict()
        self.stats: dict[str, int] = {}

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def elected(self, cluster: str = "") -> str | None:
        e = self._elected.get(cluster)
        return None if e is None else e.replica

    def _accepts(self, cluster: str, replica: str, now: float) -> bool:
        e = self._elected.get(cluster)
        if e is None:
            self._elected[cluster] = _Elected(replica, now)
            while len(self._elected) > self.config.max_clusters:
                self._elected.popitem(last=False)
            log.info("HA pair %r: accepting replica %r", cluster or "(no cluster label)", replica)
            return True
        self._elected.move_to_end(cluster)
        if e.replica == replica:
            e.seen = now
            return True
        if now - e.seen >= self.config.failover_s:
            log.warning(
                "HA pair %r: replica %r sent nothing for %.0f s; accepting %r",
                cluster or "(no cluster label)",
                e.replica,
                now - e.seen,
                replica,
            )
            self._count("ha_failovers")
            e.replica, e.seen = replica, now
            return True
        return False

    def filter(self, series: Iterable[Series], now: float) -> list[Series]:
        """The series of accepted replicas, without the replica label; series without it pass unchanged."""
        cfg = self.config
        out: list[Series] = []
        decided: dict[tuple[str, str], bool] = {}
        dropped = 0
        for s in series:
            replica = cluster = None
            for k, v in s.labels:
                if k == cfg.replica_label:
                    replica = v
                elif k == cfg.cluster_label:
                    cluster = v
            if replica is None:
                out.append(s)
                continue
            key = (cluster or "", replica)
            ok = decided.get(key)
            if ok is None:
                ok = decided[key] = self._accepts(key[0], replica, now)
            if not ok:
                dropped += 1
                continue
            out.append(s._replace(labels=tuple(kv for kv in s.labels if kv[0] != cfg.replica_label)))
        if dropped:
            self._count("ha_dropped_series", dropped)
        return out
