"""Select: decide whether a due group notifies now, and what kind of notification it would send.

A group that is due becomes a :class:`Draft` when something changed since receivers were last told
(opened, resolved, re-opened, new or changed incidents) or the repeat interval has passed; otherwise it
gets no candidate and its next flush is set to the repeat. Flap bookkeeping happens here (old flips are
pruned, ``flapping`` is set), so the later stages see a group in its current state. :func:`reschedule`
runs after every notify stage: when to look at the group again besides new events.
"""

from __future__ import annotations

from tailhound.notifier.model import NotificationKind
from tailhound.notifier.state import GroupState

from . import Context, Draft
from .flap import update_flapping

#: how soon a group whose notification was suppressed (silence, inhibition, flapping) is looked at again
RECHECK_S = 15.0


def select(groups: list[GroupState], ctx: Context) -> list[Draft]:
    out = []
    for grp in groups:
        grp.next_flush_at = None
        grp.suppressed = None
        ctx.touch(grp)
        cand = draft(grp, ctx)
        if cand is not None:
            out.append(cand)
    return out


def draft(grp: GroupState, ctx: Context) -> Draft | None:
    """The notification `grp` would send now (None: nothing to say yet)."""
    now = ctx.now
    update_flapping(grp, ctx)
    if grp.flapping:  # the flap stage lets one marked notification through, then holds the group
        return Draft(group=grp, kind="updated", incidents=grp.ordered(), flapping=True)
    status, said = grp.status, grp.notified_status
    kind: NotificationKind | None = None
    if grp.notified_flapping:  # it settled after receivers were told it flaps: tell them how it ended
        return Draft(
            group=grp, kind="resolved" if status == "resolved" else "opened", incidents=grp.ordered(), settled=True
        )
    if said is None:
        kind = "opened" if status == "firing" else None  # resolved before group_wait: never paged
    elif status == "resolved":
        kind = "resolved" if said == "firing" else None
    elif said == "resolved":
        kind = "opened"
    else:
        grouping = ctx.config.grouping
        last = grp.last_notified_at or now
        if grp.fingerprint() != grp.notified_fingerprint:
            if now < last + grouping.interval:  # flushed early (a resolve undone): wait
                grp.next_flush_at = last + grouping.interval
                return None
            kind = "updated"
        elif grouping.repeat and now - last >= grouping.repeat:
            kind = "updated"
    if kind is None:
        schedule_repeat(grp, ctx)
        return None
    return Draft(group=grp, kind=kind, incidents=grp.ordered())


def schedule_repeat(grp: GroupState, ctx: Context) -> None:
    """Flush a firing group that receivers were told fires again when the repeat interval is up."""
    repeat = ctx.config.grouping.repeat
    if repeat and grp.status == "firing" and grp.notified_status == "firing" and grp.last_notified_at:
        _flush_by(grp, grp.last_notified_at + repeat)


def reschedule(grp: GroupState, ctx: Context) -> None:
    """When to look at a flushed group again besides new events: when its flips age out of the flap
    window (flapping), soon (suppressed: a silence may end, a cause resolve), or at the repeat."""
    now = ctx.now
    if grp.flapping and grp.flips:
        _flush_by(grp, max(min(grp.flips) + ctx.config.flap.window + 0.001, now + RECHECK_S))
    elif grp.suppressed is not None:
        _flush_by(grp, now + RECHECK_S)


def _flush_by(grp: GroupState, at: float) -> None:
    grp.next_flush_at = at if grp.next_flush_at is None else min(grp.next_flush_at, at)
