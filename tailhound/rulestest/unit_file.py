"""The rule test file format (``tailhound rules test``): its pydantic models and how a file is read.

Errors name the file and line; ``values``/``count`` of input series are taken as written (YAML 1.1 would read
``0x139`` as a number). The format is documented in docs/rules-testing.md.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, field_validator

from tailhound.capacity_file import CapacityThresholds
from tailhound.durations import Duration
from tailhound.errors import ConfigFileError
from tailhound.vocabulary import RootCause, Severity
from tailhound.yamlfile import compose_with_duplicates, line_of, read_config_text, yaml_error_text

from .inputs import DEFAULT_MODEL

#: 2026-01-01T00:00:00Z: the event time of a test's first sample unless the file says `start:`
#: (a multiple of the baselines' 5-minute buckets, like the simulator's start)
DEFAULT_START = 1_767_225_600.0
DEFAULT_INTERVAL_S = 15.0
DEFAULT_SLA = {"*": 1.5}


class RuleTestFileError(ConfigFileError):
    """A rule test file that does not parse or validate, or names what cannot be rendered."""


# --- the file model ---------------------------------------------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class ScopeExpect(_Strict):
    """The parts of an incident's scope a test checks (the others are not compared)."""

    node: str | None = None
    gpus: list[str] | None = None
    engine: str | None = None
    model: str | None = None
    endpoint: str | None = None
    nodes: list[str] | None = None

    @field_validator("gpus", "nodes", mode="before")
    @classmethod
    def _strings(cls, v: Any) -> Any:
        if isinstance(v, str | int):
            v = [v]
        return [str(x) for x in v] if isinstance(v, list) else v


class IncidentExpect(_Strict):
    """One incident expected open; only the fields given are compared."""

    root_cause: RootCause | None = Field(default=None, validation_alias=AliasChoices("root_cause", "cause"))
    severity: Severity | None = None
    rule: str | None = Field(default=None, description="The rule that names its root cause.")
    transient: bool | None = None
    scope: ScopeExpect | None = None
    rules: list[str] | None = Field(default=None, description="Rules the incident includes (symptoms too): a subset.")
    evidence: list[str] | None = Field(default=None, description="Signals its evidence shows: a subset.")

    def describe(self) -> dict[str, Any]:
        out = self.model_dump(exclude_none=True, mode="json")
        if self.scope is not None:
            out["scope"] = self.scope.model_dump(mode="json", exclude_unset=True)
        return out


class IncidentCheck(_Strict):
    eval_time: Duration = Field(ge=0)
    rule: str | None = Field(default=None, description="Compare only the incidents this rule is part of.")
    incidents: list[IncidentExpect] = Field(validation_alias=AliasChoices("incidents", "exp_incidents"))


class NodeModel(_Strict):
    engine: Literal["vllm", "tgi", "nim", "sglang"] = "vllm"
    gpu_source: Literal["dcgm", "nvml"] = "dcgm"
    model: str = DEFAULT_MODEL


class SeriesModel(_Strict):
    series: str
    values: str | int | float
    node: str | None = Field(default=None, pattern=r"^\S+$")
    source: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_-]{0,39}$")
    count: str | int | float | None = None
    buckets: list[float] | None = Field(default=None, min_length=1)
    type: Literal["gauge", "counter", "histogram", "untyped"] | None = None
    each: dict[str, list[str] | str] | None = None

    @field_validator("each", mode="before")
    @classmethod
    def _each(cls, v: Any) -> Any:
        """``{gpu: [0, 1, 2]}``, ``{gpu: "0,1,2"}`` or a range ``{gpu: "0..7"}`` -> lists of strings."""
        if not isinstance(v, dict):
            return v
        out = {}
        for key, items in v.items():
            if isinstance(items, int):
                items = [items]
            if isinstance(items, str):
                m = re.fullmatch(r"\s*(\d+)\s*\.\.\s*(\d+)\s*", items)
                items = (
                    [str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1)]
                    if m
                    else [s.strip() for s in items.split(",") if s.strip()]
                )
            if isinstance(items, list):
                items = [str(i) for i in items]
                if not items:
                    raise ValueError(f"each.{key}: no values")
            out[key] = items
        return out


class RuleTest(_Strict):
    name: str = Field(min_length=1)
    interval: Duration | None = Field(default=None, gt=0)
    node: str = Field(default="gpu-node-1", pattern=r"^\S+$", description="Node of series that name none.")
    nodes: dict[str, NodeModel] = Field(default_factory=dict)
    input_series: list[SeriesModel] = Field(min_length=1)
    expect: list[IncidentCheck] = Field(
        min_length=1, validation_alias=AliasChoices("expect", "incident_rule_test", "incident_tests")
    )


class RuleTestFile(_Strict):
    rule_files: list[str] | None = Field(
        default=None,
        description="Rule files, globs or directories, relative to the test file; `default` is the "
        "bundled pack. Omitted: the bundled pack.",
    )
    evaluation_interval: Duration = Field(default=DEFAULT_INTERVAL_S, gt=0)
    start: float | dt.datetime = Field(default=DEFAULT_START, description="Event time of the first sample.")
    ttft_p99_sla_s: dict[str, float] = Field(default_factory=lambda: dict(DEFAULT_SLA))
    capacity: dict[str, CapacityThresholds] = Field(
        default_factory=dict,
        description="As a capacity file's `models` (settings streams.capacity_file): model "
        "pattern -> thresholds, the `capacity.*` signals. Omitted: none.",
    )
    tests: list[RuleTest] = Field(min_length=1)

    @property
    def start_ts(self) -> float:
        if isinstance(self.start, dt.datetime):
            when = self.start if self.start.tzinfo else self.start.replace(tzinfo=dt.UTC)
            return when.timestamp()
        return float(self.start)


def load_test_file(path: str | Path) -> tuple[RuleTestFile, yaml.Node | None]:
    p = Path(path)
    text = read_config_text(p, RuleTestFileError)
    try:
        node, data, _ = compose_with_duplicates(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise RuleTestFileError(str(p), mark.line + 1 if mark else None, yaml_error_text(exc)) from None
    _series_as_written(node, data)
    try:
        return RuleTestFile.model_validate(data if data is not None else {}), node
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        where = ".".join(str(x) for x in loc)
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        msg = err["msg"].removeprefix("Value error, ")
        raise RuleTestFileError(str(p), line_of(node, loc), f"{where}: {msg}{more}" if where else msg + more) from None


def _series_as_written(node: yaml.Node | None, data: Any) -> None:
    """Series text exactly as written: YAML 1.1 reads ``values: 0x139`` as the hex number 313 and ``1_000``
    as 1000, so the ``values`` and ``count`` scalars of every input series are taken from the document."""

    def child(mapping: yaml.Node, key: str) -> yaml.Node | None:
        if isinstance(mapping, yaml.MappingNode):
            return next((v for k, v in mapping.value if getattr(k, "value", None) == key), None)
        return None

    tests = child(node, "tests") if node is not None else None
    if not (isinstance(tests, yaml.SequenceNode) and isinstance(data, dict) and isinstance(data.get("tests"), list)):
        return
    for t_node, t_data in zip(tests.value, data["tests"], strict=False):
        series = child(t_node, "input_series")
        if (
            not isinstance(series, yaml.SequenceNode)
            or not isinstance(t_data, dict)
            or not isinstance(t_data.get("input_series"), list)
        ):
            continue
        for s_node, s_data in zip(series.value, t_data["input_series"], strict=False):
            for key in ("values", "count"):
                v = child(s_node, key)
                if (
                    isinstance(s_data, dict)
                    and isinstance(v, yaml.ScalarNode)
                    and v.style is None
                    and not isinstance(s_data.get(key), str)
                ):
                    s_data[key] = v.value
