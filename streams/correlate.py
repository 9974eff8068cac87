"""Firing rules of one node -> incidents: grouping by topology and time, causal ranking, symptoms.

Every rule steps its entities on its own (pending -> firing, see :mod:`tailhound.streams.evaluator`); this module
decides what a person is told:

- cause rules that fire on the same node at the same time and belong to the same *domain* become
  ONE incident. Domains: ``gpu`` (everything that slows the engine from the inside: thermal, NVLink,
  PCIe, memory bandwidth, KV cache, head-of-line blocking, retry storms, capacity) and ``path``
  (between the user and the engine: network path, ingress, health checks, stream buffering);
- its root cause is the firing cause ranked first in :data:`CAUSAL_RANK`: thermal throttling explains
  the TPOT rise that explains the queue growth that explains the P99 breach. A better-ranked cause
  that starts firing later takes over (an ``updated`` event says so);
- symptom rules (``symptom: true``) never open an incident of their own: they attach to the open
  incident of the node (their evidence is added). A symptom with ``fallback_root_cause`` that fires
  alone for ``attach_grace`` opens an incident with that cause (a P99 breach with a growing queue and
  no GPU-side cause is a capacity problem);
- transient vs persistent: an incident whose causes are all usually transient (network-side) is
  marked transient; if it is still open after :data:`PERSISTENT_AFTER_S` it becomes persistent;
- every event carries its ranked candidate causes, and the check where two stay close (:mod:`.candidates`).
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from tailhound.incident import Candidate, Differential, Evidence, IncidentEvent, Scope, incident_id
from tailhound.snapshot import Snapshot
from tailhound.vocabulary import ROOT_CAUSES, RootCause, Severity, highest_severity

from .candidates import Observe, diagnose
from .evidence import render_action
from .ruleset.rulefile import Rule, RuleSet

#: Most fundamental first: a cause explains the ones after it.
CAUSAL_RANK: tuple[RootCause, ...] = (
    RootCause.GPU_HARDWARE_ERROR,  # a failed GPU explains every slowdown and queue on its node
    RootCause.GPU_THERMAL_THROTTLE,
    RootCause.NVLINK_DEGRADED,
    RootCause.PCIE_BOTTLENECK,
    RootCause.GPU_MEMORY_BANDWIDTH,
    RootCause.KV_CACHE_PRESSURE,
    RootCause.HEAD_OF_LINE_BLOCKING,
    # traffic shape: longer outputs at the same arrivals explain a slower, queueing engine
    RootCause.GENERATION_LENGTH_GROWTH,
    RootCause.RETRY_STORM,
    # traffic balance: an engine with more than its share queues while its peers idle (not capacity)
    RootCause.LOAD_IMBALANCE,
    RootCause.NODE_DEGRADED,
    RootCause.CAPACITY,
    RootCause.INGRESS_SATURATION,
    RootCause.NETWORK_PATH,
    RootCause.HEALTH_CHECK_FLAPPING,
    RootCause.STREAM_BUFFERING,
)
PATH_CAUSES = frozenset(
    {RootCause.INGRESS_SATURATION, RootCause.NETWORK_PATH, RootCause.HEALTH_CHECK_FLAPPING, RootCause.STREAM_BUFFERING}
)
#: causes that name what is left when nothing specific explains a slowdown: they open an incident alone,
#: but never keep another cause's incident open (their latency windows lag the fault by minutes), and
#: once that incident resolves they stay explained until they stop firing
RESIDUAL_CAUSES = frozenset({RootCause.NODE_DEGRADED})
#: after an incident of a domain resolves, residual causes of that domain stay quiet this long: the
#: aftermath of a fault (a backlog draining at full batch, 5-minute latency windows catching up) looks
#: like a node that got slower at its usual load
AFTERMATH_S = 600.0
#: orphans key (prefix + domain) -> when the domain's last incident resolved
_AFTERMATH = "resolved@"
PERSISTENT_AFTER_S = 600.0
#: The settle time: a cause that could be explained by a better-ranked cause still pending waits this long
#: (from when it starts firing) before it opens the incident on its own (then the better cause takes over
#: with an `updated` event). Chosen on the scenario suite (`python -m bench.settle_sweep`, BENCHMARKS.md):
#: 120 s is the smallest value with every first cause right, +0.25 min of median detection.
CORRELATION_WAIT_S = 120.0
#: orphans[rule] == EXPLAINED: the symptom belonged to an incident that resolved; it is not an orphan
#: (no fallback incident) until it stops firing.
EXPLAINED = -1.0
MAX_EVIDENCE = 48
KEPT_EVIDENCE = 12


def domain_of(cause: RootCause | str) -> str:
    return "path" if RootCause(cause) in PATH_CAUSES else "gpu"


def rank_of(cause: RootCause | str) -> int:
    return CAUSAL_RANK.index(RootCause(cause))


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


def correlate(
    episodes: dict[str, Episode],
    orphans: dict[str, float],
    firing: dict[str, Firing],
    rules: RuleSet,
    snapshot: Snapshot,
    models: list[str],
    pending: set[str] | frozenset[str] = frozenset(),
    observe: Observe | None = None,
) -> list[IncidentEvent]:
    """Update the node's open incidents from what fires now; returns the lifecycle events.

    `pending`: rules that hold, not yet for their `for`; `observe`: what a quiet rule compares (:mod:`.candidates`)."""
    by_name = rules.index
    events: list[IncidentEvent] = (
        _reconcile(episodes, by_name, firing, snapshot, models)
        if any(ep.root_rule not in by_name or any(m not in by_name for m in ep.members) for ep in episodes.values())
        else []
    )
    held = False  # a cause fires but waits for a better one: no fallback incident meanwhile
    causes = {
        n: f
        for n, f in firing.items()
        if by_name[n].root_cause is not None
        and orphans.get(n) != EXPLAINED
        and not _in_aftermath(by_name[n], orphans, snapshot.ts)
    }
    symptoms = {n: f for n, f in firing.items() if by_name[n].symptom}
    for domain in ("gpu", "path"):
        mine = {n: f for n, f in causes.items() if domain_of(by_name[n].root_cause) == domain}  # type: ignore[arg-type]
        ep = episodes.get(domain)
        if ep is not None and ep.fallback:
            if mine:  # a real cause explains what the symptom's fallback stood for
                ep.fallback = False
            elif ep.root_rule in symptoms:
                mine = {ep.root_rule: symptoms[ep.root_rule]}
        if ep is None and mine and _wait_for_better(mine, pending, by_name, snapshot.ts):
            held = True
            continue
        if ep is None and mine:
            ep = _open(domain, mine, by_name, snapshot)
            episodes[domain] = ep
            _attach(ep, mine, {})
            _attach(ep, symptoms if domain == _symptom_home(episodes) else {}, {})
            events.append(_event("opened", ep, by_name, firing, snapshot, models, pending, observe))
        elif ep is not None and not _keeps_open(ep, mine, by_name):
            ep.sequence += 1
            events.append(_event("resolved", ep, by_name, firing, snapshot, models))
            del episodes[domain]
            orphans[_AFTERMATH + domain] = snapshot.ts
            for name in ep.members:
                if name in symptoms or name in mine:  # still draining (a queue after its cause): explained
                    orphans[name] = EXPLAINED
        elif ep is not None:
            changed = _attach(ep, mine, {})
            if domain == _symptom_home(episodes):
                changed |= _attach(ep, symptoms, {})
            real = {n: f for n, f in mine.items() if by_name[n].root_cause is not None}
            if real:
                best = min(real, key=lambda n: (rank_of(by_name[n].root_cause), real[n].since, n))  # type: ignore[arg-type]
                if best != ep.root_rule and (
                    by_name[ep.root_rule].symptom
                    or rank_of(by_name[best].root_cause)  # type: ignore[arg-type]
                    < rank_of(ep.root_cause)
                ):
                    ep.root_cause, ep.root_rule, changed = str(by_name[best].root_cause), best, True
            if ep.transient and snapshot.ts - ep.opened_at >= PERSISTENT_AFTER_S:
                ep.transient, changed = False, True
            if changed:
                ep.sequence += 1
                events.append(_event("updated", ep, by_name, firing, snapshot, models, pending, observe))
    if not held:
        events += _orphan_symptoms(
            episodes,
            orphans,
            symptoms,
            by_name,
            snapshot,
            firing,
            models,
            causes_pending=any(n in by_name and by_name[n].root_cause is not None for n in pending),
        )
    return events


def _in_aftermath(rule: Rule, orphans: dict[str, float], now: float) -> bool:
    """A residual cause shortly after an incident of its domain resolved on the node."""
    if rule.root_cause not in RESIDUAL_CAUSES:
        return False
    resolved = orphans.get(_AFTERMATH + domain_of(rule.root_cause))  # type: ignore[arg-type]
    return resolved is not None and now - resolved < AFTERMATH_S


def _keeps_open(ep: Episode, mine: dict[str, Firing], by_name: dict[str, Rule]) -> bool:
    """Whether the firing causes keep `ep` open: any of them, but residual causes only their own incident."""
    if RootCause(ep.root_cause) in RESIDUAL_CAUSES:
        return bool(mine)
    return any(by_name[n].root_cause not in RESIDUAL_CAUSES for n in mine)


def _wait_for_better(
    mine: dict[str, Firing], pending: set[str] | frozenset[str], by_name: dict[str, Rule], now: float
) -> bool:
    """Hold the opening while a better-ranked cause is pending, for at most CORRELATION_WAIT_S after the
    first cause started firing; a residual cause waits as long as a better one is pending (which is at most
    that rule's `for`: then it fires or lets go)."""
    best = min(rank_of(by_name[n].root_cause) for n in mine)  # type: ignore[arg-type]
    better_pending = any(
        by_name[n].root_cause is not None and rank_of(by_name[n].root_cause) < best  # type: ignore[arg-type]
        for n in pending
        if n in by_name and n not in mine
    )
    if better_pending and all(by_name[n].root_cause in RESIDUAL_CAUSES for n in mine):
        return True  # what is left when nothing specific explains it waits for the specific cause to decide
    first = min(
        f.since + by_name[n].for_ if f.fired is None else f.fired for n, f in mine.items()
    )  # when the first cause started firing
    return better_pending and now - first < CORRELATION_WAIT_S


def _symptom_home(episodes: dict[str, Episode]) -> str | None:
    """Symptoms (latency, queues) attach to the engine-side incident first, else the path one."""
    return "gpu" if "gpu" in episodes else ("path" if "path" in episodes else None)


def _open(domain: str, mine: dict[str, Firing], by_name: dict[str, Rule], snapshot: Snapshot) -> Episode:
    best = min(mine, key=lambda n: (rank_of(by_name[n].root_cause), mine[n].since, n))  # type: ignore[arg-type]
    transient = all(by_name[n].is_transient for n in mine)
    return Episode(
        incident_id=incident_id(domain, snapshot.node, snapshot.ts),
        domain=domain,
        opened_at=snapshot.ts,
        root_cause=str(by_name[best].root_cause),
        root_rule=best,
        transient=transient,
    )


def _attach(ep: Episode, firing: dict[str, Firing], _unused: dict) -> bool:
    changed = False
    for name, f in firing.items():
        have = set(ep.members.get(name, []))
        grown = have | set(f.entities)
        if grown != have or name not in ep.members:
            ep.members[name] = sorted(grown, key=_entity_order)
            changed = True
    return changed


def _orphan_symptoms(
    episodes: dict[str, Episode],
    orphans: dict[str, float],
    symptoms: dict[str, Firing],
    by_name: dict[str, Rule],
    snapshot: Snapshot,
    firing: dict[str, Firing],
    models: list[str],
    causes_pending: bool = False,
) -> list[IncidentEvent]:
    """Symptoms firing with no incident to attach to: wait `attach_grace` (and while a cause rule is pending,
    which lasts at most that rule's `for`: the cause will explain them), then open with the fallback."""
    for name in [
        n
        for n in orphans
        if not n.startswith(_AFTERMATH) and (n not in firing or (episodes and orphans[n] != EXPLAINED))
    ]:
        del orphans[name]
    for name in [n for n in orphans if n.startswith(_AFTERMATH) and snapshot.ts - orphans[n] >= AFTERMATH_S]:
        del orphans[name]
    if episodes:
        return []
    events = []
    for name, f in symptoms.items():
        rule = by_name[name]
        since = orphans.setdefault(name, snapshot.ts)
        if since == EXPLAINED or rule.fallback_root_cause is None or snapshot.ts - since < rule.attach_grace:
            continue
        if causes_pending:  # a cause is about to fire (pending: held for less than its `for`): it explains them
            continue
        domain = domain_of(rule.fallback_root_cause)
        if domain in episodes:
            continue
        ep = Episode(
            incident_id=incident_id(domain, snapshot.node, snapshot.ts),
            domain=domain,
            opened_at=snapshot.ts,
            root_cause=str(rule.fallback_root_cause),
            root_rule=name,
            fallback=True,
            transient=rule.is_transient,
            members={name: sorted(f.entities, key=_entity_order)},
        )
        episodes[domain] = ep
        del orphans[name]
        events.append(_event("opened", ep, by_name, firing, snapshot, models))
    return events


def _event(
    kind: str,
    ep: Episode,
    by_name: dict[str, Rule],
    firing: dict[str, Firing],
    snapshot: Snapshot,
    models: list[str],
    pending: set[str] | frozenset[str] = frozenset(),
    observe: Observe | None = None,
) -> IncidentEvent:
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
        gpus=sorted(gpus, key=_entity_order),
        engine=",".join(sorted(engines)) or None,
        model=",".join(models) or None,
        endpoint=",".join(sorted(endpoints)) or None,
    )


def _entity_order(e: str) -> tuple[int, str]:
    return (int(e), "") if e.isdigit() else (1 << 30, e)


#: label of a `resolved` event that closed an incident because its node stopped sending telemetry
RESOLUTION_LABEL = "resolution"
NODE_GONE = "node-gone"


class _At(BaseModel):
    """Where and when an event is, for _event (which reads a snapshot's ts and node)."""

    ts: float
    node: str


def resolve_gone(
    episodes: dict[str, Episode], rules: RuleSet, node: str, models: list[str], ts: float, last_seen: float
) -> list[IncidentEvent]:
    """The node sent nothing since `last_seen` (it is expired at `ts`): every open incident resolves with a
    "node gone" event (label ``resolution: node-gone``, the summary says so); `episodes` ends empty."""
    by_name = rules.index
    silent = f"node gone: no telemetry from {node} for {max(ts - last_seen, 0.0) / 60:.0f} min"
    events = []
    for domain in sorted(episodes):
        ep = episodes.pop(domain)
        ep.sequence += 1
        if ep.root_rule in by_name and all(n in by_name for n in ep.members):
            ev = _event("resolved", ep, by_name, {}, _At(ts=ts, node=node), models)  # type: ignore[arg-type]
        else:  # a rule of the incident is gone from the rule set (changed since): what the episode says
            ev = IncidentEvent(
                incident_id=ep.incident_id,
                event="resolved",
                sequence=ep.sequence,
                ts=ts,
                root_cause=RootCause(ep.root_cause),
                severity=Severity.WARNING,
                opened_at=ep.opened_at,
                resolved_at=ts,
                scope=Scope(node=node, model=",".join(models) or None),
                transient=ep.transient,
                summary=f"resolved: {ep.root_cause} on node {node}",
                evidence=list(ep.evidence),
                rule=ep.root_rule,
                labels={"rules": ",".join(ep.members)},
            )
        summary = ev.summary.removeprefix("resolved: ")
        events.append(
            ev.model_copy(
                update={
                    "summary": f"resolved ({silent}): {summary}",
                    "labels": {**ev.labels, RESOLUTION_LABEL: NODE_GONE},
                }
            )
        )
    return events


RULE_REMOVED = "rule-removed"


def _reconcile(
    episodes: dict[str, Episode],
    by_name: dict[str, Rule],
    firing: dict[str, Firing],
    snapshot: Snapshot,
    models: list[str],
) -> list[IncidentEvent]:
    """After a rule reload: rules that are gone leave their incidents. An incident whose root rule is gone
    takes its best remaining cause as root (``updated``), or, with none left, resolves (label
    ``resolution: rule-removed``, the summary says so)."""
    events = []
    for domain in sorted(episodes):
        ep = episodes[domain]
        gone = [m for m in ep.members if m not in by_name]
        for m in gone:
            del ep.members[m]
        if ep.root_rule in by_name:
            continue
        causes = [m for m in ep.members if by_name[m].root_cause is not None]
        ep.sequence += 1
        if causes:
            best = min(causes, key=lambda n: (rank_of(by_name[n].root_cause), n))  # type: ignore[arg-type]
            ep.root_rule, ep.root_cause = best, str(by_name[best].root_cause)
            events.append(_event("updated", ep, by_name, firing, snapshot, models))
            continue
        del episodes[domain]
        scope = Scope(node=snapshot.node, model=",".join(models) or None)
        why = f"its rule {ep.root_rule} was removed from the rule pack"
        events.append(
            IncidentEvent(
                incident_id=ep.incident_id,
                event="resolved",
                sequence=ep.sequence,
                ts=snapshot.ts,
                root_cause=RootCause(ep.root_cause),
                severity=Severity.WARNING,
                opened_at=ep.opened_at,
                resolved_at=snapshot.ts,
                scope=scope,
                transient=ep.transient,
                summary=f"resolved ({why}): {ROOT_CAUSES[RootCause(ep.root_cause)].title} on {scope.describe()}",
                evidence=list(ep.evidence),
                rule=ep.root_rule,
                labels={"rules": ",".join(sorted({ep.root_rule, *gone})), RESOLUTION_LABEL: RULE_REMOVED},
            )
        )
    return events
