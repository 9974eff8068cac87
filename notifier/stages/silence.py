"""Silence: incidents matched by an active silence (created with `tailhound silence add` or declared as
a maintenance window in the notifier config) are not notified.

A fully silenced group sends nothing; the flush stage looks at it again, so when the silence ends or
is expired the page goes out if the incident still fires. Resolves of what was paged always go out.
"""

from __future__ import annotations

from tailhound.notifier.matchers import incident_labels

from . import Context, Draft


def silence(cands: list[Draft], ctx: Context) -> list[Draft]:
    if not cands:
        return cands
    active = ctx.cache.get("active_silences")
    if active is None:
        active = ctx.cache["active_silences"] = [s for s in ctx.silences.values() if s.active(ctx.now)]
    if not active:
        return cands
    out = []
    for cand in cands:
        if cand.kind == "resolved":
            out.append(cand)
            continue
        kept, by = [], None
        for ev in cand.incidents:
            labels = incident_labels(ev)
            hit = next((s for s in active if s.mutes(labels, ctx.now)), None)
            if hit is None:
                kept.append(ev)
            else:
                by = hit
        if kept:
            cand.incidents = kept
            out.append(cand)
        else:
            assert by is not None
            cand.suppressed = f"silenced by {by.id} ({by.author}: {by.comment})"
            cand.group.suppressed = cand.suppressed
            ctx.note(cand.group.group_id, cand.suppressed)
    return out
