"""Windowed latency percentiles and token means per engine, model and fleet, from histogram deltas (pure).

:class:`LatencyTracker` feeds every histogram sample of a snapshot that the catalog maps to a
``latency.*`` or ``tokens.*`` histogram signal into a :class:`~tailhound.streams.latency_window.LatencyWindow` per
series (signal, node, engine) and derives, for the window ending at ``now`` (event time):

- ``<signal>.p50``, ``<signal>.p95``, ``<signal>.p99`` for ``latency.*`` signals (ttft, itl, tpot,
  e2e, queue, prefill, decode, inference), in the catalog's unit (s);
- ``<signal>.mean`` for ``tokens.*`` signals (prompt, generation): tokens per request;
- ``<signal>.window_count``: observations in the window, so a rule can require enough of them
  (a P99 of 3 requests is noise). It is reported (possibly 0) whenever the series had an interval
  in the window; percentiles and means only when it is above 0.

:meth:`LatencyTracker.percentiles` returns ``{scope: {signal: {entity: value}}}`` for three scopes:

- ``engine``: one series; the entity is ``<node>/<engine>`` because engine ids (vLLM's ``engine``
  label, else the scrape's ``instance``) repeat on every node. :meth:`LatencyTracker.engine_values`
  gives one node's engines with the bare catalog entity, the shape :func:`tailhound.streams.extract.extract`
  returns, for the per-node evaluator;
- ``model``: every engine serving a model, merged (:func:`tailhound.streams.histograms.merge`); the model is
  the sample's ``model_name`` label, else the snapshot's ``model_name``, else the snapshot's
  ``model`` label. Engines without any of these count in the fleet only;
- ``fleet``: every engine, entity ``""``.

Counter resets are already folded into the deltas by the agent; a snapshot flagged ``gap`` keeps its
interval (it covers a longer span) and marks it. Series whose newest interval is older than the
window (against the newest event time seen) are dropped, so state follows the live series.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from tailhound.catalog import Catalog, SignalSpec, default_catalog
from tailhound.snapshot import HistogramDelta, Snapshot

from .extract import SignalValues
from .histograms import Histogram, merge
from .latency_window import LatencyWindow

DEFAULT_WINDOW_S = 300.0
DEFAULT_MAX_INTERVALS = 64
#: Derived quantile signals of ``latency.*`` histograms: suffix -> q.
LATENCY_QUANTILES: dict[str, float] = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
TRACKED_PREFIXES = ("latency.", "tokens.")
SCOPES = ("engine", "model", "fleet")

SeriesKey = tuple[str, str, str]  # (signal, node, entity)


@dataclass(slots=True)
class TrackedSeries:
    """One histogram series and its window; `metric` is the source metric that feeds it."""

    metric: str
    model: str | None
    window: LatencyWindow


def derived_values(signal: str, h: Histogram) -> dict[str, float]:
    """The derived signals of one windowed histogram: window_count, then quantiles or the mean."""
    count_name, quantiles, mean_name = _derived_names(signal)
    out = {count_name: h.count}
    for name, q in quantiles:
        value = h.quantile(q)
        if value is not None:
            out[name] = value
    mean = h.mean()  # exact (sum/count): bucket bounds are too coarse for 20 ms queue-wait thresholds
    if mean is not None:
        out[mean_name] = mean
    return out


_DERIVED_NAMES: dict[str, tuple[str, tuple[tuple[str, float], ...], str]] = {}


def _derived_names(signal: str) -> tuple[str, tuple[tuple[str, float], ...], str]:
    """``<signal>.window_count``, the quantile signals with their q (none for ``tokens.*``), ``<signal>.mean``."""
    names = _DERIVED_NAMES.get(signal)
    if names is None:
        quantiles = (
            ()
            if signal.startswith("tokens.")
            else tuple((f"{signal}.{suffix}", q) for suffix, q in LATENCY_QUANTILES.items())
        )
        names = (f"{signal}.window_count", quantiles, f"{signal}.mean")
        if len(_DERIVED_NAMES) < 4096:
            _DERIVED_NAMES[signal] = names
    return names


def _put(values: SignalValues, signal: str, entity: str, h: Histogram) -> None:
    for name, value in derived_values(signal, h).items():
        values.setdefault(name, {})[entity] = value


#: (signal, wanted set) -> its wanted derived signals (see _wanted_names)
_WANTED: dict[tuple[str, frozenset[str]], tuple | None] = {}


def _wanted_names(signal: str, wanted: frozenset[str]) -> tuple | None:
    """``(window_count name or None, ((quantile name, q), ...), mean name or None)`` of `signal`'s derived
    signals in `wanted`; None when none is."""
    key = (signal, wanted)
    if key in _WANTED:
        return _WANTED[key]
    count_name, quantiles, mean_name = _derived_names(signal)
    names = (
        count_name if count_name in wanted else None,
        tuple((n, q) for n, q in quantiles if n in wanted),
        mean_name if mean_name in wanted else None,
    )
    found = names if names[0] or names[1] or names[2] else None
    if len(_WANTED) < 4096:
        _WANTED[key] = found
    return found


def _put_wanted(values: SignalValues, names: tuple, entity: str, h: Histogram) -> None:
    """:func:`_put` of the derived signals `names` (:func:`_wanted_names`) only, in the same order."""
    count_name, quantiles, mean_name = names
    if count_name is not None:
        values.setdefault(count_name, {})[entity] = h.count
    for name, q in quantiles:
        value = h.quantile(q)
        if value is not None:
            values.setdefault(name, {})[entity] = value
    if mean_name is not None:
        mean = h.mean()
        if mean is not None:
            values.setdefault(mean_name, {})[entity] = mean


def _sum_deltas(deltas: list[HistogramDelta]) -> HistogramDelta:
    if len(deltas) == 1:
        return deltas[0]
    counts = [sum(col) for col in zip(*(d.counts for d in deltas), strict=True)]
    return HistogramDelta(counts=counts, count=sum(d.count for d in deltas), sum=sum(d.sum for d in deltas))


_PREFERENCES: dict[tuple[str, str, str], int] = {}


def _preference(spec: SignalSpec, source: str, metric: str) -> int:
    """Where `metric` comes in the catalog's list of `source` metrics for the signal (first wins)."""
    key = (spec.name, source, metric)
    found = _PREFERENCES.get(key)
    if found is None:
        names = [sm.metric for sm in spec.sources.get(source, ())]
        found = names.index(metric) if metric in names else len(names)
        if len(_PREFERENCES) < 65536:
            _PREFERENCES[key] = found
    return found


@dataclass
class _Candidate:
    preference: int
    metric: str
    le: tuple[float, ...]
    deltas: list[HistogramDelta]
    model: str | None


class LatencyTracker:
    def __init__(
        self,
        window_s: float = DEFAULT_WINDOW_S,
        max_intervals: int = DEFAULT_MAX_INTERVALS,
        catalog: Catalog | None = None,
    ) -> None:
        LatencyWindow(window_s, max_intervals)  # validates both
        self.window_s = float(window_s)
        self.max_intervals = int(max_intervals)
        self.catalog = catalog or default_catalog()
        self.series: dict[SeriesKey, TrackedSeries] = {}
        self.newest_ts: float | None = None

    def _candidates(self, snapshot: Snapshot) -> dict[tuple[str, str], _Candidate]:
        """(signal, entity) -> the samples that feed it in this snapshot. When a source exports a signal
        under several names (vLLM V1 and V0), the catalog's first mapping wins; samples of the same metric
        and entity that differ in other labels are added up."""
        found: dict[tuple[str, str], _Candidate] = {}
        for s in snapshot.samples:
            if s.kind != "histogram" or s.delta is None:  # (by kind: version-3 samples are structs)
                continue
            mapped = self.catalog.lookup(snapshot.source, s.name, s.labels)
            if mapped is None:
                continue
            spec, scale = mapped
            if spec.kind != "histogram" or not spec.name.startswith(TRACKED_PREFIXES):
                continue
            entity = spec.entity(s.labels, snapshot.labels)
            if entity is None:
                continue
            preference = _preference(spec, snapshot.source, s.name)
            le = tuple(b * scale for b in s.le) if scale != 1.0 else tuple(s.le)
            delta = s.delta if scale == 1.0 else s.delta.model_copy(update={"sum": s.delta.sum * scale})
            model = s.labels.get("model_name") or snapshot.labels.get("model_name") or snapshot.labels.get("model")
            current = found.get((spec.name, entity))
            if current is None or preference < current.preference:
                found[(spec.name, entity)] = _Candidate(preference, s.name, le, [delta], model)
            elif s.name == current.metric and le == current.le:
                current.deltas.append(delta)
        return found

    def observe(self, snapshot: Snapshot) -> int:
        """Feed one snapshot; returns how many intervals were added to windows."""
        if snapshot.error is not None:
            return 0
        added = 0
        for (signal, entity), cand in sorted(self._candidates(snapshot).items()):
            key = (signal, snapshot.node, entity)
            series = self.series.get(key)
            if series is None or series.metric != cand.metric:
                series = TrackedSeries(cand.metric, cand.model, LatencyWindow(self.window_s, self.max_intervals))
            series.model = cand.model
            if series.window.add(snapshot.ts, snapshot.prev_ts, _sum_deltas(cand.deltas), cand.le, gap=snapshot.gap):
                self.series[key] = series
                added += 1
        if self.newest_ts is None or snapshot.ts > self.newest_ts:
            self.newest_ts = snapshot.ts
            horizon = snapshot.ts - self.window_s
            for key in [k for k, s in self.series.items() if (s.window.last_ts or 0.0) <= horizon]:
                del self.series[key]
        return added

    def percentiles(self, now: float) -> dict[str, SignalValues]:
        """``{scope: {derived signal: {entity: value}}}`` for the windows ending at `now`; scopes are
        ``engine`` (entity ``<node>/<engine>``), ``model`` (entity = model name) and ``fleet`` (entity "")."""
        out: dict[str, SignalValues] = {scope: {} for scope in SCOPES}
        by_model: dict[tuple[str, str], list[Histogram]] = defaultdict(list)
        by_signal: dict[str, list[Histogram]] = defaultdict(list)
        for (signal, node, entity), series in sorted(self.series.items()):
            h = series.window.histogram(now)
            if h is None:
                continue
            _put(out["engine"], signal, f"{node}/{entity}" if entity else node, h)
            if series.model:
                by_model[(signal, series.model)].append(h)
            by_signal[signal].append(h)
        for (signal, model), hs in sorted(by_model.items()):
            _put(out["model"], signal, model, merge(hs))  # type: ignore[arg-type]
        for signal, hs in sorted(by_signal.items()):
            _put(out["fleet"], signal, "", merge(hs))  # type: ignore[arg-type]
        return out

    def engine_values(self, now: float, node: str, wanted: frozenset[str] | None = None) -> SignalValues:
        """One node's engine-scope values keyed by the catalog entity (``"0"``), like ``extract()``; with
        `wanted`, only the derived signals in it (a window none of whose statistics is wanted is not summed)."""
        out: SignalValues = {}
        for (signal, series_node, entity), series in sorted(self.series.items()):
            if series_node != node:
                continue
            if wanted is None:
                if (h := series.window.histogram(now)) is not None:
                    _put(out, signal, entity, h)
                continue
            names = _wanted_names(signal, wanted)
            if names is not None and (h := series.window.histogram(now)) is not None:
                _put_wanted(out, names, entity, h)
        return out

    def to_dict(self) -> dict:
        """JSON-able state: ``[signal, node, entity, metric, model, window]`` per series."""
        return {
            "window_s": self.window_s,
            "max_intervals": self.max_intervals,
            "newest_ts": self.newest_ts,
            "series": [
                [signal, node, entity, s.metric, s.model, s.window.to_dict()]
                for (signal, node, entity), s in sorted(self.series.items())
            ],
        }

    @classmethod
    def from_dict(cls, data: dict, catalog: Catalog | None = None) -> LatencyTracker:
        tracker = cls(float(data["window_s"]), int(data["max_intervals"]), catalog)
        tracker.newest_ts = data.get("newest_ts")
        for signal, node, entity, metric, model, window in data["series"]:
            tracker.series[(signal, node, entity)] = TrackedSeries(metric, model, LatencyWindow.from_dict(window))
        return tracker
