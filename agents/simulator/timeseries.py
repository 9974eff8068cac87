"""Helpers to read time series back out of simulated ticks (for tests, demos and notebooks)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from tailhound.snapshot import CounterSample, GaugeSample, HistogramSample, Snapshot

Tick = tuple[float, list[Snapshot]]


def snapshot_of(tick: Tick, node: str, source: str) -> Snapshot | None:
    """The snapshot of `source` on `node` in one tick (None if absent)."""
    for snap in tick[1]:
        if snap.node == node and snap.source == source:
            return snap
    return None


def find_sample(
    snap: Snapshot | None, name: str, **labels: str
) -> GaugeSample | CounterSample | HistogramSample | None:
    """The first sample called `name` whose labels include `labels`."""
    if snap is None:
        return None
    for s in snap.find(name):
        if all(s.labels.get(k) == v for k, v in labels.items()):
            return s
    return None


def values(ticks: Iterable[Tick], node: str, source: str, name: str, **labels: str) -> list[float]:
    """Per-tick value of a gauge or counter (NaN where the sample is missing)."""
    out: list[float] = []
    for tick in ticks:
        s = find_sample(snapshot_of(tick, node, source), name, **labels)
        out.append(float("nan") if s is None or isinstance(s, HistogramSample) else s.value)
    return out


def histograms(ticks: Iterable[Tick], node: str, source: str, name: str, **labels: str) -> list[HistogramSample]:
    """Per-tick cumulative histogram samples."""
    out: list[HistogramSample] = []
    for tick in ticks:
        s = find_sample(snapshot_of(tick, node, source), name, **labels)
        if not isinstance(s, HistogramSample):
            raise KeyError(f"no histogram {name} from {source} on {node} at ts={tick[0]}")
        out.append(s)
    return out


def interval_means(hists: Sequence[HistogramSample]) -> list[float | None]:
    """Mean observation of each interval (delta sum / delta count); None when nothing was observed.

    The first entry compares against zero; a drop in ``count`` (a restart) restarts from zero.
    """
    out: list[float | None] = []
    prev_count, prev_sum = 0.0, 0.0
    for h in hists:
        if h.count < prev_count:
            prev_count, prev_sum = 0.0, 0.0
        dc = h.count - prev_count
        out.append((h.sum - prev_sum) / dc if dc > 0 else None)
        prev_count, prev_sum = h.count, h.sum
    return out


def deltas(series: Sequence[float]) -> list[float]:
    """Per-tick increase of a counter series: 0 for the first tick; after a drop (a restart) the new
    value itself, as Prometheus ``increase()`` treats counter resets."""
    out: list[float] = []
    for i, v in enumerate(series):
        prev = series[i - 1] if i else v
        out.append(v - prev if v >= prev else v)
    return out
