"""A replay's incidents as a backtest judges them: events folded into one record per incident, per-rule counts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tailhound.incident import IncidentEvent


@dataclass
class Incident:
    """All events of one incident, folded."""

    incident_id: str
    root_cause: str  # the final one
    severity: str
    rule: str
    opened_at: float
    resolved_at: float | None
    nodes: list[str]
    scope: str
    transient: bool
    rules: list[str]
    #: root cause -> event time of the first event that named it
    named_at: dict[str, float] = field(default_factory=dict)
    events: int = 0
    evidence: list[str] = field(default_factory=list)

    def end(self, default: float) -> float:
        return self.resolved_at if self.resolved_at is not None else default


def fold_incidents(events: Iterable[IncidentEvent]) -> list[Incident]:
    """One :class:`Incident` per incident id, in opening order."""
    out: dict[str, Incident] = {}
    for ev in events:
        inc = out.get(ev.incident_id)
        nodes = [ev.scope.node] if ev.scope.node else list(ev.scope.nodes)
        rules = [r for r in (ev.labels.get("rules") or ev.rule).split(",") if r]
        if inc is None:
            inc = out[ev.incident_id] = Incident(
                incident_id=ev.incident_id,
                root_cause=str(ev.root_cause),
                severity=str(ev.severity),
                rule=ev.rule,
                opened_at=ev.opened_at,
                resolved_at=None,
                nodes=nodes,
                scope=ev.scope.describe(),
                transient=ev.transient,
                rules=rules,
            )
        inc.events += 1
        inc.named_at.setdefault(str(ev.root_cause), ev.ts)
        inc.rules = sorted(set(inc.rules) | set(rules))
        inc.nodes = sorted(set(inc.nodes) | set(nodes))
        if ev.evidence:
            inc.evidence = [e.describe() for e in ev.evidence[:3]]
        if ev.event == "resolved":
            inc.resolved_at = ev.ts
        else:
            inc.root_cause, inc.severity, inc.rule = str(ev.root_cause), str(ev.severity), ev.rule
            inc.scope, inc.transient = ev.scope.describe(), ev.transient
    return list(out.values())


@dataclass
class Replayed:
    """One replay of the recordings through one rule set."""

    label: str
    rules_dir: str
    rule_names: list[str]
    symptoms: set[str]
    events: list[IncidentEvent]
    incidents: list[Incident]
    records: int
    snapshots: int
    seconds: float
    rejected: dict[str, int]


@dataclass
class RuleStats:
    rule: str
    symptom: bool
    incidents: int = 0
    as_root: int = 0
    #: (opened, resolved or None) offsets from the recording start, of the incidents it was part of
    windows: list[tuple[float, float | None]] = field(default_factory=list)


def rule_stats(rep: Replayed, start_ts: float) -> list[RuleStats]:
    stats = {name: RuleStats(name, name in rep.symptoms) for name in rep.rule_names}
    for inc in rep.incidents:
        for name in inc.rules:
            st = stats.setdefault(name, RuleStats(name, name in rep.symptoms))
            st.incidents += 1
            st.as_root += inc.rule == name
            st.windows.append(
                (inc.opened_at - start_ts, None if inc.resolved_at is None else inc.resolved_at - start_ts)
            )
    return sorted(stats.values(), key=lambda s: (-s.incidents, s.rule))
