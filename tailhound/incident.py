"""The `IncidentEvent` wire model: one lifecycle step (opened, updated, resolved) of one incident.

Published to the ``incidents`` topic keyed by ``incident_id``. ``incident_id`` is derived from the
rule, the scope and the event time the incident opened, so re-processing the same telemetry after a
crash yields the same id; ``sequence`` grows by one per event of an incident, so a consumer can drop
duplicates and re-order with ``(incident_id, sequence)``.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tailhound.vocabulary import RootCause, Severity

INCIDENT_SCHEMA_VERSION: Final = 1

EventKind = Literal["opened", "updated", "resolved"]


class Scope(BaseModel):
    """Where the incident is, as far as it is known."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    node: str | None = None
    gpus: list[str] = Field(default_factory=list, description="GPU indices on `node`.")
    engine: str | None = None
    model: str | None = None
    endpoint: str | None = None
    nodes: list[str] = Field(
        default_factory=list,
        description="The nodes of a model- or fleet-scope incident that rolls up one cause on several nodes.",
    )

    def labels(self) -> dict[str, str]:
        """The scope as labels (what routes, silences and Alertmanager match on): ``node``, ``engine``,
        ``model``, ``endpoint``, and ``gpus`` / ``nodes`` comma-separated; empty fields left out."""
        out = {name: value for name in ("node", "engine", "model", "endpoint") if (value := getattr(self, name))}
        if self.gpus:
            out["gpus"] = ",".join(self.gpus)
        if self.nodes:
            out["nodes"] = ",".join(self.nodes)
        return out

    def describe(self) -> str:
        parts = []
        if self.node:
            parts.append(f"node {self.node}")
        if self.gpus:
            parts.append(("GPU " if len(self.gpus) == 1 else "GPUs ") + ", ".join(self.gpus))
        if self.model:
            parts.append(f"model {self.model}")
        if self.nodes:
            if not parts:
                parts.append("fleet")
            parts.append(("node " if len(self.nodes) == 1 else "nodes ") + ", ".join(self.nodes))
        if self.engine:
            parts.append(f"engine {self.engine}")
        if self.endpoint:
            parts.append(f"endpoint {self.endpoint}")
        return " / ".join(parts) or "fleet"


class Evidence(BaseModel):
    """One observation that backs the root cause: a signal, its value and what it was compared to."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    signal: str
    value: float
    op: str = Field(description="How the value was compared: >=, >, <=, <, ...")
    threshold: float | None = None
    baseline: float | None = None
    unit: str = ""
    window_s: float | None = Field(default=None, description="How long the condition held, seconds.")
    labels: dict[str, str] = Field(default_factory=dict)
    detail: str = Field(default="", description="Human reading of the value (e.g. decoded bit flags).")

    def describe(self) -> str:
        where = ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))
        where = f"{{{where}}}" if where else ""
        ref = self.threshold if self.threshold is not None else self.baseline
        unit = f" {self.unit}" if self.unit[:1].isalpha() else self.unit
        cmp = f" ({self.op} {_fmt(ref)}{unit})" if ref is not None else ""
        held = f" for {self.window_s:.0f}s" if self.window_s else ""
        shown = self.detail or f"{_fmt(self.value)}{unit}"
        return f"{self.signal}{where} = {shown}{cmp}{held}"


#: bounds of an event's chart data (:class:`EvidenceSeries`): series per event, points per series, entities
#: (the incident's own and their peers) per series
MAX_SERIES = 8
MAX_SERIES_POINTS = 60
MAX_SERIES_ENTITIES = 16


_Points = Annotated[list[float | None], Field(max_length=MAX_SERIES_POINTS)]


class EvidenceSeries(BaseModel):
    """The recent history of one evidence signal of an incident, for charts: the values of the entities the
    incident is about (``focus``) and of their peers (the node's other GPUs, the model's other engines) at
    the same times, the baseline where the rule compares with one, and the rule's threshold and ``for``.

    Recorded by the node and model stages from the moment the rule's condition first held (pending) until
    the incident resolves; older points are thinned (every other one dropped) so at most
    :data:`MAX_SERIES_POINTS` span the whole incident. Lists in ``values`` and ``baseline`` are aligned
    with ``ts`` (None: no value at that time)."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)

    rule: str
    signal: str = Field(description="The evidence signal as the rule reads it, e.g. gpu.sm_clock_mhz.")
    unit: str = ""
    op: str = Field(default="", description="How the rule compares: >=, >, <=, <, ...")
    threshold: float | None = None
    for_s: float = Field(default=0.0, description="The rule's `for`: how long the condition must hold.")
    per: str = Field(default="", description="What an entity is (gpu, engine, node); empty: one value per node.")
    focus: list[str] = Field(default_factory=list, description="The entities the incident is about.")
    ts: list[float] = Field(default_factory=list, max_length=MAX_SERIES_POINTS)
    values: dict[str, _Points] = Field(
        default_factory=dict,
        max_length=MAX_SERIES_ENTITIES,
        description="entity -> value at each `ts`; focus entities first, then peers.",
    )
    baseline: dict[str, _Points] = Field(
        default_factory=dict,
        max_length=MAX_SERIES_ENTITIES,
        description="entity -> the baseline (or peer median) compared with, at each `ts`.",
    )
    baseline_of: str = Field(
        default="",
        description="What the baseline is: rolling (the entity's usual level), "
        "load-model, or peers (the median of its peers); empty: none.",
    )
    #: when the condition first held for the first focus entity (start of the `for` window)
    pending_since: float | None = None

    @model_validator(mode="after")
    def _aligned(self) -> EvidenceSeries:
        n = len(self.ts)
        for name, series in (("values", self.values), ("baseline", self.baseline)):
            for entity, points in series.items():
                if len(points) != n:
                    raise ValueError(f"{name}[{entity[:40]!r}] has {len(points)} points for {n} times")
        return self

    def peers(self) -> list[str]:
        return [e for e in self.values if e not in self.focus]


#: bounds of an event's differential diagnosis: candidates per event, rule findings per candidate side
MAX_CANDIDATES = 6
MAX_FINDINGS = 8
FINDING_EVIDENCE = 4

RuleStateName = Literal["firing", "pending", "quiet"]


class RuleFinding(BaseModel):
    """What one rule of a candidate cause said when the event was made: firing, pending (its condition holds,
    not yet for its `for`) or quiet (its condition does not hold), with the values it compared."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    rule: str
    state: RuleStateName
    evidence: list[Evidence] = Field(default_factory=list, max_length=FINDING_EVIDENCE)

    def describe(self) -> str:
        values = "; ".join(e.describe() for e in self.evidence)
        return f"{self.rule} {self.state}" + (f": {values}" if values else "")


class Candidate(BaseModel):
    """One candidate cause of an incident, with the evidence for it (its rules that fire or are pending) and
    against it (its rules that are quiet, and firing signals it does not explain)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    root_cause: RootCause
    score: float = Field(
        ge=0,
        le=1,
        description="How well it explains the incident's firing rules (1: all of them) "
        "times the share of its own rules that support it.",
    )
    supports: list[RuleFinding] = Field(
        default_factory=list, max_length=MAX_FINDINGS, description="Its rules that fire or are pending."
    )
    against: list[RuleFinding] = Field(
        default_factory=list, max_length=MAX_FINDINGS, description="Its rules that are quiet."
    )
    unexplained: list[str] = Field(
        default_factory=list,
        max_length=MAX_FINDINGS * 2,
        description="Firing rules of the incident this cause does not explain.",
    )


class Differential(BaseModel):
    """The lead cause and the runner-up the telemetry cannot tell apart, and the one check that does."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    lead: RootCause
    runner_up: RootCause
    why: str = Field(description="Why the recorded signals do not separate them.")
    check: str = Field(description="The one check that tells them apart.")

    def describe(self) -> str:
        return f"{self.lead} or {self.runner_up}: {self.why} Check: {self.check}"


class IncidentEvent(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: Literal[1] = INCIDENT_SCHEMA_VERSION
    incident_id: str = Field(min_length=1)
    event: EventKind
    sequence: int = Field(ge=1, description="1 for opened, +1 for every later event of this incident.")
    ts: float = Field(gt=0, description="Event time (unix seconds) of this lifecycle step.")
    root_cause: RootCause
    severity: Severity
    opened_at: float = Field(gt=0, description="Event time (unix seconds) the incident opened.")
    resolved_at: float | None = None
    scope: Scope
    transient: bool = False
    summary: str = ""
    evidence: list[Evidence] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=list)
    rule: str
    labels: dict[str, str] = Field(default_factory=dict)
    rule_origin: str | None = Field(
        default=None, description="Where the root rule is defined: `<rules directory>/<file>:<line>`."
    )
    rules_version: str | None = Field(
        default=None,
        description="The rule pack's version: `git:<commit>` for a clean checkout, "
        "`git:<commit>+dirty.<hash>` with local changes, else `sha256:<hash>` of the files.",
    )
    series: list[EvidenceSeries] = Field(
        default_factory=list,
        max_length=MAX_SERIES,
        description="Recent history of the evidence signals, for charts (the incident console). Carried on the "
        "incidents topic; left out of what receivers (Slack, PagerDuty, webhooks) are sent.",
    )
    candidates: list[Candidate] = Field(
        default_factory=list,
        max_length=MAX_CANDIDATES,
        description="The ranked candidate causes, the root cause first, each with the evidence for and against it.",
    )
    differential: Differential | None = Field(
        default=None,
        description="Set when the root cause and the runner-up cannot be told apart from the "
        "recorded signals: the runner-up and the check that separates them.",
    )

    @property
    def runner_up(self) -> RootCause | None:
        """The cause named next to the root cause when the two stay close (see `differential`)."""
        return self.differential.runner_up if self.differential else None

    def key(self) -> bytes:
        """The Kafka message key: the incident id."""
        return self.incident_id.encode()


def incident_id(rule: str, scope_key: str, opened_at: float) -> str:
    """A stable id: the same rule, scope and opening time always give the same id."""
    digest = hashlib.sha256(f"{rule}|{scope_key}|{opened_at:.3f}".encode()).hexdigest()
    return f"inc-{digest[:16]}"


def _fmt(v: float | None) -> str:
    if v is None:
        return "?"
    return f"{v:.0f}" if abs(v) >= 100 or float(v).is_integer() else f"{v:.3g}"
