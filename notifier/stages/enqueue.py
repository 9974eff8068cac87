"""Enqueue: one :class:`Notification` per receiver of a candidate, appended to the group's delivery log.

Each receiver is told in its own terms: what it was sent before decides the kind (an update to a receiver
that never got the page is a page; a resolve goes only where something is open). An update still waiting
in a log and never attempted is replaced by the newer one. After this the group remembers what receivers
were told (status, fingerprint), which :mod:`.select` compares against on the next flush.
"""

from __future__ import annotations

from urllib.parse import quote

from tailhound.notifier.model import Notification, NotificationKind
from tailhound.notifier.state import DeliveryLog, GroupState

from . import Context, Draft
from .select import schedule_repeat


def enqueue(cands: list[Draft], ctx: Context) -> list[Notification]:
    out: list[Notification] = []
    for cand in cands:
        out.extend(_enqueue_one(cand, ctx))
    return out


def receiver_kind(cand: Draft, log: DeliveryLog) -> NotificationKind | None:
    """What `cand` is to the receiver of `log`, given what it was sent before (None: nothing for it)."""
    open_here = log.is_open()
    kind = cand.kind
    if cand.flapping:
        return "updated" if log.sequence else "opened"
    if cand.settled and kind == "resolved":
        return kind if log.sequence else None
    if kind == "resolved" and not open_here:
        return None
    if kind == "updated" and not open_here:
        return "opened"
    if kind == "opened" and open_here:
        return "updated"
    return kind


def links(grp: GroupState, ctx: Context) -> dict[str, str]:
    """The config's links plus the runbook of the lead's root cause and, when set, its console page."""
    out = dict(ctx.config.links)
    out.setdefault("runbook", f"{ctx.runbook_url}#{grp.lead.root_cause}")
    if ctx.console_url:
        out.setdefault("console", f"{ctx.console_url}/incidents/{quote(grp.lead.incident_id, safe='')}")
    return out


def _enqueue_one(cand: Draft, ctx: Context) -> list[Notification]:
    grp, now = cand.group, ctx.now
    carried = links(grp, ctx)
    created = []
    for name in cand.receivers:
        log = grp.logs.setdefault(name, DeliveryLog(receiver=name))
        kind = receiver_kind(cand, log)
        if kind is None:
            continue
        incidents = grp.ordered() if kind == "resolved" else cand.incidents
        if len(log.pending) > 1 and log.pending[-1].kind == "updated" and kind == "updated":
            seq = log.pending.pop().sequence  # never attempted: the newer update replaces it
        else:
            seq = log.sequence = log.sequence + 1
        n = Notification(
            group_id=grp.group_id,
            receiver=name,
            sequence=seq,
            kind=kind,
            ts=now,
            incidents=incidents,
            group_labels=grp.labels,
            flapping=cand.flapping,
            links=carried,
        )
        log.pending.append(n)
        log.note_created(n)
        created.append(n)
    grp.last_notified_at = now
    if cand.flapping:  # receivers keep the state they were told; this only marks the group
        grp.notified_flapping = True
        return created
    grp.notified_flapping = False
    grp.notified_status = grp.status
    grp.notified_fingerprint = grp.fingerprint()
    schedule_repeat(grp, ctx)
    return created
