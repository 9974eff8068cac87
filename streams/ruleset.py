"""Rule files (``rules/*.yaml``): strict pydantic models and a loader whose errors name file and line.

Shape, close to Prometheus rule files::

    groups:
      - name: gpu
        rules:
          - name: gpu-thermal-throttle
            scope: gpu
            when:
              all:
                - {signal: gpu.temperature, at_least: 85}
                - {signal: gpu.sm_clock_ratio, below: 0.8}
            for: 1m
            keep_firing_for: 1m
            severity: critical
            root_cause: gpu-thermal-throttle
            actions: ["Check cooling of {node} GPUs {gpus}"]
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    model_validator,
)

from tailhound.catalog import Catalog, default_catalog
from tailhound.errors import RuleFileError
from tailhound.vocabulary import ROOT_CAUSES, RootCause, Severity
from tailhound.yamlfile import line_of as _line_of

from .signals import DERIVED_SIGNALS

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(v: Any) -> float:
    """``90``, ``"90s"``, ``"5m"``, ``"1h"`` -> seconds."""
    if isinstance(v, bool):
        raise ValueError("duration must be a number of seconds or a string like 30s, 5m, 1h")
    if isinstance(v, int | float):
        if v < 0:
            raise ValueError("duration must be >= 0")
        return float(v)
    m = _DURATION.match(str(v))
    if not m:
        raise ValueError(f"invalid duration {v!r}: use a number of seconds or 30s, 5m, 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


Duration = Annotated[float, BeforeValidator(parse_duration)]


class Scope(StrEnum):
    GPU = "gpu"
    ENGINE = "engine"
    NODE = "node"
    MODEL = "model"
    ENDPOINT = "endpoint"
    FLEET = "fleet"


_OPS = {"above": ">", "at_least": ">=", "below": "<", "at_most": "<="}


class Threshold(BaseModel):
    """``{signal: gpu.temperature, at_least: 85}``: exactly one of above / at_least / below / at_most."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    signal: str
    above: float | None = None
    at_least: float | None = None
    below: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_op(self) -> Threshold:
        set_ops = [op for op in _OPS if getattr(self, op) is not None]
        if len(set_ops) != 1:
            raise ValueError(f"a condition needs exactly one of {', '.join(_OPS)}; got {set_ops or 'none'}")
        return self

    @property
    def op(self) -> str:
        return next(op for op in _OPS if getattr(self, op) is not None)

    @property
    def symbol(self) -> str:
        return _OPS[self.op]

    @property
    def threshold(self) -> float:
        return float(getattr(self, self.op))

    def holds(self, value: float) -> bool:
        t = self.threshold
        return {"above": value > t, "at_least": value >= t, "below": value < t, "at_most": value <= t}[self.op]


class AllOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    all: list[Condition] = Field(min_length=1)


class AnyOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    any: list[Condition] = Field(min_length=1)


class NotOf(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    not_: Condition = Field(alias="not")


def _condition_kind(v: Any) -> str | None:
    if isinstance(v, dict):
        for key in ("all", "any", "not"):
            if key in v:
                return key
        return "threshold"
    if isinstance(v, BaseModel):
        return {AllOf: "all", AnyOf: "any", NotOf: "not"}.get(type(v), "threshold")
    return None


Condition = Annotated[
    Annotated[Threshold, Tag("threshold")]
    | Annotated[AllOf, Tag("all")]
    | Annotated[AnyOf, Tag("any")]
    | Annotated[NotOf, Tag("not")],
    Discriminator(_condition_kind),
]


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    scope: Scope
    when: Condition
    for_: Duration = Field(default=0.0, alias="for")
    keep_firing_for: Duration = 0.0
    severity: Severity = Severity.WARNING
    root_cause: RootCause | None = None
    symptom: bool = False
    transient: bool | None = None
    actions: list[str] = Field(default_factory=list)
    #: extra signals reported as evidence next to the conditions (e.g. the raw clock and throttle reasons)
    context: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _cause_or_symptom(self) -> Rule:
        if (self.root_cause is None) == (not self.symptom):
            raise ValueError("a rule needs either `root_cause: <tag>` or `symptom: true` (not both)")
        return self

    @property
    def is_transient(self) -> bool:
        if self.transient is not None:
            return self.transient
        return bool(self.root_cause and ROOT_CAUSES[self.root_cause].usually_transient)

    def thresholds(self) -> list[Threshold]:
        return list(_leaves(self.when))


def _leaves(c: Any):
    if isinstance(c, Threshold):
        yield c
    elif isinstance(c, AllOf):
        for x in c.all:
            yield from _leaves(x)
    elif isinstance(c, AnyOf):
        for x in c.any:
            yield from _leaves(x)
    elif isinstance(c, NotOf):
        yield from _leaves(c.not_)


class RuleGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    rules: list[Rule] = Field(min_length=1)


class RuleFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    groups: list[RuleGroup] = Field(min_length=1)


class RuleSet(BaseModel):
    model_config = ConfigDict(frozen=True)
    rules: list[Rule]
    files: list[str] = Field(default_factory=list)

    def by_name(self, name: str) -> Rule | None:
        return next((r for r in self.rules if r.name == name), None)


def load_rules(directory: str | Path, catalog: Catalog | None = None) -> RuleSet:
    """Load every ``*.yaml``/``*.yml`` file in `directory`; any error names the file and line."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RuleFileError(str(directory), None, "rules directory does not exist")
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not files:
        raise RuleFileError(str(directory), None, "no *.yaml rule files")
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    for path in files:
        for rule in load_rule_file(path, catalog):
            if rule.name in seen:
                raise RuleFileError(str(path), None, f"rule {rule.name!r} is also defined in {seen[rule.name]}")
            seen[rule.name] = str(path)
            rules.append(rule)
    return RuleSet(rules=rules, files=[str(p) for p in files])


def load_rule_file(path: str | Path, catalog: Catalog | None = None) -> list[Rule]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RuleFileError(str(path), None, f"cannot read: {exc.strerror}") from exc
    return parse_rule_text(text, str(path), catalog)


def parse_rule_text(text: str, origin: str, catalog: Catalog | None = None) -> list[Rule]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise RuleFileError(origin, line, f"invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    try:
        parsed = RuleFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        line = _line_of(node, list(err["loc"]))
        where = ".".join(str(x) for x in err["loc"])
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise RuleFileError(origin, line, f"{where}: {err['msg']}{more}") from exc
    catalog = catalog or default_catalog()
    for gi, group in enumerate(parsed.groups):
        for ri, rule in enumerate(group.rules):
            _check_signals(rule, catalog, origin, _line_of(node, ["groups", gi, "rules", ri]))
    return [r for g in parsed.groups for r in g.rules]


def _check_signals(rule: Rule, catalog: Catalog, origin: str, line: int | None) -> None:
    for signal in [t.signal for t in rule.thresholds()] + rule.context:
        spec = catalog.spec(signal)
        per = (spec.per[0] if spec.per else None) if spec else DERIVED_SIGNALS.get(signal, (None, None))[0]
        if spec is None and signal not in DERIVED_SIGNALS:
            raise RuleFileError(origin, line, f"rule {rule.name}: unknown signal {signal!r}")
        if (per or "node") != rule.scope.value:
            raise RuleFileError(
                origin, line,
                f"rule {rule.name}: signal {signal} is per {per or 'node'}, rule scope is {rule.scope.value}",
            )


for _m in (AllOf, AnyOf, NotOf, Rule, RuleGroup, RuleFile):
    _m.model_rebuild()
