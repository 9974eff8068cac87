"""Differential diagnosis of one incident (pure): its ranked candidate causes, the evidence for and against each,
and, where the lead and the runner-up stay close, the one check that tells them apart.

Candidates are the root cause, the other causes of its domain firing or pending on the node, and the root cause's
known look-alike (:data:`DIFFERENTIALS`). Each is scored by *coverage* (the share of firing rules it explains, by
:data:`~tailhound.streams.correlate.CAUSAL_RANK`) times *support* (the share of its own judging rules that fire).
The root cause stays the one correlation chose, so a score never changes what is paged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tailhound.catalog import Catalog
from tailhound.incident import (
    FINDING_EVIDENCE,
    MAX_CANDIDATES,
    MAX_FINDINGS,
    Candidate,
    Differential,
    Evidence,
    RuleFinding,
)
from tailhound.vocabulary import RootCause

from .evidence import rule_evidence
from .ruleset.condition_eval import EvalContext
from .ruleset.plan import RulePlan, plans_for
from .ruleset.rulefile import Rule, RuleSet

#: rule name, the incident's entities -> what the rule compares now (empty: it cannot judge the node)
Observe = Callable[[str, list[str]], list[Evidence]]
PENDING_WEIGHT = 0.5


@dataclass(frozen=True)
class LookAlike:
    """Two causes the recorded signals cannot tell apart."""

    why: str
    check: str
    #: the first cause's own evidence is the second's too: whenever it leads, the second is its runner-up
    shadowed_by: RootCause | None = None


DIFFERENTIALS: dict[frozenset[RootCause], LookAlike] = {
    frozenset({RootCause.RETRY_STORM, RootCause.CAPACITY}): LookAlike(
        why="Rejections (429/503) with more requests than usual come from clients retrying and from new users "
        "alike: request counters only export their sum, and an engine with a bounded queue (TGI "
        "--max-concurrent-requests) answers a surge with 429s.",
        check="Compare the 429 rate and requests per client IP (or API key) at the ingress with an hour "
        "ago: a retry storm is the usual clients each resending rejected requests (the same request "
        "ids or bodies again within seconds, client retry counters up), a surge is more distinct "
        "clients at their usual per-client rate.",
        shadowed_by=RootCause.RETRY_STORM,
    ),
    frozenset({RootCause.LOAD_IMBALANCE, RootCause.CAPACITY}): LookAlike(
        why="One engine queueing while the model's total load is high reads as both an unbalanced balancer "
        "and a model short of replicas.",
        check="Compare requests per second per upstream at the load balancer (nginx upstream / Envoy "
        "upstream_rq per host): an imbalance gives one replica well over 1/N of the requests while the "
        "others idle, a capacity shortage keeps every replica near its share and busy.",
    ),
}


def look_alike(a: RootCause | str, b: RootCause | str) -> LookAlike | None:
    return DIFFERENTIALS.get(frozenset({RootCause(a), RootCause(b)}))


def diagnose(
    lead: RootCause,
    domain_of: Callable[[RootCause], str],
    rank_of: Callable[[RootCause], int],
    members: dict[str, list[str]],
    firing: dict[str, list[Evidence]],
    pending: Iterable[str],
    by_name: dict[str, Rule],
    observe: Observe | None = None,
) -> tuple[list[Candidate], Differential | None]:
    """The incident's ranked candidates (the lead first) and, where the runner-up is its look-alike, the
    differential."""
    domain = domain_of(lead)
    pending = set(pending)
    entities = sorted({e for ents in members.values() for e in ents})
    fired = sorted(n for n in members if n in firing and n in by_name) or sorted(members)
    causes: set[RootCause] = {lead}
    for n in {*firing, *pending}:
        cause = by_name[n].root_cause if n in by_name else None
        if cause is not None and domain_of(cause) == domain:
            causes.add(RootCause(cause))
    shadow = [c for c in RootCause if c != lead and (la := look_alike(lead, c)) is not None and la.shadowed_by == lead]
    causes.update(shadow)
    scored = {c: _candidate(c, fired, firing, pending, by_name, entities, rank_of, observe) for c in causes}
    others = sorted((c for c in causes if c != lead), key=lambda c: (c not in shadow, -scored[c].score, rank_of(c)))
    ranked = [scored[lead], *(scored[c] for c in others)][:MAX_CANDIDATES]
    differential = None
    if len(ranked) > 1 and (la := look_alike(lead, ranked[1].root_cause)) is not None:
        differential = Differential(lead=lead, runner_up=ranked[1].root_cause, why=la.why, check=la.check)
    return ranked, differential


def _candidate(
    cause: RootCause,
    fired: list[str],
    firing: dict[str, list[Evidence]],
    pending: set[str],
    by_name: dict[str, Rule],
    entities: list[str],
    rank_of: Callable[[RootCause], int],
    observe: Observe | None,
) -> Candidate:
    unexplained = [n for n in fired if not _explains(cause, by_name.get(n), rank_of)]
    coverage = 1.0 - len(unexplained) / len(fired) if fired else 1.0
    supports: list[RuleFinding] = []
    against: list[RuleFinding] = []
    weight = 0.0
    for name in sorted(n for n, r in by_name.items() if r.root_cause == cause):
        state = "firing" if name in firing else ("pending" if name in pending else "quiet")
        values = firing[name] if name in firing else (observe(name, entities) if observe is not None else [])
        if state == "quiet" and not values:
            continue  # it cannot judge this node (signals absent, another scope): neither for nor against
        finding = RuleFinding(rule=name, state=state, evidence=values[:FINDING_EVIDENCE])  # type: ignore[arg-type]
        (against if state == "quiet" else supports).append(finding)
        weight += 1.0 if state == "firing" else (PENDING_WEIGHT if state == "pending" else 0.0)
    judged = len(supports) + len(against)
    support = weight / judged if judged else 0.0
    return Candidate(
        root_cause=cause,
        score=round(coverage * support, 3),
        supports=supports[:MAX_FINDINGS],
        against=against[:MAX_FINDINGS],
        unexplained=unexplained[: MAX_FINDINGS * 2],
    )


def _explains(cause: RootCause, rule: Rule | None, rank_of: Callable[[RootCause], int]) -> bool:
    """A cause explains its own rules, every symptom, and the causes ranked after it."""
    if rule is None or rule.symptom or rule.root_cause is None:
        return True
    return RootCause(rule.root_cause) == cause or rank_of(RootCause(rule.root_cause)) > rank_of(cause)


def observer(rules: RuleSet, ctx: EvalContext | None, catalog: Catalog) -> Observe | None:
    """What a rule compares now on the node, for the incident's entities (else the first it can judge)."""
    if ctx is None:
        return None
    plans: dict[str, RulePlan] = {}  # filled on the first call: most snapshots make no incident event

    def observe(name: str, entities: list[str]) -> list[Evidence]:
        if not plans:
            plans.update((p.name, p) for p in plans_for(rules, catalog))
        plan = plans.get(name)
        if plan is None:
            return []
        judged = plan.entities(ctx)
        for entity in [e for e in entities if e in judged] or judged[:1]:
            if plan.check(ctx, entity) is not None:  # every signal it needs is there
                return rule_evidence(plan.rule, ctx, entity, 0.0, catalog)
        return []

    return observe
