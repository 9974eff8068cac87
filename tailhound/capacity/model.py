"""The capacity files (pydantic, JSON/YAML): a load test's result and the recommendation made from it.

- :class:`LoadTestResult`: what ``tailhound loadtest`` measured, one :class:`StepResult` per load step;
- :class:`CapacityRecommendation`: what ``tailhound capacity`` found for one model (knees, plateau, safe
  rate, ``max_num_seqs``, scale-out queue level, KEDA trigger values);
- :class:`CapacityFile`: the YAML written for rules: per model pattern (fnmatch, first match wins, as
  ``streams.ttft_p99_sla_s``) the thresholds the ``capacity.*`` signals carry (settings
  ``streams.capacity_file``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# the file rules read is a core model (the worker loads it): defined there, named here with the others
from tailhound.capacity_file import CapacityFile, CapacityThresholds

__all__ = [
    "CapacityFile",
    "CapacityRecommendation",
    "CapacityThresholds",
    "Knee",
    "LoadMode",
    "LoadTestResult",
    "Percentiles",
    "StepResult",
    "TokenSummary",
]

LoadMode = Literal["rate", "concurrency"]


class Percentiles(BaseModel):
    """Seconds; None where a step had too few requests to say."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    mean: float | None = None
    count: int = 0


class TokenSummary(BaseModel):
    """A token-length distribution as sampled: where from, and its shape."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    source: str = Field(description="recording:<file>, or explicit")
    prompt_mean: float
    prompt_p95: float
    output_mean: float
    output_p95: float


class StepResult(BaseModel):
    """One load step, held long enough for stable percentiles."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    index: int = Field(ge=0)
    #: the load asked for: requests per second (mode rate) or requests in flight (mode concurrency)
    offered: float = Field(ge=0)
    started_at: float
    duration_s: float = Field(gt=0)
    requests: int = Field(ge=0, description="Requests completed in the step.")
    errors: int = Field(ge=0)
    unfinished: int = Field(
        default=0,
        ge=0,
        description="Requests of the step still running when the test ended "
        "(cut after the drain): neither errors nor in the percentiles.",
    )
    throughput_rps: float = Field(ge=0, description="Completed requests per second.")
    output_tokens_per_s: float = Field(ge=0)
    concurrency_mean: float | None = Field(default=None, description="Requests in flight, measured (mean).")
    ttft: Percentiles
    tpot: Percentiles
    #: the engine's own figures over the step, from its /metrics when reachable: queue (requests waiting),
    #: batch (requests running), kv_cache_usage (0..1), each a mean
    engine: dict[str, float] = Field(default_factory=dict)


class LoadTestResult(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: Literal[1] = 1
    target: str = Field(description="The endpoint's base URL (never credentials).")
    model: str
    api: Literal["chat", "completions"] = "chat"
    mode: LoadMode = "rate"
    token_mix: TokenSummary
    started_at: float
    finished_at: float
    steps: list[StepResult] = Field(default_factory=list)
    #: why the test ended before its last step (time or request bound, error rate), None when it ran through
    stopped: str | None = None


class Knee(BaseModel):
    """Where a latency curve bends: the load at the bend and the latency there."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    load: float = Field(ge=0)
    latency_s: float = Field(ge=0)
    #: how much better two segments fit than one (1 - SSE_two / SSE_one), 0..1
    confidence: float = Field(ge=0, le=1)


class CapacityRecommendation(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str
    source: str = Field(description="loadtest:<file> or telemetry:<recording>")
    load_unit: Literal["requests_per_s", "concurrency"] = "requests_per_s"
    ttft_knee: Knee | None = None
    tpot_knee: Knee | None = None
    throughput_plateau_rps: float | None = None
    #: the load where TPOT starts growing faster than throughput (the max_num_seqs point)
    tpot_outpaces_throughput_at: float | None = None
    safe_request_rate: float = Field(gt=0, description="Per engine: the more conservative knee.")
    recommended_max_num_seqs: int = Field(gt=0)
    queue_scale_out: float = Field(ge=0, description="Requests waiting per engine that should trigger scale-out.")
    #: KEDA trigger values for deploy/keda/vllm-scaledobject.yaml: queue (AverageValue of waiting requests)
    #: and batch (AverageValue of running requests, 0.8 x max_num_seqs)
    keda: dict[str, float] = Field(default_factory=dict)
