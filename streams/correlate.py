"""Firing rules of one node -> incidents: one per domain (:mod:`.causal_rank`), the best-ranked firing cause
as root (a better one that fires later takes over), symptoms attached to the open incident or, alone for
their grace, opening one with their fallback cause; transient incidents become persistent with time.
This is what a person is told; :mod:`.episode` renders the events, :mod:`.resolutions` closes incidents
whose node or rule is gone.
"""

from __future__ import annotations

from tailhound.incident import IncidentEvent, incident_id
from tailhound.snapshot import Snapshot
from tailhound.vocabulary import RootCause

from .candidates import Observe
from .causal_rank import RESIDUAL_CAUSES, domain_of, rank_of
from .episode import Episode, Firing, episode_event
from .resolutions import reconcile
from .ruleset.plan import entity_order
from .ruleset.rulefile import Rule, RuleSet

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
        reconcile(episodes, by_name, firing, snapshot, models)
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
            _attach(ep, mine)
            _attach(ep, symptoms if domain == _symptom_home(episodes) else {})
            events.append(episode_event("opened", ep, by_name, firing, snapshot, models, pending, observe))
        elif ep is not None and not _keeps_open(ep, mine, by_name):
            ep.sequence += 1
            events.append(episode_event("resolved", ep, by_name, firing, snapshot, models))
            del episodes[domain]
            orphans[_AFTERMATH + domain] = snapshot.ts
            for name in ep.members:
                if name in symptoms or name in mine:  # still draining (a queue after its cause): explained
                    orphans[name] = EXPLAINED
        elif ep is not None:
            changed = _attach(ep, mine)
            if domain == _symptom_home(episodes):
                changed |= _attach(ep, symptoms)
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
                events.append(episode_event("updated", ep, by_name, firing, snapshot, models, pending, observe))
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


def _attach(ep: Episode, firing: dict[str, Firing]) -> bool:
    """Add the firing entities to `ep`'s members; whether that changed them."""
    changed = False
    for name, f in firing.items():
        have = set(ep.members.get(name, []))
        grown = have | set(f.entities)
        if grown != have or name not in ep.members:
            ep.members[name] = sorted(grown, key=entity_order)
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
            members={name: sorted(f.entities, key=entity_order)},
        )
        episodes[domain] = ep
        del orphans[name]
        events.append(episode_event("opened", ep, by_name, firing, snapshot, models))
    return events
