"""Rule evaluation as a pure state machine: ``evaluate(state, snapshot, rules) -> (state, events)``.

The Faust agent keeps one :class:`NodeState` per node in a changelogged table and calls this function
for every snapshot; replay and tests call it directly. Everything runs in event time (``snapshot.ts``).

Per rule and node:
- an entity (a GPU, an engine, the node) whose condition holds becomes *pending*; once it has held
  for the rule's ``for`` it is *firing*;
- it stops firing when the condition has been false for ``keep_firing_for``, or when it has not been
  seen for ``stale_after_s`` (its source went away);
- the firing entities of a rule on a node form one incident: it opens with the first entity, is
  *updated* when another entity joins (the scope only grows), and *resolves* when none is firing.

Snapshots older than the newest already seen from the same source and node are ignored, so a
re-delivered message (at-least-once) changes nothing and emits nothing.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tailhound.catalog import Catalog, default_catalog
from tailhound.incident import Evidence, IncidentEvent, Scope, incident_id
from tailhound.snapshot import Snapshot
from tailhound.vocabulary import ROOT_CAUSES

from .ruleset import AllOf, AnyOf, NotOf, Rule, RuleSet, Threshold
from .signals import SignalValues, decode_clock_event_reasons, extract

DEFAULT_STALE_AFTER_S = 300.0


class FiringEntity(BaseModel):
    since: float
    last_true: float
    evidence: list[Evidence] = Field(default_factory=list)


class OpenIncident(BaseModel):
    incident_id: str
    opened_at: float
    sequence: int = 1
    entities: list[str] = Field(default_factory=list)


class RuleState(BaseModel):
    pending: dict[str, float] = Field(default_factory=dict)
    firing: dict[str, FiringEntity] = Field(default_factory=dict)
    incident: OpenIncident | None = None

    def is_idle(self) -> bool:
        return not (self.pending or self.firing or self.incident)


class NodeState(BaseModel):
    node: str
    last_ts: dict[str, float] = Field(default_factory=dict, description="newest ts seen per source")
    rules: dict[str, RuleState] = Field(default_factory=dict)


def evaluate(
    state: NodeState | None,
    snapshot: Snapshot,
    rules: RuleSet,
    catalog: Catalog | None = None,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
) -> tuple[NodeState, list[IncidentEvent]]:
    state = state.model_copy(deep=True) if state else NodeState(node=snapshot.node)
    last = state.last_ts.get(snapshot.source)
    if last is not None and snapshot.ts <= last:
        return state, []
    state.last_ts[snapshot.source] = snapshot.ts
    catalog = catalog or default_catalog()
    values = extract(snapshot, catalog)
    events: list[IncidentEvent] = []
    for rule in rules.rules:
        signals = {t.signal for t in rule.thresholds()}
        if not signals & values.keys() and rule.name not in state.rules:
            continue
        rs = state.rules.setdefault(rule.name, RuleState())
        if signals & values.keys():
            _step_entities(rs, rule, values, snapshot.ts, catalog)
        _expire_stale(rs, snapshot.ts, stale_after_s)
        event = _incident_transition(rs, rule, snapshot)
        if event:
            events.append(event)
        if rs.is_idle():
            del state.rules[rule.name]
    return state, events


def _step_entities(rs: RuleState, rule: Rule, values: SignalValues, ts: float, catalog: Catalog) -> None:
    entities = sorted({e for t in rule.thresholds() for e in values.get(t.signal, {})}, key=_entity_order)
    for e in entities:
        verdict = _holds(rule.when, values, e)
        if verdict is None:
            continue  # a signal is missing for this entity: no news, keep the state as it is
        if verdict:
            since = rs.pending.setdefault(e, ts)
            evidence = _evidence(rule, values, e, ts - since, catalog)
            if e in rs.firing:
                rs.firing[e].last_true = ts
                rs.firing[e].evidence = evidence
            elif ts - since >= rule.for_:
                rs.firing[e] = FiringEntity(since=since, last_true=ts, evidence=evidence)
        else:
            rs.pending.pop(e, None)
            f = rs.firing.get(e)
            if f is not None and ts - f.last_true >= rule.keep_firing_for:
                del rs.firing[e]


def _expire_stale(rs: RuleState, ts: float, stale_after_s: float) -> None:
    for e in [e for e, f in rs.firing.items() if ts - f.last_true > max(stale_after_s, 0.0)]:
        del rs.firing[e]
        rs.pending.pop(e, None)
    for e in [e for e, since in rs.pending.items() if e not in rs.firing and ts - since > stale_after_s * 4]:
        del rs.pending[e]


def _holds(cond: object, values: SignalValues, entity: str) -> bool | None:
    if isinstance(cond, Threshold):
        v = values.get(cond.signal, {}).get(entity)
        return None if v is None else cond.holds(v)
    if isinstance(cond, AllOf):
        results = [_holds(c, values, entity) for c in cond.all]
        if any(r is False for r in results):
            return False
        return None if any(r is None for r in results) else True
    if isinstance(cond, AnyOf):
        results = [_holds(c, values, entity) for c in cond.any]
        if any(r is True for r in results):
            return True
        return None if any(r is None for r in results) else False
    if isinstance(cond, NotOf):
        r = _holds(cond.not_, values, entity)
        return None if r is None else not r
    raise TypeError(f"unknown condition {cond!r}")


def _evidence(rule: Rule, values: SignalValues, entity: str, held_s: float, catalog: Catalog) -> list[Evidence]:
    labels = {rule.scope.value: entity} if entity else {}
    out = []
    for t in rule.thresholds():
        v = values.get(t.signal, {}).get(entity)
        if v is not None:
            spec = catalog.spec(t.signal)
            out.append(Evidence(signal=t.signal, value=round(v, 4), op=t.symbol, threshold=t.threshold,
                                unit=spec.unit if spec else "", window_s=held_s, labels=labels))
    for signal in rule.context:
        v = values.get(signal, {}).get(entity)
        if v is not None:
            spec = catalog.spec(signal)
            detail = _DETAIL[signal](v) if signal in _DETAIL else ""
            out.append(Evidence(signal=signal, value=round(v, 4), op="=", unit=spec.unit if spec else "",
                                labels=labels, detail=detail))
    return out


def _clock_event_detail(mask: float) -> str:
    return f"0x{int(mask):x} (" + (", ".join(decode_clock_event_reasons(mask)) or "no clock event reason") + ")"


#: How to spell out a context value for a person.
_DETAIL = {"gpu.clock_event_reasons": _clock_event_detail}


def _incident_transition(rs: RuleState, rule: Rule, snapshot: Snapshot) -> IncidentEvent | None:
    entities = sorted(rs.firing, key=_entity_order)
    inc = rs.incident
    if entities and inc is None:
        opened_at = snapshot.ts
        rs.incident = OpenIncident(
            incident_id=incident_id(rule.name, snapshot.node, opened_at), opened_at=opened_at, entities=entities
        )
        return _event("opened", rs.incident, rule, snapshot, rs)
    if inc is None:
        return None
    if not entities:
        inc.sequence += 1
        rs.incident = None
        return _event("resolved", inc, rule, snapshot, rs)
    grown = sorted(set(inc.entities) | set(entities), key=_entity_order)
    if grown != inc.entities:  # the scope only grows: a recovered GPU stays part of the incident
        inc.sequence += 1
        inc.entities = grown
        return _event("updated", inc, rule, snapshot, rs)
    return None


def _event(kind: str, inc: OpenIncident, rule: Rule, snapshot: Snapshot, rs: RuleState) -> IncidentEvent:
    scope = _scope(rule, snapshot, inc.entities)
    evidence = [ev for e in inc.entities if e in rs.firing for ev in rs.firing[e].evidence]
    title = ROOT_CAUSES[rule.root_cause].title if rule.root_cause else rule.name
    verb = {"opened": "", "updated": "", "resolved": "resolved: "}[kind]
    return IncidentEvent(
        incident_id=inc.incident_id,
        event=kind,  # type: ignore[arg-type]
        sequence=inc.sequence,
        ts=snapshot.ts,
        root_cause=rule.root_cause,  # type: ignore[arg-type]
        severity=rule.severity,
        opened_at=inc.opened_at,
        resolved_at=snapshot.ts if kind == "resolved" else None,
        scope=scope,
        transient=rule.is_transient,
        summary=f"{verb}{title} on {scope.describe()}",
        evidence=evidence,
        actions=[render_action(a, scope, evidence) for a in rule.actions],
        rule=rule.name,
        labels=dict(rule.labels),
    )


def _scope(rule: Rule, snapshot: Snapshot, entities: list[str]) -> Scope:
    model = snapshot.labels.get("model_name")
    engine = snapshot.labels.get("engine")
    if rule.scope.value == "gpu":
        return Scope(node=snapshot.node, gpus=entities, model=model)
    if rule.scope.value == "engine":
        return Scope(node=snapshot.node, engine=",".join(entities) or engine, model=model)
    return Scope(node=snapshot.node, model=model)


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_.]*)\}")


def render_action(template: str, scope: Scope, evidence: list[Evidence]) -> str:
    """Fill ``{node}``, ``{gpus}``, ``{model}``, ``{engine}`` and ``{<signal>}`` (max over evidence)."""
    values: dict[str, str] = {
        "node": scope.node or "?",
        "gpus": ",".join(scope.gpus) or "?",
        "model": scope.model or "?",
        "engine": scope.engine or "?",
    }
    for ev in evidence:
        cur = values.get(ev.signal)
        if cur is None or float(cur) < ev.value:
            values[ev.signal] = f"{ev.value:g}"
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def _entity_order(e: str) -> tuple[int, str]:
    return (int(e), "") if e.isdigit() else (1 << 30, e)
