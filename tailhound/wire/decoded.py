"""What a version-3 message decodes into: the snapshot as the worker's step reads it, as msgspec structs.

The step and its stages read a snapshot's ``ts``, ``node``, ``source``, ``interval_s``, ``labels``, ``prev_ts``,
``gap``, ``error`` and ``samples``, and of each sample ``kind``, ``name``, ``labels``, ``value``, ``delta``
(a counter's float, a histogram's :class:`HistDelta` with ``counts``/``count``/``sum``), ``le``, ``counts``,
``count``, ``sum`` and ``reset``: exactly the attributes of :class:`tailhound.snapshot.Snapshot` and its
samples, which these structs carry under the same names. A struct costs ~0.1 us to build where a pydantic
model built without validation costs ~1.5 us, and is not tracked by the garbage collector.

Stages tell the kinds apart by ``kind`` (a class attribute here), never by class. Version-1 and -2 messages
keep their pydantic path; :func:`snapshot_json` writes either as a version-1 message.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from tailhound.snapshot import Snapshot


class HistDelta(msgspec.Struct, frozen=True, gc=False):
    """A histogram's increase since the previous collection (same ``le``)."""

    counts: list[float]
    count: float
    sum: float

    def model_copy(self, *, update: dict) -> HistDelta:
        """A copy with `update` applied (the one pydantic method a stage calls on a delta: unit scaling)."""
        return msgspec.structs.replace(self, **update)


class Gauge(msgspec.Struct, frozen=True, gc=False, tag_field="kind", tag="gauge"):
    kind: ClassVar[str] = "gauge"
    name: str
    labels: dict[str, str]
    value: float


class Counter(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag_field="kind", tag="counter"):
    kind: ClassVar[str] = "counter"
    name: str
    labels: dict[str, str]
    value: float
    delta: float | None = None
    reset: bool = False


class Histogram(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, tag_field="kind", tag="histogram"):
    kind: ClassVar[str] = "histogram"
    name: str
    labels: dict[str, str]
    le: list[float]
    counts: list[float]
    count: float
    sum: float
    delta: HistDelta | None = None
    reset: bool = False


class DecodedSnapshot(msgspec.Struct, frozen=True, gc=False, omit_defaults=True, kw_only=True):
    """One snapshot of a version-3 message, with :class:`tailhound.snapshot.Snapshot`'s fields and methods."""

    schema_version: int = 1
    ts: float
    node: str
    source: str
    interval_s: float | None = None
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    samples: list[Gauge | Counter | Histogram] = msgspec.field(default_factory=list)
    prev_ts: float | None = None
    gap: bool = False
    error: str | None = None

    def key(self) -> bytes:
        """The Kafka message key: the node name."""
        return self.node.encode()

    def find(self, name: str, kind: str | None = None) -> Iterator[Gauge | Counter | Histogram]:
        """Samples called `name` (optionally only of one `kind`)."""
        for s in self.samples:
            if s.name == name and (kind is None or s.kind == kind):
                yield s


_JSON = msgspec.json.Encoder()


def snapshot_json(snapshot: Snapshot | DecodedSnapshot) -> bytes:
    """`snapshot` as a version-1 message (JSON, fields at their defaults left out)."""
    if isinstance(snapshot, DecodedSnapshot):
        # omit_defaults leaves schema_version (1, the default) out; it is written first, as the agent writes it
        return b'{"schema_version":1,' + _JSON.encode(snapshot)[1:]
    return snapshot.__pydantic_serializer__.to_json(snapshot, exclude_none=True)
