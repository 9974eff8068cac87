"""Rules: every rule whose signals this snapshot changed (or that holds state) steps its entities -- a
condition that holds makes an entity pending, held for the rule's ``for`` it fires (sooner, down to its ``min_for``,
the further past its bounds it is: :func:`tailhound.streams.ruleset.condition_eval.required_hold`), false for
``keep_firing_for`` (or unseen for ``stale_after_s``) it stops -- then the firing and pending rules are
summed up for correlation. Rules are compiled once per rule set (:mod:`tailhound.streams.ruleset.plan`)."""

from __future__ import annotations

from tailhound.catalog import Catalog

from ..episode import Firing
from ..evidence import rule_evidence
from ..evidence_traces import SeriesTrace, record
from ..node_state import FiringEntity, RuleState
from ..ruleset.condition_eval import EvalContext, required_hold
from ..ruleset.plan import RulePlan, entity_order, plans_for
from .step import Step


def stage(step: Step) -> bool:
    state, ts, ctx, view, updated = step.state, step.snapshot.ts, step.ctx, step.view, step.updated
    assert ctx is not None  # windows ran
    for plan in plans_for(step.rules, step.catalog):
        rs = state.rules.get(plan.name)
        if rs is None:
            if plan.reads.isdisjoint(updated) and not plan.has_absence:
                continue  # nothing it reads changed and it holds no state: stepping it would change nothing
            pending, firing = {}, {}  # a RuleState only if it ends up holding something
        else:
            pending, firing = rs.pending, rs.firing
        if plan.has_absence or any(signal in view for signal in plan.reads):
            _step_entities(pending, firing, plan, ctx, ts, step.catalog, state.traces)
        _expire_stale(pending, firing, ts, step.stale_after_s)
        if not (pending or firing):
            if rs is not None:
                del state.rules[plan.name]
        elif rs is None:
            rs = state.rules[plan.name] = RuleState()
            rs.pending.update(pending)
            rs.firing.update(firing)
    if len(state.rules) > len(step.rules.rules) or any(n not in step.rules.index for n in state.rules):
        for name in [n for n in state.rules if n not in step.rules.index]:
            del state.rules[name]  # its rule is gone (a reload): correlation resolves what it held open
    step.firing = {
        name: Firing(
            entities=sorted(rs.firing, key=entity_order),
            since=min(f.since for f in rs.firing.values()),
            evidence=[ev for e in sorted(rs.firing, key=entity_order) for ev in rs.firing[e].evidence],
            fired=_first_fired(rs, step.rules.index[name].for_),
        )
        for name, rs in state.rules.items()
        if rs.firing
    }
    step.pending = {name for name, rs in state.rules.items() if set(rs.pending) - set(rs.firing)}
    return True


def _first_fired(rs: RuleState, for_s: float) -> float:
    """When the rule's first firing entity started firing (`since` + `for` where that was not recorded)."""
    return min(f.since + for_s if f.fired_at is None else f.fired_at for f in rs.firing.values())


def _step_entities(
    pending: dict[str, float],
    firing: dict[str, FiringEntity],
    plan: RulePlan,
    ctx: EvalContext,
    ts: float,
    catalog: Catalog,
    traces: dict[str, SeriesTrace],
) -> None:
    """Step a rule's entity states (its RuleState's `pending` and `firing`) at `ts`; the evidence of every
    entity whose condition holds goes into the node's chart traces."""
    rule = plan.rule
    for e in plan.entities(ctx):
        verdict = plan.check(ctx, e)
        if verdict is None:
            continue  # a signal is missing for this entity: no news, keep the state as it is
        if verdict:
            since = pending.setdefault(e, ts)
            evidence = rule_evidence(rule, ctx, e, ts - since, catalog)
            record(traces, rule.name, rule.for_, rule.scope.value, e, since, evidence, ctx)
            if e in firing:
                firing[e].last_true = ts
                firing[e].evidence = evidence
            elif ts - since >= required_hold(rule.when, ctx, e, rule.scope.value, rule.for_, rule.min_for, ts - since):
                firing[e] = FiringEntity(since=since, last_true=ts, evidence=evidence, fired_at=ts)
        else:
            pending.pop(e, None)
            f = firing.get(e)
            if f is not None and ts - f.last_true >= rule.keep_firing_for:
                del firing[e]
            elif f is not None:  # still firing (keep_firing_for): the chart shows the recovery
                record(
                    traces,
                    rule.name,
                    rule.for_,
                    rule.scope.value,
                    e,
                    f.since,
                    rule_evidence(rule, ctx, e, ts - f.since, catalog),
                    ctx,
                )


def _expire_stale(pending: dict[str, float], firing: dict[str, FiringEntity], ts: float, stale_after_s: float) -> None:
    if firing:
        for e in [e for e, f in firing.items() if ts - f.last_true > max(stale_after_s, 0.0)]:
            del firing[e]
            pending.pop(e, None)
    if pending:
        for e in [e for e, since in pending.items() if e not in firing and ts - since > stale_after_s * 4]:
            del pending[e]
