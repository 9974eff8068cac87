"""An open incident of a node (:class:`Episode`), what the evaluator hands over per rule (:class:`Firing`),
and the :class:`~tailhound.incident.IncidentEvent` that reports an episode: scope, evidence, summary,
actions and the ranked candidate causes.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from tailhound.incident import Candidate, Differential, Evidence, IncidentEvent, Scope
from tailhound.snapshot import Snapshot
from tailhound.vocabulary import ROOT_CAUSES, RootCause, highest_severity

from .candidates import Observe, diagnose
from .causal_rank import domain_of, rank_of
from .evidence import render_action
from .ruleset.plan import entity_order
from .ruleset.rulefile import Rule

MAX_EVIDENCE = 48
#: evidence kept on the episode, so a `resolved` event still says what the incident was about
KEPT_EVIDENCE = 12


class Episode(BaseModel):
    """One open incident of a node."""

    incident_id: str
    domain: str
    opened_at: float
    sequence: int = 1
    root_cause: str
    root_rule: str
    #: opened by a lone symptom's fallback cause; any real cause that fires takes over
    fallback: bool = False
    #: rule -> entities that fired in it (grows only: a recovered GPU stays part of the incident)
    members: dict[str, list[str]] = Field(default_factory=dict)
    transient: bool = False
    #: the last evidence seen while firing, so the `resolved` event still says what it was about
    evidence: list[Evidence] = Field(default_factory=list)
    differential: Differential | None = None


class Firing(BaseModel):
    """What the evaluator hands over per rule: firing entities, since when, and their evidence."""

    entities: list[str]
    since: float
    evidence: list[Evidence] = Field(default_factory=list)
    #: when its first entity started firing (a strong condition fires before its `for`); None: since + `for`
    fired: float | None = None


def episode_event(
    kind: str,
    ep: Episode,
    by_name: dict[str, Rule],
    firing: dict[str, Firing],
    snapshot: Snapshot,
    models: list[str],
    pending: set[str] | frozenset[str] = frozenset(),
    observe: Observe | None = None,
) -> IncidentEvent:
    """The `kind` event (opened, updated, resolved) of `ep` at the snapshot's time; keeps its evidence and
    differential on `ep` for the events after it."""
    scope = _scope(ep, by_name, snapshot.node, models)
    root = by_name[ep.root_rule]
    ordered = [ep.root_rule] + sorted(n for n in ep.members if n != ep.root_rule)
    # a resolved incident says what it was about: the evidence kept while its root cause fired, not what
    # else (a lagging residual cause, a draining queue) still fires
    evidence = (
        []
        if kind == "resolved"
        else _distinct(ev for n in ordered if n in firing for ev in firing[n].evidence)[:MAX_EVIDENCE]
    )
    if evidence:
        ep.evidence = evidence[:KEPT_EVIDENCE]
    else:
        evidence = list(ep.evidence)
    severity = highest_severity((by_name[n].severity for n in ep.members if n in by_name), default=root.severity)
    title = ROOT_CAUSES[RootCause(ep.root_cause)].title
    explains = sorted(n for n in ep.members if by_name[n].symptom)
    also = sorted(n for n in ep.members if n != ep.root_rule and not by_name[n].symptom)
    summary = ("resolved: " if kind == "resolved" else "") + f"{title} on {scope.describe()}"
    if explains:
        summary += f"; explains {', '.join(explains)}"
    if also:
        summary += f"; also firing: {', '.join(also)}"
    actions = [render_action(a, scope, evidence) for a in root.actions]
    candidates: list[Candidate] = []
    if kind != "resolved":  # a resolved incident keeps the differential it was paged with
        candidates, ep.differential = diagnose(
            RootCause(ep.root_cause),
            domain_of,
            rank_of,
            ep.members,
            {n: f.evidence for n, f in firing.items()},
            pending,
            by_name,
            observe,
        )
    return IncidentEvent(
        incident_id=ep.incident_id,
        event=kind,  # type: ignore[arg-type]
        sequence=ep.sequence,
        ts=snapshot.ts,  # type: ignore[arg-type]
        root_cause=RootCause(ep.root_cause),
        severity=severity,
        opened_at=ep.opened_at,
        resolved_at=snapshot.ts if kind == "resolved" else None,
        scope=scope,
        transient=ep.transient,
        summary=summary,
        evidence=evidence,
        actions=actions,
        rule=ep.root_rule,
        labels={**root.labels, "rules": ",".join(sorted(ep.members))},
        rule_origin=root.origin,
        rules_version=root.pack_version,
        candidates=candidates,
        differential=ep.differential,
    )


def _distinct(evidence: Iterable[Evidence]) -> list[Evidence]:
    """Each observation once (rules share context signals), the root rule's first."""
    seen: set[tuple] = set()
    out: list[Evidence] = []
    for ev in evidence:
        key = (ev.signal, tuple(sorted(ev.labels.items())), ev.op, ev.threshold, ev.baseline)
        if key not in seen:
            seen.add(key)
            out.append(ev)
    return out


def _scope(ep: Episode, by_name: dict[str, Rule], node: str, models: list[str]) -> Scope:
    gpus: set[str] = set()
    engines: set[str] = set()
    endpoints: set[str] = set()
    for name, entities in ep.members.items():
        scope = by_name[name].scope.value if name in by_name else ""
        target = {"gpu": gpus, "engine": engines, "endpoint": endpoints}.get(scope)
        if target is not None:
            target.update(e for e in entities if e)
    return Scope(
        node=node,
        gpus=sorted(gpus, key=entity_order),
        engine=",".join(sorted(engines)) or None,
        model=",".join(models) or None,
        endpoint=",".join(sorted(endpoints)) or None,
    )
