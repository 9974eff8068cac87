"""The capacity file (core): per model, the thresholds a load test measured, for rules to read.

``tailhound capacity --out capacity.yaml`` writes it; the worker reads it at start (``streams.capacity_file``),
replay with ``--capacity``. Each model pattern (fnmatch, first match wins) gives the engines of a matching model
the ``capacity.*`` signals (safe request rate, queue to scale out at, max batch, the latency knees), which rules
compare with as with ``sla.ttft_p99``. Without a match the signals are absent and such rules cannot fire
(``tailhound doctor`` names the setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tailhound.durations import Duration
from tailhound.yamlfile import load_yaml_model

#: signal -> the field of :class:`CapacityThresholds` it carries
CAPACITY_SIGNALS: dict[str, str] = {
    "capacity.safe_request_rate": "safe_request_rate",
    "capacity.queue_scale_out": "queue_scale_out",
    "capacity.max_num_seqs": "max_num_seqs",
    "capacity.ttft_knee_s": "ttft_knee_s",
    "capacity.tpot_knee_s": "tpot_knee_s",
}
#: the setting that names the file (what `doctor` and coverage tell a person to set)
SETTING = "capacity_file"
#: model patterns in one file at most
MAX_MODELS = 256


class CapacityThresholds(BaseModel):
    """What rules read for one model: the ``capacity.<name>`` signals."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    safe_request_rate: float = Field(gt=0)
    queue_scale_out: float = Field(ge=0)
    max_num_seqs: int = Field(gt=0)
    ttft_knee_s: Duration | None = Field(default=None, ge=0)
    tpot_knee_s: Duration | None = Field(default=None, ge=0)


class CapacityFile(BaseModel):
    """The YAML ``tailhound capacity --out`` writes and ``streams.capacity_file`` names."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    schema_version: Literal[1] = 1
    generated_at: float
    source: str
    #: model pattern (fnmatch; first match wins) -> thresholds
    models: dict[str, CapacityThresholds] = Field(min_length=1, max_length=MAX_MODELS)
    #: model pattern -> its plots (PNG files, relative to this file's folder), for the incident console
    plots: dict[str, list[str]] = Field(default_factory=dict, max_length=MAX_MODELS)

    def limits(self) -> dict[str, dict[str, float]]:
        """signal -> {model pattern: value}: what the node stage adds per engine (the ``sla`` mapping of
        :func:`tailhound.streams.evaluator.evaluate`)."""
        out: dict[str, dict[str, float]] = {}
        for signal, field in CAPACITY_SIGNALS.items():
            values = {pattern: float(v) for pattern, t in self.models.items() if (v := getattr(t, field)) is not None}
            if values:
                out[signal] = values
        return out


def load_capacity_file(path: str | Path) -> CapacityFile:
    """The file at `path`; :class:`tailhound.errors.ConfigFileError` naming the file and line when it is not
    a valid capacity file."""
    return load_yaml_model(path, CapacityFile)


def capacity_limits(path: str | Path | None) -> dict[str, dict[str, float]]:
    """The ``capacity.*`` limits of the file at `path` (none without one)."""
    return load_capacity_file(path).limits() if path else {}
