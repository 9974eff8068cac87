"""Roll-up: one incident per fault, however many nodes it hits (pure).

The node and model stages open one incident per node and per model, so a fleet-wide fault would page once per
node. Incidents are grouped by cause where it spreads (:func:`group_key`: the model for engine-side causes, the
fleet for path-side ones); a group's first incident is the group's, unchanged while it is alone, and others that
open within :data:`JOIN_WINDOW_S` fold into it (``updated``, scope widened, ``scope.nodes``). A residual cause
(``node-degraded``) while its model has another cause open, and a cause another one on the same node explains
(:data:`EXPLAINED_ON_NODE`), are muted. Redelivered member events change nothing; the state holds open groups only.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from tailhound.incident import EvidenceSeries, IncidentEvent, Scope
from tailhound.vocabulary import ROOT_CAUSES, RootCause, highest_severity

from ..causal_rank import PATH_CAUSES, RESIDUAL_CAUSES, rank_of
from ..episode import MAX_EVIDENCE
from .series import Headline, group_series, keep_headline

#: a node incident joins an open group of its cause if it opens at most this long after the group did
JOIN_WINDOW_S = 900.0
FLEET = "fleet"
#: cause -> the causes whose open incident on the same node explains it: the model stage sees across engines
#: what the node stage cannot (a node out of headroom because the balancer overloads it, not the model)
EXPLAINED_ON_NODE: dict[RootCause, frozenset[RootCause]] = {
    RootCause.CAPACITY: frozenset({RootCause.LOAD_IMBALANCE}),
}


def group_key(ev: IncidentEvent) -> str:
    """Where a cause spreads: path-side causes fleet-wide, engine-side ones per model."""
    cause = RootCause(ev.root_cause)
    where = FLEET if cause in PATH_CAUSES or not ev.scope.model else ev.scope.model
    return f"{cause.value}|{where}"


class Group(BaseModel):
    incident_id: str
    key: str
    opened_at: float
    sequence: int = 0
    #: member incident id -> its latest event (JSON-able dict), in joining order
    members: dict[str, IncidentEvent] = Field(default_factory=dict)
    resolved: dict[str, bool] = Field(default_factory=dict)
    #: what the last published event said (cause, severity, scope, rules): an update that changes none
    #: of it is not published
    published: str = ""
    #: chart data (members are kept without theirs): each member's headline line, and the full series of
    #: the member whose evidence the group shows, as of its latest event (tailhound.streams.rollup.series)
    headlines: dict[str, Headline] = Field(default_factory=dict)
    source_series: dict[str, list[EvidenceSeries]] = Field(default_factory=dict)


class RollupState(BaseModel):
    groups: dict[str, Group] = Field(default_factory=dict)
    #: member incident id -> the group's incident id
    member_of: dict[str, str] = Field(default_factory=dict)
    #: member incident id -> the last sequence taken from it
    seen: dict[str, int] = Field(default_factory=dict)
    #: residual incidents explained by an open incident of their model: id -> that incident's id
    muted: dict[str, str] = Field(default_factory=dict)


def rollup(state: RollupState, ev: IncidentEvent) -> list[IncidentEvent]:
    """Take one node- or model-stage event; return the events to publish (often none or one)."""
    if ev.sequence <= state.seen.get(ev.incident_id, 0):
        return []  # redelivered
    state.seen[ev.incident_id] = ev.sequence
    if ev.incident_id in state.muted:
        if ev.event == "resolved":
            del state.muted[ev.incident_id]
            state.seen.pop(ev.incident_id, None)
        return []
    if ev.event == "opened" and (host := _explaining_group(state, ev)) is not None:
        state.muted[ev.incident_id] = host.incident_id
        return []
    gid = state.member_of.get(ev.incident_id)
    group = state.groups.get(gid) if gid else None
    if group is None:
        if ev.event != "opened":
            state.seen.pop(ev.incident_id, None)
            return [ev]  # an incident whose opening this stage never saw (state lost): pass it on
        group = _open_group_for(state, ev)
        if group is None:  # the first of its group: it is the group's incident, as it is
            group = Group(incident_id=ev.incident_id, key=group_key(ev), opened_at=ev.opened_at)
            state.groups[group.incident_id] = group
            state.member_of[ev.incident_id] = group.incident_id
            _keep(group, ev)
            group.resolved[ev.incident_id] = False
            group.sequence = ev.sequence
            return [ev]
        state.member_of[ev.incident_id] = group.incident_id
    _keep(group, ev)
    group.resolved[ev.incident_id] = ev.event == "resolved"
    if len(group.members) == 1:  # still alone: the member's own events are the group's
        group.sequence = ev.sequence
        if ev.event == "resolved":
            _close(state, group)
        return [ev]
    kind = "resolved" if all(group.resolved.values()) else "updated"
    out = _group_event(group, kind, ev.ts)
    said = _signature(out)
    if kind == "updated" and said == group.published:
        return []
    group.sequence += 1
    group.published = said
    out = out.model_copy(update={"sequence": group.sequence})
    if kind == "resolved":
        _close(state, group)
    return [out]


def _keep(group: Group, ev: IncidentEvent) -> None:
    """Store the member's latest event without its chart series (its headline and, while it may be the
    group's source, its series are kept apart)."""
    keep_headline(group.headlines, ev.incident_id, ev)
    if ev.series:
        group.source_series[ev.incident_id] = list(ev.series)
    group.members[ev.incident_id] = ev.model_copy(update={"series": []}) if ev.series else ev


def _signature(ev: IncidentEvent) -> str:
    return "|".join(
        (str(ev.root_cause), str(ev.severity), ev.scope.describe(), str(ev.transient), ev.labels.get("rules", ""))
    )


def _explaining_group(state: RollupState, ev: IncidentEvent) -> Group | None:
    """An open incident of another cause on the same model that explains a residual incident, or one on the
    same node that explains the node's incident (EXPLAINED_ON_NODE)."""
    if RootCause(ev.root_cause) in EXPLAINED_ON_NODE and ev.scope.node and ev.scope.model:
        return _explaining_on_node(state, ev, EXPLAINED_ON_NODE[RootCause(ev.root_cause)])
    if RootCause(ev.root_cause) not in RESIDUAL_CAUSES or not ev.scope.model:
        return None
    for group in state.groups.values():
        cause, _, where = group.key.partition("|")
        if where == ev.scope.model and RootCause(cause) not in RESIDUAL_CAUSES and not all(group.resolved.values()):
            return group
    return None


def _explaining_on_node(state: RollupState, ev: IncidentEvent, causes: frozenset[RootCause]) -> Group | None:
    for group in state.groups.values():
        cause, _, where = group.key.partition("|")
        if RootCause(cause) not in causes or where != ev.scope.model or all(group.resolved.values()):
            continue
        if any(ev.scope.node == m.scope.node or ev.scope.node in m.scope.nodes for m in group.members.values()):
            return group
    return None


def _open_group_for(state: RollupState, ev: IncidentEvent) -> Group | None:
    key = group_key(ev)
    for group in state.groups.values():
        if group.key == key and not all(group.resolved.values()) and ev.opened_at - group.opened_at <= JOIN_WINDOW_S:
            return group
    return None


def _close(state: RollupState, group: Group) -> None:
    del state.groups[group.incident_id]
    for member in group.members:
        state.member_of.pop(member, None)
        state.seen.pop(member, None)


def _group_event(group: Group, kind: str, ts: float) -> IncidentEvent:
    """The group's incident from its members' latest events."""
    members = list(group.members.values())
    open_members = [m for mid, m in group.members.items() if not group.resolved[mid]] or members
    lead = min(open_members, key=lambda m: (rank_of(m.root_cause), m.opened_at, m.incident_id))
    nodes = sorted({n for m in members for n in ([m.scope.node] if m.scope.node else m.scope.nodes)})
    models = sorted({m.scope.model for m in members if m.scope.model})
    cause = RootCause(lead.root_cause)
    where_fleet = group.key.endswith(f"|{FLEET}")
    one_node = len(nodes) == 1 and all(m.scope.node for m in members)  # two findings of one node's fault
    if one_node:
        gpus = sorted({g for m in members for g in m.scope.gpus}, key=lambda g: (len(g), g))
        engines = sorted({e for m in members for e in (m.scope.engine or "").split(",") if e})
        scope = Scope(node=nodes[0], gpus=gpus, engine=",".join(engines) or None, model=",".join(models) or None)
    else:
        scope = Scope(model=None if where_fleet else ",".join(models) or None, nodes=nodes)
    model_member = next((m for m in open_members if not m.scope.node and m.root_cause == lead.root_cause), None)
    source = model_member or lead
    summary = ("resolved: " if kind == "resolved" else "") + f"{ROOT_CAUSES[cause].title} on {scope.describe()}"
    rules = sorted({r for m in members for r in m.labels.get("rules", m.rule).split(",") if r})
    evidence = [e for m in [source, *[m for m in open_members if m is not source]] for e in m.evidence][:MAX_EVIDENCE]
    for mid in [m for m in group.source_series if m != source.incident_id]:
        del group.source_series[mid]  # only the source's series is shown
    open_nodes = {n for m in open_members for n in ([m.scope.node] if m.scope.node else m.scope.nodes)}
    lines = [group.headlines[m] for m in dict.fromkeys([source.incident_id, *group.headlines]) if m in group.headlines]
    series = group_series(group.source_series.get(source.incident_id, []), lines, open_nodes)
    return IncidentEvent(
        incident_id=group.incident_id,
        event=kind,
        sequence=group.sequence,
        ts=ts,  # type: ignore[arg-type]
        root_cause=cause,
        severity=highest_severity(m.severity for m in members),
        opened_at=group.opened_at,
        resolved_at=ts if kind == "resolved" else None,
        scope=scope,
        transient=all(m.transient for m in open_members),
        summary=summary if one_node else summary + f"; {len(nodes)} nodes",
        evidence=evidence,
        actions=list(source.actions),
        rule=source.rule,
        rule_origin=source.rule_origin,
        rules_version=source.rules_version,
        labels={**source.labels, "rules": ",".join(rules), "nodes": ",".join(nodes)},
        series=series,
        candidates=list(source.candidates),
        differential=source.differential,
    )
