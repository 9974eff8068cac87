"""The `Snapshot` wire model: one collection of one source on one node.

One Kafka message carries one snapshot (never one sample), keyed by `node`. Samples keep the
metric name the source exports (``vllm:time_to_first_token_seconds``, ``DCGM_FI_DEV_GPU_TEMP``);
:mod:`tailhound.catalog` maps those names to canonical signal names so that rules never depend on
one exporter.

Histograms are cumulative like Prometheus ``_bucket`` series: ``counts[i]`` observations were
``<= le[i]``; the implicit ``+Inf`` bucket is ``count``. JSON has no infinity, so ``+Inf`` is
never written out.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterator
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SNAPSHOT_SCHEMA_VERSION = 1

#: Sources tailhound knows how to interpret. Others are accepted (the field is an open name) so that
#: a newer agent can publish a new source before the streams side maps it.
KNOWN_SOURCES = (
    "vllm",
    "tgi",
    "nim",
    "dcgm",
    "nvml",
    "node",
    "blackbox",
    "netprobe",
    "streamprobe",
)

Labels = dict[str, str]
Name = Annotated[str, Field(min_length=1, max_length=200)]


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

    counts: list[float]
    count: float = Field(ge=0, allow_inf_nan=False)
    sum: float = Field(allow_inf_nan=False)


class HistogramSample(_SampleBase):
    """A cumulative histogram: ``counts[i]`` observations ``<= le[i]``; ``count`` is the +Inf bucket."""

    kind: Literal["histogram"] = "histogram"
    le: list[float] = Field(min_length=1)
    counts: list[float]
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
        if (n == len(counts) and (delta is None or len(delta.counts) == n) and math.isfinite(le[0])
                and math.isfinite(le[-1]) and all(map(operator.lt, le, le[1:])) and counts[0] >= 0
                and counts[-1] <= self.count and all(map(operator.le, counts, counts[1:]))):
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
        default=None, gt=0, description="Collection interval, so consumers can tell a gap from a pause."
    )
    labels: Labels = Field(
        default_factory=dict,
        description="Labels common to every sample (cluster, model_name, engine, endpoint ...).",
    )
    samples: list[Sample] = Field(default_factory=list)
    prev_ts: float | None = Field(
        default=None,
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
        if v != v.strip() or any(ch.isspace() for ch in v):
            raise ValueError("node must not contain whitespace")
        return v

    def key(self) -> bytes:
        """The Kafka message key: the node name."""
        return self.node.encode()

    def find(self, name: str, kind: str | None = None) -> Iterator[GaugeSample | CounterSample | HistogramSample]:
        """Samples called `name` (optionally only of one `kind`)."""
        for s in self.samples:
            if s.name == name and (kind is None or s.kind == kind):
                yield s
