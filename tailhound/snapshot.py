"""The `Snapshot` wire model: one collection of one source on one node.

One Kafka message carries one snapshot (never one sample), keyed by `node`. Samples keep the
metric name the source exports (``vllm:time_to_first_token_seconds``, ``DCGM_FI_DEV_GPU_TEMP``);
:mod:`tailhound.catalog` maps those names to canonical signal names so that rules never depend on
one exporter.

Histograms are cumulative like Prometheus ``_bucket`` series: ``counts[i]`` observations were
``<= le[i]``; the implicit ``+Inf`` bucket is ``count``. JSON has no infinity, so ``+Inf`` is
never written out.

Limits (:data:`LIMITS`, one place): a snapshot is bounded in size, samples, buckets, labels and label
lengths, with defaults far above what real exporters send (an 8-GPU dcgm-exporter snapshot with every
field is ~34 KB, ~170 samples of 4-10 labels). The per-sample limits are part of the schema (checked
while decoding, at no measurable cost); the worker checks the message size before it decodes
(``streams.max_message_bytes``, default :attr:`SnapshotLimits.max_message_bytes`).
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SNAPSHOT_SCHEMA_VERSION: Final = 1
#: A telemetry message of this version is a :class:`SnapshotBundle` (several snapshots of one node); a message
#: of version 1 (or without ``schema_version``) is one :class:`Snapshot`. Both decode (``tailhound.streams.codec``).
BUNDLE_SCHEMA_VERSION: Final = 2

#: Sources tailhound knows how to interpret. Others are accepted (the field is an open name) so that
#: a newer agent can publish a new source before the streams side maps it.
KNOWN_SOURCES = (
    "vllm",
    "tgi",
    "nim",
    "sglang",
    "dcgm",
    "nvml",
    "node",
    "blackbox",
    "netprobe",
    "streamprobe",
)


@dataclass(frozen=True)
class SnapshotLimits:
    """What one snapshot may carry. Generous: a real 8-GPU dcgm-exporter snapshot (every field) is ~34 KB
    with ~170 samples of 4-10 labels; a vLLM snapshot ~5 KB; node_exporter on a large host a few thousand
    series. A message over a limit is rejected whole (dead letter, with the limit named in the reason)."""

    #: bytes of one encoded message; below the producer's 1,000,000-byte request limit (Faust's default),
    #: so the worker can always forward a valid snapshot (engine snapshots go on to the model topic)
    max_message_bytes: int = 900_000
    max_samples: int = 20_000
    #: labels of one sample (and common labels of the snapshot)
    max_labels: int = 64
    max_label_name: int = 256
    max_label_value: int = 4096
    #: buckets of one histogram (classic Prometheus histograms have 10-40)
    max_buckets: int = 512
    #: snapshots in one bundle message (:class:`SnapshotBundle`: the sources of one node published together)
    max_bundle_snapshots: int = 64
    #: the collection interval: a day at most (values older than a few intervals go stale, so an
    #: absurd interval would keep them forever)
    max_interval_s: float = 86_400.0
    #: distinct GPUs (``gpu`` label values) and models (``model_name``) in one snapshot: each becomes
    #: entities in the node's state, so an unbounded count makes a state record over the produce limit
    max_gpus: int = 256
    max_models: int = 64
    #: sources and instances (``source|instance``) one node may have: each keeps its own event time and values
    max_sources_per_node: int = 256
    #: bytes of one node's encoded state record (the node-state changelog); below the producer's limit
    max_state_bytes: int = 900_000


LIMITS = SnapshotLimits()
#: model names become keys and synthetic node names (``model:<name>``) of the model stage
_MODEL_PREFIX_LEN = len("model:")


def name_problem(value: str, what: str = "node", max_length: int = 200) -> str | None:
    """Why `value` cannot be a node or model name, None when it can: one rule for every stage (names become
    Kafka keys, table keys and the model stage's node names), checked once at admission."""
    if not value:
        return f"{what} must not be empty"
    if len(value) > max_length:
        return f"{what} is {len(value)} characters long; at most {max_length} are accepted"
    if any(ch.isspace() or not ch.isprintable() for ch in value):
        return f"{what} {value[:80]!r} must not contain whitespace or control characters"
    return None


def entity_problem(snapshot: Snapshot) -> tuple[str, str] | None:
    """``(kind, reason)`` when `snapshot` names a model badly or carries more GPUs or models than
    :data:`LIMITS` allows, None when it is fine."""
    gpus: set[str] = set()
    models: set[str] = set()
    common = snapshot.labels.get("model_name")
    if common is not None:
        models.add(common)
    for s in snapshot.samples:
        labels = s.labels
        if labels:
            g = labels.get("gpu")
            if g is not None:
                gpus.add(g)
            m = labels.get("model_name")
            if m is not None:
                models.add(m)
    if len(gpus) > LIMITS.max_gpus:
        return "too_many_gpus", f"{len(gpus)} distinct GPUs (label gpu) in one snapshot; at most {LIMITS.max_gpus}"
    if len(models) > LIMITS.max_models:
        return (
            "too_many_models",
            f"{len(models)} distinct models (label model_name) in one snapshot; at most {LIMITS.max_models}",
        )
    for m in sorted(models):
        problem = name_problem(m, "model_name", 200 - _MODEL_PREFIX_LEN)
        if problem is not None:
            return "bad_name", problem
    return None


Labels = Annotated[
    dict[
        Annotated[str, Field(max_length=LIMITS.max_label_name)],
        Annotated[str, Field(max_length=LIMITS.max_label_value)],
    ],
    Field(max_length=LIMITS.max_labels),
]
Name = Annotated[str, Field(min_length=1, max_length=200)]
#: a bucket count or a per-interval increase: finite, never negative
_Count = Annotated[float, Field(ge=0, allow_inf_nan=False)]


_FIELD_NAMES: dict[type, tuple[tuple[str, ...], str]] = {}


class _SampleBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    labels: Labels = Field(default_factory=dict)

    @classmethod
    def trusted(cls, **values: object):
        """Build without validation from values the caller already checked (the agent's parser makes
        ~1k samples a second; pydantic's ``model_construct`` costs more than parsing them). Every field
        must be given; the result equals the validated model."""
        names = _FIELD_NAMES.get(cls)
        if names is None:
            names = _FIELD_NAMES[cls] = (tuple(cls.__pydantic_fields__), cls.__pydantic_fields__["kind"].default)
        obj = cls.__new__(cls)
        values["kind"] = names[1]
        object.__setattr__(obj, "__dict__", {k: values[k] for k in names[0]})
        object.__setattr__(obj, "__pydantic_fields_set__", set(values))
        object.__setattr__(obj, "__pydantic_extra__", None)
        object.__setattr__(obj, "__pydantic_private__", None)
        return obj


class GaugeSample(_SampleBase):
    """A value that goes up and down (temperature, queue length, KV-cache usage)."""

    kind: Literal["gauge"] = "gauge"
    value: float = Field(allow_inf_nan=False)


class CounterSample(_SampleBase):
    """A cumulative value that only grows until its process restarts (tokens, preemptions).

    ``delta`` is the increase since the previous collection of the same series (the snapshot's
    ``prev_ts``), with counter resets already handled: after a restart it is the new value, never
    negative. ``None`` on the first sight of a series.
    """

    kind: Literal["counter"] = "counter"
    value: float = Field(ge=0, allow_inf_nan=False)
    delta: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    reset: bool = Field(default=False, description="The counter went down since the previous collection.")


class HistogramDelta(BaseModel):
    """Per-interval bucket increases (same ``le`` as the histogram): what ``rate(x_bucket[...])`` sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    counts: list[_Count] = Field(max_length=LIMITS.max_buckets)
    count: float = Field(ge=0, allow_inf_nan=False)
    sum: float = Field(allow_inf_nan=False)


class HistogramSample(_SampleBase):
    """A cumulative histogram: ``counts[i]`` observations ``<= le[i]``; ``count`` is the +Inf bucket."""

    kind: Literal["histogram"] = "histogram"
    le: list[float] = Field(min_length=1, max_length=LIMITS.max_buckets)
    counts: list[float] = Field(max_length=LIMITS.max_buckets)
    count: float = Field(ge=0, allow_inf_nan=False)
    sum: float = Field(allow_inf_nan=False)
    delta: HistogramDelta | None = Field(
        default=None, description="Increase since the previous collection (resets handled); None on first sight."
    )
    reset: bool = Field(default=False, description="The histogram went down since the previous collection.")

    @model_validator(mode="after")
    def _check_buckets(self) -> HistogramSample:
        # every decoded histogram passes here: C-level checks (map over operator.lt, sorted, set, min/max)
        le, counts = self.le, self.counts
        delta = self.delta
        n = len(le)
        if (
            n == len(counts)
            and (delta is None or len(delta.counts) == n)
            and math.isfinite(le[0])
            and math.isfinite(le[-1])
            and all(map(operator.lt, le, le[1:]))
            and counts[0] >= 0
            and counts[-1] <= self.count
            and all(map(operator.le, counts, counts[1:]))
        ):
            # valid: finite strictly increasing bounds (a NaN fails every comparison), cumulative counts
            # from >= 0 up to at most `count` (finite), so each check below would pass; they word the reason
            return self
        if len(le) != len(counts):
            raise ValueError(f"le has {len(le)} bounds but counts has {len(counts)} values")
        if not (math.isfinite(min(le)) and math.isfinite(max(le))) or any(map(math.isnan, le)):
            raise ValueError("bucket bounds must be finite (the +Inf bucket is `count`)")
        if le != sorted(le) or len(set(le)) != len(le):
            raise ValueError("bucket bounds `le` must be strictly increasing")
        if min(counts) < 0 or not math.isfinite(max(counts)) or any(map(math.isnan, counts)):
            raise ValueError("bucket counts must be finite and >= 0")
        if counts != sorted(counts):
            raise ValueError("bucket counts must be cumulative (non-decreasing)")
        if self.counts[-1] > self.count:
            raise ValueError("the last bucket count exceeds `count` (the +Inf bucket)")
        if self.delta is not None and len(self.delta.counts) != len(self.le):
            raise ValueError(f"delta has {len(self.delta.counts)} bucket counts for {len(self.le)} bounds")
        return self


Sample = Annotated[GaugeSample | CounterSample | HistogramSample, Field(discriminator="kind")]


class Snapshot(BaseModel):
    """One collection of one source on one node; the unit of telemetry on the wire."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = SNAPSHOT_SCHEMA_VERSION
    ts: float = Field(gt=0, allow_inf_nan=False, description="Event time: unix seconds of the collection.")
    node: Name = Field(description="Host the snapshot describes; also the Kafka message key.")
    source: str = Field(
        pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="Collector or exporter kind: " + ", ".join(KNOWN_SOURCES) + ", ...",
    )
    interval_s: float | None = Field(
        default=None,
        gt=0,
        le=LIMITS.max_interval_s,
        allow_inf_nan=False,
        description="Collection interval, so consumers can tell a gap from a pause.",
    )
    labels: Labels = Field(
        default_factory=dict,
        description="Labels common to every sample (cluster, model_name, engine, endpoint ...).",
    )
    samples: list[Sample] = Field(default_factory=list, max_length=LIMITS.max_samples)
    prev_ts: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Event time of the previous collection of this source on this node: counter and histogram "
        "deltas cover (prev_ts, ts]. None on the first collection.",
    )
    gap: bool = Field(
        default=False,
        description="Collections were missed or failed between prev_ts and ts (deltas then span the gap).",
    )
    error: str | None = Field(
        default=None, description="The collection failed (no samples): the reason, e.g. 'connect refused'."
    )

    @field_validator("node")
    @classmethod
    def _node_has_no_spaces(cls, v: str) -> str:
        problem = name_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    def key(self) -> bytes:
        """The Kafka message key: the node name."""
        return self.node.encode()

    def find(self, name: str, kind: str | None = None) -> Iterator[GaugeSample | CounterSample | HistogramSample]:
        """Samples called `name` (optionally only of one `kind`)."""
        for s in self.samples:
            if s.name == name and (kind is None or s.kind == kind):
                yield s


class SnapshotBundle(BaseModel):
    """Telemetry message version 2: several snapshots of ONE node in one Kafka message (key = node).

    An agent that publishes a node's sources together (``publish.bundle`` in agent.yaml) sends the
    snapshots one tick collected as one message instead of one message each: the worker then pays its
    per-message cost (fetch, stream event, acknowledgement, table read) once per node and tick instead of
    once per source. Each part is a version-1 :class:`Snapshot` exactly as it would travel alone, and the
    worker evaluates the parts in order, as if they had come one after another. A bundle is judged whole:
    one bad part rejects the message (the dead letter names the part, ``snapshots.<i>...``).
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[2] = BUNDLE_SCHEMA_VERSION
    node: Name = Field(description="Host every snapshot of the bundle describes; also the Kafka message key.")
    snapshots: list[Snapshot] = Field(
        min_length=1,
        max_length=LIMITS.max_bundle_snapshots,
        description="The node's snapshots, in the order they were collected.",
    )

    @model_validator(mode="after")
    def _one_node(self) -> SnapshotBundle:
        for i, snap in enumerate(self.snapshots):
            if snap.node != self.node:
                raise ValueError(f"snapshots.{i} is of node {snap.node!r}, not the bundle's {self.node!r}")
        return self

    def key(self) -> bytes:
        """The Kafka message key: the node name."""
        return self.node.encode()


def bundle_bytes(node: str, parts: list[bytes]) -> bytes:
    """The JSON of a :class:`SnapshotBundle` of `node` from its parts' JSON (each one encoded snapshot, as
    ``encode_snapshot`` gives it), without decoding them again."""
    return b'{"schema_version":2,"node":' + json.dumps(node).encode() + b',"snapshots":[' + b",".join(parts) + b"]}"
