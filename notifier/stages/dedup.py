"""Dedup: drop incident events already seen.

Incident ids are derived from the rule, scope and opening time and ``sequence`` counts each
incident's events, so a redelivered event, a replayed partition or a second streams replica gives an
``(incident_id, sequence)`` at or below the highest seen: dropped. Seen sequences are part of the group
state, so this holds across restarts.
"""

from __future__ import annotations

from tailhound.incident import IncidentEvent

from . import Context


def dedup(events: list[IncidentEvent], ctx: Context) -> list[IncidentEvent]:
    out = []
    for ev in events:
        if ctx.seen.get(ev.incident_id, 0) >= ev.sequence:
            continue
        ctx.seen[ev.incident_id] = ev.sequence
        out.append(ev)
    return out
