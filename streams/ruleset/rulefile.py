"""Rule files (``rules/*.yaml``): strict pydantic models and a loader whose errors name file and line.

The shape is close to Prometheus rule files (``groups: [{name, rules: [...]}]``; see README "Rules"). A rule's
optional ``engines:`` (``vllm``, ``tgi``, ``nim``, ``sglang`` or ``[any]``) is checked at load: an engine that lacks
a signal every branch of the condition needs is refused (:mod:`tailhound.streams.ruleset.engine_support`), and
``any`` on a rule that reads engine signals.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from tailhound.catalog import Catalog, default_catalog
from tailhound.durations import parse_duration
from tailhound.errors import ConfigFileError, RuleFileError
from tailhound.vocabulary import ROOT_CAUSES, RootCause, Severity
from tailhound.yamlfile import compose_strict, read_config_text
from tailhound.yamlfile import line_of as _line_of

from ..demand import history_windows
from ..extract import signal_per
from .conditions import Absent, AllOf, AnyOf, Condition, Duration, Leaf, NotOf, Ref, SignalCondition, leaves
from .pack import pack_version

__all__ = [
    "AllOf",
    "AnyOf",
    "NotOf",
    "Absent",
    "Ref",
    "SignalCondition",
    "Threshold",
    "Rule",
    "RuleSet",
    "Scope",
    "Engine",
    "load_rules",
    "load_rule_file",
    "parse_rule_text",
    "parse_duration",
]

#: The name earlier code used for a signal comparison.
Threshold = SignalCondition


class Scope(StrEnum):
    GPU = "gpu"
    ENGINE = "engine"
    NODE = "node"
    MODEL = "model"
    ENDPOINT = "endpoint"
    FLEET = "fleet"


class Engine(StrEnum):
    """What a rule's ``engines:`` may name: the inference engines of the catalog, or ``any`` (no engine signal)."""

    VLLM = "vllm"
    TGI = "tgi"
    NIM = "nim"
    SGLANG = "sglang"
    ANY = "any"


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    _signals: frozenset[str] | None = PrivateAttr(default=None)
    _leaves: list | None = PrivateAttr(default=None)
    #: where it is defined (``rules/gpu.yaml:14``) and the version of the pack it came from (streams/ruleset/pack.py)
    _origin: str | None = PrivateAttr(default=None)
    _pack_version: str | None = PrivateAttr(default=None)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    scope: Scope
    when: Condition
    #: the longest the condition must hold before the rule fires (evidence just past its bounds)
    for_: Duration = Field(default=0.0, alias="for")
    #: the shortest hold, for evidence far past its bounds (condition_eval.required_hold); None: always `for`
    min_for: Duration | None = None
    keep_firing_for: Duration = 0.0
    severity: Severity = Severity.WARNING
    root_cause: RootCause | None = None
    symptom: bool = False
    #: symptoms only: open an incident with this cause if nothing else explains the symptom
    fallback_root_cause: RootCause | None = None
    #: symptoms only: how long a lone symptom waits for a cause before the fallback opens
    attach_grace: Duration = 120.0
    transient: bool | None = None
    actions: list[str] = Field(default_factory=list)
    #: extra signals reported as evidence next to the conditions (e.g. the raw clock and throttle reasons)
    context: list[str] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    #: the inference engines the rule supports (``[any]``: it reads no engine signal); None: not declared
    engines: list[Engine] | None = None

    @field_validator("engines")
    @classmethod
    def _engines_list(cls, v: list[Engine] | None) -> list[Engine] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("list at least one engine (vllm, tgi, nim, sglang) or [any]")
        if len(set(v)) != len(v):
            raise ValueError("an engine is listed twice")
        if Engine.ANY in v and len(v) > 1:
            raise ValueError("`any` stands alone (a rule that reads no engine signal)")
        return v

    @model_validator(mode="after")
    def _cause_or_symptom(self) -> Rule:
        if (self.root_cause is None) == (not self.symptom):
            raise ValueError("a rule needs either `root_cause: <tag>` or `symptom: true` (not both)")
        if self.fallback_root_cause is not None and not self.symptom:
            raise ValueError("`fallback_root_cause` is for symptom rules")
        if self.min_for is not None and self.min_for > self.for_:
            raise ValueError(
                f"`min_for` ({self.min_for:g} s) is the shortest hold: it cannot exceed `for` "
                f"({self.for_:g} s), the longest"
            )
        return self

    @property
    def origin(self) -> str | None:
        """Where the rule is defined: ``<directory>/<file>:<line>`` (None for rules built in code)."""
        return self._origin

    @property
    def pack_version(self) -> str | None:
        """The version of the rule pack it was loaded with (:func:`tailhound.streams.ruleset.pack.pack_version`)."""
        return self._pack_version

    @property
    def is_transient(self) -> bool:
        if self.transient is not None:
            return self.transient
        cause = self.root_cause or self.fallback_root_cause
        return bool(cause and ROOT_CAUSES[cause].usually_transient)

    def thresholds(self) -> list[SignalCondition]:
        """The signal comparisons of `when` (absence checks excluded)."""
        return [c for c in leaves(self.when) if isinstance(c, SignalCondition)]

    def leaves(self) -> list[Leaf]:
        cached = self.__pydantic_private__.get("_leaves") if self.__pydantic_private__ else None
        if cached is None:
            cached = list(leaves(self.when))
            self._leaves = cached
        return cached

    @property
    def has_absence(self) -> bool:
        return any(isinstance(leaf, Absent) for leaf in self.leaves())

    def signals(self) -> frozenset[str]:
        """Every signal `when` reads (both sides of comparisons, absences); computed once."""
        cached = self.__pydantic_private__.get("_signals") if self.__pydantic_private__ else None
        if cached is None:
            cached = frozenset(s for c in leaves(self.when) for s in c.signals())
            self._signals = cached
        return cached


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
        return self.index.get(name)

    @cached_property
    def index(self) -> dict[str, Rule]:
        return {r.name: r for r in self.rules}

    @cached_property
    def baseline_signals(self) -> frozenset[str]:
        """Baseline keys: signals some rule compares with their baseline (a rolling baseline per entity),
        and ``reduce(signal)`` for reduced comparisons (one baseline of the node-wide value, e.g.
        ``sum(engine.http_requests.rate)``)."""
        return frozenset(
            baseline_key(leaf.signal, leaf.reduce)
            for rule in self.rules
            for leaf in rule.thresholds()
            if isinstance(leaf.bound, Ref) and leaf.bound.baseline is not None
        )

    @cached_property
    def baseline_plan(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """Per baseline key (in `baseline_signals` order): the names its signal can be derived from
        (``latency.tpot`` for ``latency.tpot.p95``: every ``f`` with ``signal.startswith(f + ".")``) and
        the rules that read it."""
        out = {}
        for key in self.baseline_signals:
            signal = split_baseline_key(key)[1]
            out[key] = (
                tuple(signal[:i] for i, ch in enumerate(signal) if ch == "."),
                tuple(rule.name for rule in self.rules if signal in rule.signals()),
            )
        return out

    @cached_property
    def plan_cache(self) -> dict:
        """The rules compiled per catalog (:func:`tailhound.streams.ruleset.plan.plans_for`); filled on first use."""
        return {}

    @cached_property
    def reads(self) -> frozenset[str]:
        """Every signal some rule reads."""
        return frozenset(s for rule in self.rules for s in rule.signals())

    @cached_property
    def history_windows(self) -> dict[str, float]:
        """Signals whose short history the evaluator keeps -> how far back: `growing_for` windows, and the
        in-flight gauges demand needs when a rule reads ``engine.arrival_rate`` (streams/demand.py)."""
        out = dict(self.trend_windows)
        for signal, window in history_windows(self.reads).items():
            out[signal] = max(out.get(signal, 0.0), window)
        return out

    @cached_property
    def trend_windows(self) -> dict[str, float]:
        """Signals used with `growing_for` -> the longest window (their short history is kept)."""
        out: dict[str, float] = {}
        for rule in self.rules:
            for leaf in rule.thresholds():
                if leaf.growing_for is not None:
                    out[leaf.signal] = max(out.get(leaf.signal, 0.0), leaf.growing_for)
        return out


def baseline_key(signal: str, reduce: object | None) -> str:
    """Where a comparison's baseline lives: the signal, or ``reduce(signal)`` for a reduced one."""
    return f"{reduce}({signal})" if reduce is not None else signal


def split_baseline_key(key: str) -> tuple[str | None, str]:
    """``sum(x.rate)`` -> ("sum", "x.rate"); ``x.rate`` -> (None, "x.rate")."""
    if key.endswith(")") and "(" in key:
        how, _, rest = key.partition("(")
        return how, rest[:-1]
    return None, key


def load_rules(directory: str | Path, catalog: Catalog | None = None) -> RuleSet:
    """Load every ``*.yaml``/``*.yml`` file in `directory` (or the one rule file it names); the first error
    names the file and line (``tailhound rules check`` reports them all)."""
    directory = Path(directory)
    if directory.is_file():  # one rule file
        files = [directory]
    elif not directory.is_dir():
        raise RuleFileError(str(directory), None, "no such rules directory or file")
    else:
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
    version = pack_version(files)
    for rule in rules:
        rule._pack_version = version
    return RuleSet(rules=rules, files=[str(p) for p in files])


def load_rule_file(path: str | Path, catalog: Catalog | None = None) -> list[Rule]:
    path = Path(path)
    return parse_rule_text(read_config_text(path, RuleFileError), str(path), catalog)


def parse_rule_text(text: str, origin: str, catalog: Catalog | None = None) -> list[Rule]:
    try:
        node, data = compose_strict(text, origin)
    except ConfigFileError as exc:
        raise RuleFileError(origin, exc.line, exc.detail) from exc
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
            if rule.engines is not None:
                _check_engines(rule, catalog, origin, _line_of(node, ["groups", gi, "rules", ri, "engines"]))
    where = f"{Path(origin).parent.name}/{Path(origin).name}" if origin.endswith((".yaml", ".yml")) else origin
    for gi, group in enumerate(parsed.groups):
        for ri, rule in enumerate(group.rules):
            rule._origin = f"{where}:{_line_of(node, ['groups', gi, 'rules', ri])}"
    return [r for g in parsed.groups for r in g.rules]


def _check_engines(rule: Rule, catalog: Catalog, origin: str, line: int | None) -> None:
    """A declared engine must be able to feed the rule; ``any`` is for rules that read no engine signal."""
    from .engine_support import catalog_signals, missing, supported_engines

    supported = supported_engines(rule, catalog)
    declared = [e.value for e in rule.engines or ()]
    if Engine.ANY in declared:
        if Engine.ANY not in supported:
            raise RuleFileError(
                origin,
                line,
                f"rule {rule.name}: `engines: [any]` but it reads engine signals "
                f"(supported by: {', '.join(sorted(supported)) or 'no engine'})",
            )
        return
    if Engine.ANY in supported:
        raise RuleFileError(origin, line, f"rule {rule.name}: it reads no engine signal: write `engines: [any]`")
    for engine in declared:
        if engine not in catalog.engines:
            raise RuleFileError(origin, line, f"rule {rule.name}: the catalog has no engine {engine!r}")
        if engine not in supported:
            lacks = missing(rule.when, catalog_signals(engine, catalog), catalog)
            raise RuleFileError(
                origin,
                line,
                f"rule {rule.name}: {engine} cannot feed it "
                f"(it does not expose {', '.join(lacks)}; see docs/signals.md)",
            )


def _check_signals(rule: Rule, catalog: Catalog, origin: str, line: int | None) -> None:
    scope = rule.scope.value

    def check(signal: str, reduce: object, what: str) -> None:
        per = signal_per(signal, catalog)
        if per is None:
            raise RuleFileError(origin, line, f"rule {rule.name}: unknown signal {signal!r} ({what})")
        if reduce is None and per and per != (scope,):
            raise RuleFileError(
                origin,
                line,
                f"rule {rule.name}: signal {signal} is per {'/'.join(per)}, rule scope is {scope}: "
                "add `reduce: max|min|mean|sum|count` to fold it onto the rule's scope",
            )

    for leaf in rule.leaves():
        if isinstance(leaf, Absent):
            check(leaf.absent, None, "absent")
            continue
        check(leaf.signal, leaf.reduce, "when")
        bound = leaf.bound
        if isinstance(bound, Ref) and bound.signal:
            check(bound.signal, bound.reduce, "compared with")
    for signal in rule.context:
        if signal_per(signal, catalog) is None:
            raise RuleFileError(origin, line, f"rule {rule.name}: unknown signal {signal!r} (context)")


for _m in (Rule, RuleGroup, RuleFile):
    _m.model_rebuild()
