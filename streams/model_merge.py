"""The model stage's sums: one model's (or the fleet's) engine snapshots of a bucket merged into the samples of its
synthetic snapshot (histogram and counter deltas added up, gauges kept per engine)."""

from __future__ import annotations

from tailhound.snapshot import CounterSample, GaugeSample, HistogramDelta, HistogramSample, Snapshot

#: labels that name one engine process rather than what it serves; merged series drop them
ENGINE_LABELS = ("engine", "instance", "pod", "node", "hostname")


def merge(snapshots: list[Snapshot], model: str | None) -> list:
    """Add up histogram and counter deltas across engines (and, for the fleet, across models); keep
    gauges per engine (the latest)."""
    drop = ENGINE_LABELS if model is not None else (*ENGINE_LABELS, "model_name")
    hists: dict[tuple, list] = {}
    counters: dict[tuple, float] = {}
    gauges: dict[tuple, GaugeSample] = {}
    for snap in snapshots:
        common = snap.labels.get("model_name")
        engine_id = snap.labels.get("engine") or snap.labels.get("instance") or ""
        for s in snap.samples:
            if model is not None and (s.labels.get("model_name") or common) != model:
                continue
            kind = s.kind  # (by kind: forwarded samples are structs, tailhound.streams.model_forward)
            if kind == "gauge":
                engine = f"{snap.node}/{s.labels.get('engine') or s.labels.get('instance') or engine_id}"
                labels = {k: v for k, v in s.labels.items() if k not in drop}
                labels["engine"] = engine
                gauges[(s.name, tuple(sorted(labels.items())))] = GaugeSample.trusted(
                    name=s.name, labels=labels, value=s.value
                )
                continue
            key = (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in drop)))
            if kind == "counter":
                if s.delta is not None:
                    counters[key] = counters.get(key, 0.0) + s.delta
            elif kind == "histogram" and s.delta is not None:
                have = hists.get(key)
                if have is None:
                    hists[key] = [s.le, list(s.delta.counts), s.delta.count, s.delta.sum]
                elif have[0] == s.le:
                    have[1] = [a + b for a, b in zip(have[1], s.delta.counts, strict=True)]
                    have[2] += s.delta.count
                    have[3] += s.delta.sum
    out: list = []
    for (name, labels), (le, counts, count, total) in sorted(hists.items()):
        lbl = dict(labels, engine="all")
        counts = [max(c, 0.0) for c in counts]
        counts = [min(c, count) for c in _cumulative_max(counts)]
        out.append(
            HistogramSample(
                name=name,
                labels=lbl,
                le=le,
                counts=counts,
                count=count,
                sum=total,
                delta=HistogramDelta(counts=counts, count=count, sum=total),
            )
        )
    for (name, labels), total in sorted(counters.items()):
        out.append(CounterSample(name=name, labels=dict(labels, engine="all"), value=total, delta=total))
    out.extend(g for _, g in sorted(gauges.items(), key=lambda kv: kv[0]))
    return out


def _cumulative_max(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for v in values:
        top = max(top, v)
        out.append(top)
    return out
