"""Inhibit: a cause that is already being notified suppresses its symptoms.

An inhibit rule says: while an incident matching ``source_matchers`` fires, incidents matching
``target_matchers`` that agree on every ``equal`` label are not notified. Streams' correlation already
folds symptoms into their cause on one node; inhibit rules do the same across nodes and scopes (a
network-path incident on an endpoint inhibits the capacity incidents of that endpoint's engines).
Only firing notifications are filtered: the resolve of something that was paged always goes out.
"""

from __future__ import annotations

from tailhound.notifier.matchers import incident_labels, matches_all

from . import Context, Draft


def inhibit(cands: list[Draft], ctx: Context) -> list[Draft]:
    rules = ctx.config.inhibit_rules
    if not rules or not cands:
        return cands
    sources = ctx.cache.get("inhibit_sources")
    if sources is None:
        sources = ctx.cache["inhibit_sources"] = [
            (ev.incident_id, incident_labels(ev))
            for grp in ctx.groups.values()
            for ev in grp.incidents.values()
            if ev.event != "resolved"
        ]
    out = []
    for cand in cands:
        if cand.kind == "resolved":
            out.append(cand)
            continue
        kept = []
        for ev in cand.incidents:
            by = _inhibited_by(ev.incident_id, incident_labels(ev), sources, rules)
            if by is None:
                kept.append(ev)
            else:
                ctx.note(cand.group.group_id, f"{ev.incident_id} inhibited by {by}")
        if kept:
            cand.incidents = kept
            out.append(cand)
        else:
            cand.suppressed = f"inhibited by {by}"
            cand.group.suppressed = cand.suppressed
    return out


def _inhibited_by(
    target_id: str, target: dict[str, str], sources: list[tuple[str, dict[str, str]]], rules
) -> str | None:
    for rule in rules:
        if not matches_all(rule.target_matchers, target):
            continue
        for source_id, labels in sources:
            if source_id == target_id or not matches_all(rule.source_matchers, labels):
                continue
            if all(labels.get(name, "") == target.get(name, "") for name in rule.equal):
                return source_id
    return None
