"""The node stage's forward to the model stage: an engine snapshot cut to what the model stage reads, in MessagePack.

Of an engine snapshot the model stage reads its node, time, source, interval and labels, and of its samples the
gauges' values, the counters' deltas and the histograms' bucket bounds and deltas (:mod:`tailhound.streams.model_merge`,
:mod:`tailhound.streams.engine_peers`). A forward carries only those: no cumulative values, reset flags, samples
without a delta (a series' first sight) or the snapshot's gap, previous time and error. It is decoded straight into
the structs of :mod:`tailhound.wire.decoded`. A worker of the previous version forwards the whole snapshot as
version-1 JSON; :func:`decode` reads that too, so workers of both versions can share a group while it rolls.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tailhound.snapshot import Snapshot
from tailhound.wire.decoded import Counter, DecodedSnapshot, Gauge, HistDelta, Histogram

from . import codec

#: header on model-topic messages: root causes open on the snapshot's node (model-stage correlation)
CAUSES_HEADER = "tailhound-node-causes"
#: first field of a forward (a JSON forward starts with ``{``, so the two cannot be mistaken for each other)
FORWARD_TAG = "mf1"
#: whole numbers below this travel as MessagePack ints (1-5 bytes instead of 9); they read back as the same floats
_EXACT_INT = 2**53

Labels = dict[str, str]


class Forward(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One forwarded engine snapshot. Label sets and histogram bounds are written once each (``label_sets``,
    ``layouts``) and referenced by index; histograms are (name, labels, layout, delta counts, count, sum)."""

    tag: str
    ts: float
    node: str
    source: str
    interval_s: float | None
    labels: Labels
    label_sets: list[Labels]
    layouts: list[list[float]]
    gauges: list[tuple[str, int, float]]
    counters: list[tuple[str, int, float]]
    histograms: list[tuple[str, int, int, list[float], float, float]]


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Forward)


def encode(snapshot: Any) -> bytes:
    """`snapshot` (a :class:`Snapshot` or a version-3 struct) as a forward."""
    label_ids: dict[tuple, int] = {}
    by_object: dict[int, int] = {}  # id(labels) -> its index: version-3 samples share their layout's label dicts
    layout_ids: dict[tuple, int] = {}
    label_sets: list[Labels] = []
    layouts: list[list[float]] = []
    gauges: list = []
    counters: list = []
    histograms: list = []
    for s in snapshot.samples:
        kind = s.kind
        if kind != "gauge" and s.delta is None:
            continue  # a series' first sight: the model stage adds up increases only
        labels = s.labels
        li = by_object.get(id(labels))  # (ids are safe here: every labels dict lives as long as the snapshot)
        if li is None:
            lkey = tuple(labels.items())
            li = label_ids.get(lkey)
            if li is None:
                li = label_ids[lkey] = len(label_sets)
                label_sets.append(labels)
            by_object[id(labels)] = li
        if kind == "gauge":
            gauges.append((s.name, li, _compact(s.value)))
        elif kind == "counter":
            counters.append((s.name, li, _compact(s.delta)))
        else:
            le = s.le
            lo = by_object.get(id(le))
            if lo is None:
                le_key = tuple(le)
                lo = layout_ids.get(le_key)
                if lo is None:
                    lo = layout_ids[le_key] = len(layouts)
                    layouts.append(le)
                by_object[id(le)] = lo
            d = s.delta
            histograms.append((s.name, li, lo, _compact_all(d.counts), _compact(d.count), d.sum))
    forward = Forward(
        FORWARD_TAG,
        snapshot.ts,
        snapshot.node,
        snapshot.source,
        snapshot.interval_s,
        snapshot.labels,
        label_sets,
        layouts,
        gauges,
        counters,
        histograms,
    )
    return _ENCODER.encode(forward)


def decode(raw: bytes | None) -> DecodedSnapshot | Snapshot | None:
    """A forward as the snapshot the model stage reads; a version-1 JSON forward (a worker of the previous version)
    as its :class:`Snapshot`; None when it is neither (the node stage wrote it, so this is not expected)."""
    if not raw:
        return None
    if raw[:1] == b"{":
        value = codec.decode_snapshot(raw, max_bytes=None)  # its size was checked by the node stage
        return value if isinstance(value, Snapshot) else None
    try:
        f = _DECODER.decode(raw)
        if f.tag != FORWARD_TAG:
            return None
        ls, lo = f.label_sets, f.layouts
        samples: list[Gauge | Counter | Histogram] = [Gauge(name, ls[li], value) for name, li, value in f.gauges]
        samples.extend(Counter(name, ls[li], delta, delta) for name, li, delta in f.counters)
        samples.extend(
            Histogram(name, ls[li], lo[layout], counts, count, total, HistDelta(counts, count, total))
            for name, li, layout, counts, count, total in f.histograms
        )
    except (msgspec.DecodeError, msgspec.ValidationError, IndexError):
        return None
    return DecodedSnapshot(
        ts=f.ts, node=f.node, source=f.source, interval_s=f.interval_s, labels=f.labels, samples=samples
    )


def _compact_all(xs: list[float]) -> list[float | int]:
    """:func:`_compact` of each (a histogram's bucket counts), without a call per bucket."""
    e = _EXACT_INT
    return [int(x) if x.is_integer() and -e < x < e else x for x in xs]


def _compact(x: float) -> float | int:
    """A whole float as an int (shorter in MessagePack), any other as it is."""
    return int(x) if x.is_integer() and -_EXACT_INT < x < _EXACT_INT else x
