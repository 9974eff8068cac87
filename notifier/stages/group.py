"""Group: put each incident event into its notification group and schedule the group's next flush.

The group key is the values of ``grouping.by`` among the incident's labels (``incident`` = one group
per incident). A new group waits ``grouping.wait`` before its first notification, so a burst of
related incidents becomes one page. An incident stays in the group it first joined. A group that has
resolved keeps taking incidents of its key for ``flap.window``, so a re-fire re-opens the same page
(and counts as a flip) instead of opening a new one.
"""

from __future__ import annotations

from tailhound.incident import IncidentEvent
from tailhound.notifier.matchers import incident_labels
from tailhound.notifier.state import GroupState

from . import Context


def group_key(labels: dict[str, str], by: list[str]) -> tuple[str, dict[str, str]]:
    values = {name: labels.get(name, "") for name in by}
    return "|".join(f"{k}={v}" for k, v in values.items()), values


def group(events: list[IncidentEvent], ctx: Context) -> list[IncidentEvent]:
    cfg = ctx.config
    for ev in events:
        gid = ctx.incident_group.get(ev.incident_id)
        grp = ctx.groups.get(gid) if gid else None
        if grp is None:
            key, values = group_key(incident_labels(ev), cfg.grouping.by)
            gid = ctx.open_groups.get(key)
            grp = ctx.groups.get(gid) if gid else None
            if grp is None:
                if ev.event == "resolved":
                    continue  # the end of an incident we never saw open: nothing to say
                grp = GroupState(
                    group_id=ev.incident_id,
                    group_key=key,
                    labels=values,
                    created_at=ctx.now,
                    status_since=ctx.now,
                    next_flush_at=ctx.now + cfg.grouping.wait,
                )
                ctx.groups[grp.group_id] = grp
                ctx.open_groups[key] = grp.group_id
                ctx.note(grp.group_id, f"new group {key}")
            ctx.incident_group[ev.incident_id] = grp.group_id
        grp.incidents[ev.incident_id] = ev
        _status_changed(grp, ctx)
        _schedule(grp, ctx)
        ctx.touch(grp)
    return events


def _status_changed(grp: GroupState, ctx: Context) -> None:
    status = grp.computed_status()
    if status == grp.status:
        return
    flap = ctx.config.flap
    if (
        status == "firing"
        and ctx.now - grp.status_since < flap.min_flip_interval
        and grp.flips
        and grp.flips[-1] == grp.status_since
    ):
        grp.flips.pop()  # a resolve undone within the minimum flip time was a blip, not two flips
    else:
        grp.flips.append(ctx.now)
    grp.flips = [t for t in grp.flips if ctx.now - t <= flap.window]
    grp.status = status
    grp.status_since = ctx.now


def _schedule(grp: GroupState, ctx: Context) -> None:
    """Flush a changed group at the earliest time its next notification may go out."""
    g = ctx.config.grouping
    if grp.last_notified_at is None:
        first = grp.created_at + g.wait
    elif grp.status == "resolved":
        # a resolve waits the minimum flip time, so a quick re-fire does not page twice
        first = ctx.now + ctx.config.flap.min_flip_interval
    elif grp.notified_status == "resolved":
        first = ctx.now + g.wait  # re-opened after its resolve went out: page again soon
    else:  # a change to a paged group: gather it like a new burst, at most once per interval
        first = max(grp.last_notified_at + g.interval, ctx.now + g.wait)
    if grp.next_flush_at is None or first < grp.next_flush_at:
        grp.next_flush_at = first
