"""Version-3 telemetry -> the snapshot objects the worker's step reads, bounded; never raises.

msgspec checks the types and the sizes of every list while it reads (a list longer than the limits is
refused at its header, before its items are read); this module checks what the schema of version 1 checks
(:mod:`tailhound.snapshot`: finite values, counters >= 0, cumulative buckets, label limits, names) and builds
the structs of :mod:`tailhound.wire.decoded`, which the step reads as it reads a
:class:`~tailhound.snapshot.Snapshot`: each label set's dict is built once per part and shared by its samples,
each bucket layout once. A message that fails any check is
a :class:`Refused` (a dead letter's ``kind`` and reason), whole.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import msgspec

from tailhound.snapshot import LIMITS, name_problem
from tailhound.wire.decoded import Counter, DecodedSnapshot, Gauge, HistDelta, Histogram
from tailhound.wire.v3 import WIRE_VERSION, Hist, Message, Part

_DECODER = msgspec.msgpack.Decoder(Message)
_PART = msgspec.msgpack.Decoder(Part)
_ENCODER = msgspec.msgpack.Encoder()
_SOURCE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
_isfinite = math.isfinite
_MISSING = object()


@dataclass(frozen=True)
class Refused:
    """Why a version-3 message was not read: a countable `kind` and a reason for people."""

    kind: str
    reason: str


class _Bad(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


def decode_v3(raw: bytes, layouts: LayoutCache | None = None) -> list[DecodedSnapshot] | Refused:
    """The snapshots of version-3 message `raw`, in order, or why not (its size is the caller's check).
    `layouts` keeps the layouts read in full, for the parts that reference them (none: such parts are refused)."""
    try:
        msg = _DECODER.decode(raw)
    except msgspec.ValidationError as exc:
        return Refused(_kind_of(str(exc)), f"version-3 message: {exc}"[:1000])
    except msgspec.DecodeError as exc:
        return Refused("bad_msgpack", f"version-3 message is not MessagePack: {exc}"[:1000])
    if msg.version != WIRE_VERSION:
        return Refused("invalid", f"telemetry version {msg.version} in a version-3 frame")
    problem = name_problem(msg.node)
    if problem is not None:
        return Refused("invalid", f"node: {problem}")
    out: list[DecodedSnapshot] = []
    for i, part in enumerate(msg.parts):
        try:
            out.append(_snapshot(msg.node, part, layouts))
        except _Bad as exc:
            return Refused(exc.kind, f"parts.{i}: {exc}"[:1000])
        except IndexError as exc:  # an id past its table
            return Refused("invalid", f"parts.{i}: an id points past its table ({exc})"[:1000])
        except Exception as exc:  # whatever else is wrong with a part is a reason, not a crash
            return Refused("invalid", f"parts.{i}: cannot be read: {exc!r}"[:1000])
    return out


#: where msgspec reports a list over its limit: ``$[2][<part>][<field>]...`` (field numbers of :class:`Part`)
_WHERE = re.compile(r"`\$\[2\]\[\d+\]\[(\d+)\](\[)?")
_FIELD = {name: i for i, name in enumerate(Part.__struct_fields__)}
_LABELS, _SETS = _FIELD["labels"], _FIELD["sets"]
_BUCKET_FIELDS = (_FIELD["layouts"], _FIELD["hists"])
_SAMPLE_FIELDS = {
    _FIELD[f]
    for f in ("strings", "sets", "layouts", "kinds", "names", "labelsets", "values", "deltas", "resets", "hists")
}


def _kind_of(error: str) -> str:
    """A countable kind for msgspec's error text (a list over its limit names the field it is in)."""
    if "`str` of length <=" in error:
        return "label_too_long"
    if "length <=" not in error:
        return "invalid"
    where = _WHERE.search(error)
    if where is None:
        return "invalid"  # too many parts, or a name too long
    field, deeper = int(where[1]), where[2] is not None
    if field == _LABELS or (field == _SETS and deeper):
        return "too_many_labels"
    if field in _BUCKET_FIELDS and deeper:
        return "too_many_buckets"
    return "too_many_samples" if field in _SAMPLE_FIELDS else "invalid"


def _time(value: float | None, what: str, upper: float = math.inf) -> None:
    if value is not None and not (_isfinite(value) and 0 < value <= upper):
        raise _Bad(
            "non_finite" if not _isfinite(value) else "out_of_range",
            f"{what} {value!r} must be finite and > 0" + (f" and <= {upper:g}" if upper < math.inf else ""),
        )


def _labels(strings: list[str], flat: list[int]) -> dict[str, str]:
    if len(flat) % 2:
        raise _Bad("invalid", "a label set has an odd number of string ids")
    labels = {strings[flat[j]]: strings[flat[j + 1]] for j in range(0, len(flat), 2)}
    if len(labels) * 2 != len(flat):
        raise _Bad("invalid", "a label set names one label twice")
    if any(len(k) > LIMITS.max_label_name for k in labels):
        raise _Bad("label_too_long", f"a label name is longer than {LIMITS.max_label_name} characters")
    return labels


def _bounds(le: list[float]) -> list[float]:
    if not le:
        raise _Bad("invalid", "a bucket layout is empty")
    if not (_isfinite(le[0]) and _isfinite(le[-1]) and all(map(operator.lt, le, le[1:]))):
        raise _Bad("invalid", "bucket bounds `le` must be finite and strictly increasing (+Inf is `count`)")
    return le


def _counts(counts: list[float], n: int, top: float, what: str) -> None:
    if len(counts) != n:
        raise _Bad("invalid", f"{what} has {len(counts)} bucket counts for {n} bounds")
    if not all(map(_isfinite, counts)):
        raise _Bad("non_finite", f"{what}: bucket counts must be finite")
    if counts and (counts[0] < 0 or counts[-1] > top):
        raise _Bad("out_of_range", f"{what}: bucket counts must be >= 0 and at most `count`")


@dataclass(frozen=True)
class Layout:
    """The checked tables of a part: what a part that references its layout leaves out."""

    labels: dict[str, str]
    kinds: bytes
    names: list[str]
    sample_labels: list[dict[str, str]]
    layouts: list[list[float]]


class LayoutCache:
    """The layouts the worker has read in full, by (node, layout id), the `max_layouts` most recently used
    (a bound: a node whose layouts were evicted sends them again within its ``layout_every_s``)."""

    def __init__(self, max_layouts: int = 32_768) -> None:
        self.max_layouts = max_layouts
        self._layouts: OrderedDict[tuple[str, bytes], Layout] = OrderedDict()

    def get(self, node: str, layout_id: bytes) -> Layout | None:
        layout = self._layouts.get((node, layout_id))
        if layout is not None:
            self._layouts.move_to_end((node, layout_id))
        return layout

    def put(self, node: str, layout_id: bytes, layout: Layout, part: Part | None = None) -> None:
        """Keep `layout`, read in full from `part` (which a cache that persists layouts stores)."""
        self._layouts[(node, layout_id)] = layout
        self._layouts.move_to_end((node, layout_id))
        while len(self._layouts) > self.max_layouts:
            self._layouts.popitem(last=False)

    def settle(self, admitted: bool) -> None:
        """The message whose layouts were just put was `admitted` (or refused after its decode: by its key, its
        time): a cache that persists layouts writes those of admitted messages only."""

    def forget(self, node: str) -> None:
        """`node` expired or was evicted: what a cache persists for it goes (in memory the LRU bound suffices)."""

    def __len__(self) -> int:
        return len(self._layouts)


def tables_of(p: Part) -> bytes:
    """The layout tables of full part `p` (its values left out), as :func:`layout_from_tables` reads them."""
    return _ENCODER.encode(msgspec.structs.replace(p, values=[], deltas=[], resets=[], hists=[]))


def layout_from_tables(raw: bytes) -> Layout | None:
    """The checked layout of tables written by :func:`tables_of`, or None when they do not read or check."""
    try:
        return _layout_of(_PART.decode(raw), share=True)
    except (msgspec.DecodeError, _Bad):
        return None


#: the strings and bucket layouts of cached layouts, one object per value for all nodes (metric and label names,
#: GPU indexes, bounds: ~5 KB a node of a cache's ~20), bounded
_SHARED: dict[object, object] = {}


def _shared(value: Any, key: Any = None) -> Any:
    """The one object kept for `value` (looked up by `key`, by default the value itself)."""
    key = value if key is None else key
    found = _SHARED.get(key)
    if found is None:
        if len(_SHARED) >= 65_536:
            _SHARED.clear()
        found = _SHARED[key] = value
    return found


def _layout_of(p: Part, share: bool = False) -> Layout:
    """The part's own tables, checked (`share`: for a cache, their strings and bounds shared between nodes)."""
    if any(len(k) > LIMITS.max_label_name for k in p.labels):
        raise _Bad("label_too_long", f"a common label name is longer than {LIMITS.max_label_name} characters")
    strings, kinds, names = p.strings, p.kinds, p.names
    if share:
        strings = [_shared(x) for x in strings]
    n = len(kinds)
    if not (len(names) == len(p.labelsets) == n):
        raise _Bad("invalid", "the sample columns kinds, names and labelsets differ in length")
    if kinds and max(kinds) > 2:
        raise _Bad("invalid", f"sample kind {max(kinds)} is not 0 (gauge), 1 (counter) or 2 (histogram)")
    sample_names = [strings[k] for k in names]
    if not all(0 < len(name) <= 200 for name in sample_names):
        raise _Bad("invalid", "a sample name must be 1 to 200 characters long")
    sets = [_labels(strings, flat) for flat in p.sets]
    bounds = [_bounds(le) for le in p.layouts]
    if share:  # (a list is shared by the bounds it holds; nothing writes to a layout's lists)
        bounds = [_shared(le, tuple(le)) for le in bounds]
    return Layout(p.labels, kinds, sample_names, [sets[k] for k in p.labelsets], bounds)


def _snapshot(node: str, p: Part, cache: LayoutCache | None) -> DecodedSnapshot:
    _time(p.ts, "ts")
    _time(p.interval_s, "interval_s", LIMITS.max_interval_s)
    _time(p.prev_ts, "prev_ts")
    if not _SOURCE.match(p.source):
        raise _Bad("invalid", f"source {p.source[:80]!r} must match ^[a-z][a-z0-9_-]{{0,39}}$")
    if p.ref:  # the tables were left out: those of the layout this node sent in full before
        layout = cache.get(node, p.layout_id) if cache is not None else None
        if layout is None:
            raise _Bad(
                "unknown_layout",
                f"layout {p.layout_id.hex()[:32]} of {node}/{p.source} was not seen in full "
                "here (a worker that started or took the partition since): the agent sends it again within "
                "its publish.layout_every_s",
            )
    else:
        layout = _layout_of(p, share=bool(p.layout_id) and cache is not None)
        if p.layout_id and cache is not None:
            cache.put(node, p.layout_id, layout, p)
    kinds, sample_names, sample_labels, layouts = layout.kinds, layout.names, layout.sample_labels, layout.layouts
    values = p.values
    n = len(kinds)
    if len(values) != n:
        raise _Bad("invalid", f"{len(values)} values for {n} samples")
    if not all(map(_isfinite, values)):
        raise _Bad("non_finite", "sample values must be finite")
    resets = set(p.resets)
    if resets and max(resets) >= n:
        raise _Bad("invalid", "a reset names no sample")
    samples: list[object] = []
    deltas = iter(p.deltas)
    hists = iter(p.hists)
    for i in range(n):
        kind, name, labels, value = kinds[i], sample_names[i], sample_labels[i], values[i]
        if kind == 0:
            if i in resets:
                raise _Bad("invalid", f"gauge {name} cannot reset")
            samples.append(Gauge(name, labels, value))
        elif kind == 1:
            delta = next(deltas, _MISSING)
            if delta is _MISSING:
                raise _Bad("invalid", "fewer counter deltas than counters")
            if value < 0 or (delta is not None and not (_isfinite(delta) and delta >= 0)):
                raise _Bad(
                    "non_finite" if delta is not None and not _isfinite(delta) else "out_of_range",
                    f"counter {name}: value and delta must be finite and >= 0",
                )
            samples.append(Counter(name, labels, value, delta, i in resets))
        else:
            hist = next(hists, None)
            if hist is None:
                raise _Bad("invalid", "fewer histograms than histogram samples")
            samples.append(_histogram(name, labels, value, hist, layouts, i in resets))
    if next(deltas, _MISSING) is not _MISSING or next(hists, None) is not None:
        raise _Bad("invalid", "more counter deltas or histograms than samples of their kind")
    return DecodedSnapshot(
        ts=p.ts,
        node=node,
        source=p.source,
        interval_s=p.interval_s,
        labels=layout.labels,
        samples=samples,
        prev_ts=p.prev_ts,
        gap=p.gap,
        error=p.error,
    )


def _cumulative(counts: list[float], steps: bool, name: str) -> list[float]:
    """`counts` as cumulative counts (`steps`: they are per-bucket increases, each >= 0)."""
    if not steps:
        return counts
    if counts and min(counts) < 0:
        raise _Bad("out_of_range", f"histogram {name}: bucket increases must be >= 0")
    return list(itertools.accumulate(counts))


def _histogram(
    name: str, labels: dict[str, str], count: float, h: Hist, layouts: list[list[float]], reset: bool
) -> Histogram:
    if count < 0 or not _isfinite(h.sum):
        raise _Bad("out_of_range" if count < 0 else "non_finite", f"histogram {name}: count >= 0, sum finite")
    le = layouts[h.layout]
    counts = _cumulative(h.counts, h.steps, name)
    _counts(counts, len(le), count, f"histogram {name}")
    if not all(map(operator.le, counts, counts[1:])):
        raise _Bad("invalid", f"histogram {name}: bucket counts must be cumulative (non-decreasing)")
    delta = None
    d = h.delta
    if d is not None:
        if not (_isfinite(d.count) and d.count >= 0 and _isfinite(d.sum)):
            raise _Bad(
                "non_finite" if not (_isfinite(d.count) and _isfinite(d.sum)) else "out_of_range",
                f"histogram {name}: delta count must be finite and >= 0, its sum finite",
            )
        dcounts = _cumulative(d.counts, h.steps, name)
        _counts(dcounts, len(le), math.inf, f"histogram {name} delta")
        if dcounts and min(dcounts) < 0:
            raise _Bad("out_of_range", f"histogram {name}: delta bucket counts must be >= 0")
        delta = HistDelta(dcounts, d.count, d.sum)
    return Histogram(name, labels, le, counts, count, h.sum, delta, reset)
