"""Telemetry message version 3: the structs (msgspec, MessagePack arrays) and the encoder.

A message is ``[3, node, [part, ...]]``: the snapshots of one node in the order they were collected, each
part one :class:`tailhound.snapshot.Snapshot`. Inside a part every string (metric names, label names and
values) is written once in ``strings``; each distinct label set once in ``sets`` (pairs of string ids);
each histogram bucket layout (``le``) once in ``layouts``; the samples are columns in their order:
``kinds`` (one byte each: 0 gauge, 1 counter, 2 histogram), ``names`` and ``labelsets`` (ids), ``values``
(a gauge's or counter's value, a histogram's ``count``), ``deltas`` (one per counter, nil on first
sight), ``resets`` (indexes of the samples that reset) and ``hists`` (one per histogram: layout id, counts,
sum, delta; integer counts as per-bucket increases, mostly zeros, which compress to almost nothing).
Integral values travel as MessagePack integers (1-5 bytes instead of 9) and read back as the same floats.

With :class:`LayoutMemory` (agent.yaml ``publish.layout_every_s``) a part carries the id of its tables
(``layout_id``, 16 bytes of BLAKE2b) and, once the worker has seen them, leaves them out (``ref``): then only
the values travel, about a third of the bytes after compression.

A message starts with the bytes :data:`MAGIC` (a 3-array, then the integer 3), which no JSON message
(versions 1 and 2) can start with, so a worker tells the versions apart by the first two bytes.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence
from typing import Annotated

import msgspec

from tailhound.snapshot import LIMITS, Snapshot
from tailhound.wire.decoded import DecodedSnapshot

WIRE_VERSION = 3
MAGIC = b"\x93\x03"

_Str = Annotated[str, msgspec.Meta(max_length=LIMITS.max_label_value)]
_Samples = LIMITS.max_samples
_Floats = Annotated[list[float], msgspec.Meta(max_length=LIMITS.max_buckets)]
#: an id: an index into a table of its part
_Id = Annotated[int, msgspec.Meta(ge=0)]


class HistDelta(msgspec.Struct, array_like=True, frozen=True):
    """A histogram's increase since the previous collection (same layout)."""

    counts: _Floats
    count: float
    sum: float


class Hist(msgspec.Struct, array_like=True, frozen=True):
    """One histogram sample's buckets against a layout of its part; with `steps` its counts (and its delta's)
    are per-bucket increases (small integers, mostly 0), else cumulative."""

    layout: _Id
    steps: bool
    counts: _Floats
    sum: float
    delta: HistDelta | None


class Part(msgspec.Struct, array_like=True, frozen=True):
    """One snapshot (see the module docstring for the columns)."""

    ts: float
    source: Annotated[str, msgspec.Meta(max_length=40)]
    interval_s: float | None
    prev_ts: float | None
    gap: bool
    error: _Str | None
    #: the id of this part's tables (labels to labelsets), or empty; with `ref` they were left out (see LayoutMemory)
    layout_id: Annotated[bytes, msgspec.Meta(max_length=16)]
    ref: bool
    labels: Annotated[dict[_Str, _Str], msgspec.Meta(max_length=LIMITS.max_labels)]
    strings: Annotated[list[_Str], msgspec.Meta(max_length=2 * LIMITS.max_labels * _Samples)]
    sets: Annotated[
        list[Annotated[list[_Id], msgspec.Meta(max_length=2 * LIMITS.max_labels)]], msgspec.Meta(max_length=_Samples)
    ]
    layouts: Annotated[list[_Floats], msgspec.Meta(max_length=_Samples)]
    kinds: Annotated[bytes, msgspec.Meta(max_length=_Samples)]
    names: Annotated[list[_Id], msgspec.Meta(max_length=_Samples)]
    labelsets: Annotated[list[_Id], msgspec.Meta(max_length=_Samples)]
    values: Annotated[list[float], msgspec.Meta(max_length=_Samples)]
    deltas: Annotated[list[float | None], msgspec.Meta(max_length=_Samples)]
    resets: Annotated[list[_Id], msgspec.Meta(max_length=_Samples)]
    hists: Annotated[list[Hist], msgspec.Meta(max_length=_Samples)]


class Message(msgspec.Struct, array_like=True, frozen=True):
    """A telemetry message of version 3: `parts` are snapshots of `node`, in order."""

    version: int
    node: Annotated[str, msgspec.Meta(max_length=200)]
    parts: Annotated[list[Part], msgspec.Meta(min_length=1, max_length=LIMITS.max_bundle_snapshots)]


_KIND = {"gauge": 0, "counter": 1, "histogram": 2}
_ENCODER = msgspec.msgpack.Encoder()
#: integers beyond this are not exact as floats; such values stay floats
_EXACT = 2.0**53


def _compact(v: float) -> float | int:
    """`v` as an int when that reads back as the same float (not -0.0), else `v`."""
    if v.is_integer() and -_EXACT < v < _EXACT and (v != 0.0 or math.copysign(1.0, v) > 0):
        return int(v)
    return v


def _compact_all(values: Sequence[float]) -> list[float | int]:
    return [
        int(v) if v.is_integer() and -_EXACT < v < _EXACT and (v or math.copysign(1.0, v) > 0) else v for v in values
    ]


def _steps(counts: Sequence[float]) -> list[int] | None:
    """Cumulative `counts` as per-bucket increases when they are exact non-negative integers, else None."""
    if not counts or not (counts[-1] < _EXACT and all(map(float.is_integer, counts))):
        return None
    out = [int(b - a) for a, b in zip(itertools.chain((0.0,), counts), counts, strict=False)]
    return out if min(out) >= 0 else None


def _hist(layout: int, s: object) -> Hist:
    counts, delta = s.counts, s.delta
    steps = _steps(counts)
    dsteps = None if delta is None or steps is None else _steps(delta.counts)
    if steps is not None and (delta is None or dsteps is not None):
        d = None if delta is None else HistDelta(dsteps, _compact(delta.count), delta.sum)
        return Hist(layout, True, steps, s.sum, d)
    d = None if delta is None else HistDelta(_compact_all(delta.counts), _compact(delta.count), delta.sum)
    return Hist(layout, False, _compact_all(counts), s.sum, d)


def to_part(snap: Snapshot | DecodedSnapshot) -> Part:
    """`snap` as a version-3 part (strings, label sets and layouts each written once)."""
    strings: dict[str, int] = {}
    sets: dict[tuple, int] = {}
    set_list: list[list[int]] = []
    layouts: dict[tuple, int] = {}
    layout_list: list[list[float]] = []
    kinds: list[int] = []
    names: list[int] = []
    labelsets: list[int] = []
    values: list[float] = []
    deltas: list[float | None] = []
    resets: list[int] = []
    hists: list[Hist] = []
    string_id, set_id = strings.setdefault, sets.get
    add_kind, add_name, add_set, add_value = kinds.append, names.append, labelsets.append, values.append
    for i, s in enumerate(snap.samples):
        kind = s.kind
        add_kind(_KIND[kind])
        add_name(string_id(s.name, len(strings)))
        key = tuple(s.labels.items())
        ls = set_id(key)
        if ls is None:
            ls = sets[key] = len(set_list)
            set_list.append([string_id(x, len(strings)) for pair in key for x in pair])
        add_set(ls)
        if kind == "histogram":
            add_value(s.count)
            le = tuple(s.le)
            lay = layouts.get(le)
            if lay is None:
                lay = layouts[le] = len(layout_list)
                layout_list.append(list(le))
            hists.append(_hist(lay, s))
            if s.reset:
                resets.append(i)
        else:
            add_value(s.value)
            if kind == "counter":
                deltas.append(s.delta)
                if s.reset:
                    resets.append(i)
    compact_deltas = [None if d is None else _compact(d) for d in deltas]
    return Part(
        snap.ts,
        snap.source,
        snap.interval_s,
        snap.prev_ts,
        snap.gap,
        snap.error,
        b"",
        False,
        dict(snap.labels),
        list(strings),
        set_list,
        layout_list,
        bytes(kinds),
        names,
        labelsets,
        _compact_all(values),
        compact_deltas,
        resets,
        hists,
    )


def encode_snapshots(node: str, snapshots: Sequence[Snapshot | DecodedSnapshot]) -> bytes:
    """One version-3 message of `snapshots` (all of `node`, in order)."""
    return _ENCODER.encode(Message(WIRE_VERSION, node, [to_part(s) for s in snapshots]))


def encode_message(snap: Snapshot | DecodedSnapshot) -> bytes:
    """`snap` alone as a version-3 message."""
    return encode_snapshots(snap.node, (snap,))


class LayoutMemory:
    """Version-3 encoding that sends each source's layout (its tables: common labels, strings, label sets,
    bucket layouts, kinds, names) once and then references it by id (``publish.layout_every_s``).

    A layout is sent in full on first sight, whenever it changes (a new id), and again when `every_s` of event
    time passed since it last was (or time went back), so a worker that started or took over the node's
    partition since can read the node's snapshots again within `every_s`; until then they are dead letters
    (``unknown_layout``). The `max_layouts` most recently sent are remembered (per sender: one agent, or
    one ingest)."""

    def __init__(self, every_s: float, max_layouts: int = 65_536) -> None:
        self.every_s = every_s
        self.max_layouts = max_layouts
        self._sent: dict[tuple[str, bytes], float] = {}

    def part(self, snap: Snapshot | DecodedSnapshot) -> Part:
        part = to_part(snap)
        tables = (part.labels, part.strings, part.sets, part.layouts, part.kinds, part.names, part.labelsets)
        layout_id = hashlib.blake2b(_ENCODER.encode(tables), digest_size=16).digest()
        key = (snap.node, layout_id)
        last = self._sent.get(key)
        if last is not None and 0 <= snap.ts - last < self.every_s:
            return msgspec.structs.replace(
                part,
                layout_id=layout_id,
                ref=True,
                labels={},
                strings=[],
                sets=[],
                layouts=[],
                kinds=b"",
                names=[],
                labelsets=[],
            )
        self._sent.pop(key, None)  # (re-inserted last: the dict's order is the order they were sent in)
        self._sent[key] = snap.ts
        if len(self._sent) > self.max_layouts:
            del self._sent[next(iter(self._sent))]
        return msgspec.structs.replace(part, layout_id=layout_id)

    def encode(self, snap: Snapshot | DecodedSnapshot) -> bytes:
        """`snap` alone as a version-3 message, its layout in full or referenced."""
        return _ENCODER.encode(Message(WIRE_VERSION, snap.node, [self.part(snap)]))


def is_v3(raw: bytes | None) -> bool:
    """`raw` is a version-3 message (by its first two bytes)."""
    return bool(raw) and raw[:2] == MAGIC


_SPLIT = msgspec.msgpack.Decoder(tuple[int, str, list[msgspec.Raw]])


def bundle_parts(node: str, messages: Sequence[bytes]) -> bytes:
    """The version-3 messages `messages` (each of `node`) as one, their parts in order, without decoding the
    parts (the agent's outbox holds encoded messages; ``publish.bundle`` joins a node's tick)."""
    parts: list[msgspec.Raw] = []
    for raw in messages:
        parts.extend(_SPLIT.decode(raw)[2])
    return _ENCODER.encode((WIRE_VERSION, node, parts))
