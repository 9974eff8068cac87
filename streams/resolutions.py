"""Incidents that close outside correlation: the node went silent (:func:`resolve_gone`) or the rules
changed under an open incident (:func:`reconcile`). Each close says why in its summary and its
``resolution`` label.
"""

from __future__ import annotations

from pydantic import BaseModel

from tailhound.incident import IncidentEvent, Scope
from tailhound.snapshot import Snapshot
from tailhound.vocabulary import ROOT_CAUSES, RootCause, Severity

from .causal_rank import rank_of
from .episode import Episode, Firing, episode_event
from .ruleset.rulefile import Rule, RuleSet

#: label of a `resolved` event that closed an incident outside correlation, and its values: the node
#: stopped sending telemetry, the incident's rule left the rule pack
RESOLUTION_LABEL = "resolution"
NODE_GONE = "node-gone"
RULE_REMOVED = "rule-removed"


class _At(BaseModel):
    """Where and when an event is, for episode_event (which reads a snapshot's ts and node)."""

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
            ev = episode_event("resolved", ep, by_name, {}, _At(ts=ts, node=node), models)  # type: ignore[arg-type]
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


def reconcile(
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
            events.append(episode_event("updated", ep, by_name, firing, snapshot, models))
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
