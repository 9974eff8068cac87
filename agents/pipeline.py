"""Scrape records -> snapshots: the one path live collection and replayed recordings share.

``SnapshotBuilder.build(record)`` parses the record's exposition text, applies the source's quirks
(dcgm-exporter's NOT_SUPPORTED sentinels are dropped, node_exporter's untyped counters become
counters, kinds follow the catalog), and turns cumulative counters and histograms into per-interval
deltas:

- a counter that went down was reset (the engine restarted): its delta is the new value, never a
  negative or huge number, and the sample is flagged ``reset``;
- a histogram whose count or any bucket went down was reset the same way; one whose bucket bounds
  changed starts over (no delta);
- a series seen for the first time has no delta;
- the snapshot says which interval the deltas cover (``prev_ts``) and whether collections were
  missed or failed in between (``gap``); a failed collection becomes a snapshot with ``error`` and
  no samples.

State is kept per (node, job, record labels): one entry per live series, dropped when the series
disappears, so memory follows what the targets export.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agents.exposition import ExpositionError, parse_exposition, to_samples
from tailhound.catalog import Catalog, default_catalog
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot

log = logging.getLogger("tailhound.agent.pipeline")

#: A collection is late (a gap) when it comes more than this many intervals after the previous one.
GAP_FACTOR = 1.5

SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def is_dcgm_blank(v: float) -> bool:
    """dcgm-exporter prints DCGM's blank / NOT_SUPPORTED sentinels as values: int64 ~9.22e18,
    int32 0x7ffffff0..0x7fffffff, fp64 2**47 (+ small offsets for the different reasons)."""
    return v >= 9.2e18 or 0x7FFFFFF0 <= v <= 0x7FFFFFFF or 140737488355328.0 <= v <= 140737488355344.0


_DROP = {"dcgm": is_dcgm_blank}


@dataclass
class _SourceState:
    prev_ts: float | None = None
    failed: bool = False
    counters: dict[SeriesKey, float] = field(default_factory=dict)
    histograms: dict[SeriesKey, HistogramSample] = field(default_factory=dict)


def _series_key(name: str, labels: dict[str, str]) -> SeriesKey:
    return name, tuple(sorted(labels.items()))


class SnapshotBuilder:
    def __init__(self, catalog: Catalog | None = None) -> None:
        self.catalog = catalog or default_catalog()
        self._sources: dict[tuple[str, str, tuple[tuple[str, str], ...]], _SourceState] = {}
        self._counter_names: dict[str, frozenset[str]] = {}
        self._gauge_names: dict[str, frozenset[str]] = {}
        self.parse_errors = 0

    def _kinds(self, job: str) -> tuple[frozenset[str], frozenset[str]]:
        if job not in self._counter_names:
            metrics = [m for (src, m) in self.catalog.by_metric if src == job]
            self._counter_names[job] = frozenset(m for m in metrics if self.catalog.kind_of(job, m) == "counter")
            self._gauge_names[job] = frozenset(m for m in metrics if self.catalog.kind_of(job, m) == "gauge")
        return self._counter_names[job], self._gauge_names[job]

    def build(self, rec: ScrapeRecord) -> Snapshot:
        key = (rec.node, rec.job, tuple(sorted(rec.labels.items())))
        st = self._sources.setdefault(key, _SourceState())
        common = dict(node=rec.node, source=rec.job, ts=rec.ts, labels=rec.labels, interval_s=rec.interval_s)
        if rec.error is not None:
            st.failed = True
            return Snapshot(**common, prev_ts=st.prev_ts, gap=True, error=rec.error[:500])
        counters, gauges = self._kinds(rec.job)
        errors: list[str] = []
        try:
            raw = to_samples(parse_exposition(rec.body), drop=_DROP.get(rec.job), counters=counters, errors=errors)
        except ExpositionError as exc:
            self.parse_errors += 1
            st.failed = True
            return Snapshot(**common, prev_ts=st.prev_ts, gap=True, error=f"unparsable exposition: {exc}")
        for msg in errors:
            self.parse_errors += 1
            log.warning("%s/%s: sample skipped: %s", rec.node, rec.job, msg)
        samples = [self._with_delta(s, st, gauges) for s in raw]
        gap = st.failed or (
            st.prev_ts is not None and rec.interval_s is not None and rec.ts - st.prev_ts > GAP_FACTOR * rec.interval_s
        )
        snap = Snapshot(**common, samples=samples, prev_ts=st.prev_ts, gap=gap)
        live = {_series_key(s.name, s.labels) for s in raw if s.kind != "gauge"}
        st.counters = {k: v for k, v in st.counters.items() if k in live}
        st.histograms = {k: v for k, v in st.histograms.items() if k in live}
        st.prev_ts, st.failed = rec.ts, False
        return snap

    def _with_delta(self, s, st: _SourceState, gauges: frozenset[str]):
        if s.kind == "counter":
            if s.name in gauges:  # typed counter, but a rate (dcgm's PCIE_TX_BYTES)
                return GaugeSample.trusted(name=s.name, labels=s.labels, value=s.value)
            k = _series_key(s.name, s.labels)
            prev = st.counters.get(k)
            st.counters[k] = s.value
            if prev is None:
                return s
            reset = s.value < prev
            return CounterSample.trusted(name=s.name, labels=s.labels, value=s.value,
                                         delta=s.value if reset else s.value - prev, reset=reset)
        if s.kind == "histogram":
            k = _series_key(s.name, s.labels)
            prev = st.histograms.get(k)
            st.histograms[k] = s
            if prev is None or prev.le != s.le:
                return s
            reset = s.count < prev.count or any(c < p for c, p in zip(s.counts, prev.counts, strict=True))
            if reset:
                delta = HistogramDelta(counts=list(s.counts), count=s.count, sum=s.sum)
            else:
                delta = HistogramDelta(counts=[c - p for c, p in zip(s.counts, prev.counts, strict=True)],
                                       count=s.count - prev.count, sum=s.sum - prev.sum)
            return s.model_copy(update={"delta": delta, "reset": reset})
        return s

    def forget(self, node: str, job: str) -> None:
        """Drop the state of a source (its target was removed from the config)."""
        for key in [k for k in self._sources if k[0] == node and k[1] == job]:
            del self._sources[key]
