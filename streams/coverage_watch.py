"""The worker's rule coverage: which rules cannot fire with what the fleet sends, logged and exported.

A worker starts before any telemetry, so it learns which catalog signals arrive from the snapshots it
evaluates (each node's source, and instance, is looked at once per :data:`RESCAN_S` of event time, so
most snapshots cost one dict lookup). Once :data:`WINDOW_S` of event time has passed since the first
snapshot it judges every rule (:mod:`tailhound.streams.coverage`) and logs each blind rule at WARNING
with what it waits for and the fix (partial rules at INFO), then again whenever coverage changes (a
rule that can fire now: INFO). Its gauges live in a registry of their own (``registry``), for the
worker's metrics endpoint:

- ``tailhound_rule_blind{rule,severity}``: 1 while the rule cannot fire, 0 when it can;
- ``tailhound_rule_partial{rule,severity}``: 1 while some branch of the rule cannot hold;
- ``tailhound_signals_present``: catalog signals seen in telemetry.

No series exist before the first judgement (coverage is unknown until telemetry has arrived).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, Gauge

from tailhound.catalog import Catalog, default_catalog
from tailhound.snapshot import Snapshot

from .coverage import RuleCoverage, coverage, problem_lines, summary
from .evaluator import source_key
from .ruleset.rulefile import RuleSet

log = logging.getLogger(__name__)

#: Event time from the first snapshot to the first judgement: every source has reported by then.
WINDOW_S = 300.0
#: A node's source is looked at again after this much event time (a new metric shows up within it).
RESCAN_S = 60.0
#: Bound on the (node, source) pairs remembered; beyond it they are forgotten and looked at again.
MAX_SOURCES = 65536

#: (level, message) as the watch logs them
LogRecord = tuple[int, str]


class CoverageWatch:
    def __init__(
        self,
        rules: RuleSet,
        catalog: Catalog | None = None,
        window_s: float = WINDOW_S,
        rescan_s: float = RESCAN_S,
        registry: CollectorRegistry | None = None,
        emit: Callable[[int, str], None] | None = None,
        configured: Iterable[str] = (),
    ) -> None:
        self.rules = rules
        self.catalog = catalog or default_catalog()
        self.window_s, self.rescan_s = window_s, rescan_s
        self.registry = registry if registry is not None else CollectorRegistry()
        self._emit = emit or log.log
        self._blind = Gauge(
            "tailhound_rule_blind",
            "1 while the rule cannot fire with the signals the fleet sends (see tailhound doctor), 0 when it can.",
            ["rule", "severity"],
            registry=self.registry,
        )
        self._partial = Gauge(
            "tailhound_rule_partial",
            "1 while some branch of the rule cannot hold with the signals the fleet sends.",
            ["rule", "severity"],
            registry=self.registry,
        )
        self._present_count = Gauge(
            "tailhound_signals_present", "Catalog signals seen in telemetry.", registry=self.registry
        )
        #: signals seen, and the sources that sent them (they order the fixes)
        self.present: set[str] = set(configured)  # and what the configuration gives (the capacity file)
        self.sources: set[str] = set()
        self.report: list[RuleCoverage] | None = None
        self._mapped: set[tuple[str, str]] = set()  # (source, metric) pairs seen that the catalog maps
        self._scanned: dict[tuple[str, str], float] = {}
        self._start: float | None = None
        self._changed = False
        self._failed = False

    def observe(self, snapshot: Snapshot) -> list[LogRecord]:
        """Note what `snapshot` carries; returns (and logs) what is due now. Never raises: coverage is
        advice, a bug in it must not stop evaluation."""
        try:
            records = self._observe(snapshot)
        except Exception:
            if not self._failed:
                self._failed = True
                log.exception("rule coverage failed; it is not reported from now on")
            return []
        for level, message in records:
            self._emit(level, message)
        return records

    def _observe(self, snapshot: Snapshot) -> list[LogRecord]:
        if self._failed:
            return []
        ts = snapshot.ts
        if self._start is None:
            self._start = ts
        key = (snapshot.node, source_key(snapshot))
        last = self._scanned.get(key)
        if last is None or abs(ts - last) >= self.rescan_s:
            if last is None and len(self._scanned) >= MAX_SOURCES:
                self._scanned.clear()
            self._scanned[key] = ts
            self._scan(snapshot)
        if ts - self._start < self.window_s or (self.report is not None and not self._changed):
            return []
        return self._judge(ts - self._start)

    def _scan(self, snapshot: Snapshot) -> None:
        source, mapped, by_metric = snapshot.source, self._mapped, self.catalog.by_metric
        for sample in snapshot.samples:
            key = (source, sample.name)
            if key in mapped:
                continue
            specs = by_metric.get(key)
            if not specs:
                continue  # only mapped metrics are remembered: memory stays bounded by the catalog
            mapped.add(key)
            self.sources.add(source)
            for spec, _ in specs:
                if spec.name not in self.present:
                    self.present.add(spec.name)
                    self._changed = True

    def _judge(self, elapsed: float) -> list[LogRecord]:
        report = coverage(self.rules, self.present, self.catalog, self.sources)
        before = {c.rule: c.status for c in self.report} if self.report is not None else None
        self.report, self._changed = report, False
        self._present_count.set(len(self.present))
        out: list[LogRecord] = []
        for c in report:
            self._blind.labels(c.rule, c.severity).set(1 if c.status == "blind" else 0)
            self._partial.labels(c.rule, c.severity).set(1 if c.status == "partial" else 0)
            was = before.get(c.rule) if before is not None else None
            if before is not None and was == c.status:
                continue
            if c.status == "blind":
                out.append(
                    (
                        logging.WARNING,
                        f"rule {c.rule} ({c.severity}) cannot fire with the signals received: "
                        + "; ".join(problem_lines(c, with_rule=False)),
                    )
                )
            elif c.status == "partial" and was is None:
                out.append(
                    (
                        logging.INFO,
                        f"rule {c.rule} ({c.severity}) can fire, but not every branch: "
                        + "; ".join(problem_lines(c, with_rule=False)),
                    )
                )
            elif was == "blind":
                out.append((logging.INFO, f"rule {c.rule} ({c.severity}) can fire now ({c.status})"))
        if before is None or out:
            out.append(
                (
                    logging.INFO,
                    f"rule coverage after {elapsed:.0f} s of telemetry: {summary(report)} "
                    f"({len(self.present)} signals from {', '.join(sorted(self.sources)) or 'no source'})",
                )
            )
        return out
