"""Flap control: a group that keeps flipping between firing and resolved is marked, not re-paged.

A flip is a change of the group's status; a resolve undone within ``flap.min_flip_interval`` is not
one (the group stage folds it, and a resolve is only sent after that long). More than
``flap.max_flips`` flips within ``flap.window`` make the group flapping. Then one notification marked
``flapping`` goes to the receivers that were told about the group (paging receivers do not re-page
for it: PagerDuty skips a flapping update of an alert it already resolved), and nothing more is sent -
no resolve, no re-open - until the flips have aged out of the window. Then the current state goes out
once: a page if it is still firing, a resolve if it stayed resolved.
"""

from __future__ import annotations

from tailhound.notifier.state import GroupState

from . import Context, Draft


def update_flapping(grp: GroupState, ctx: Context) -> bool:
    """Prune old flips and set ``grp.flapping``; True when flapping just ended."""
    cfg = ctx.config.flap
    recent = [t for t in grp.flips if ctx.now - t <= cfg.window]
    if len(recent) != len(grp.flips):
        grp.flips = recent
        ctx.touch(grp)
    now_flapping = len(recent) > cfg.max_flips
    ended = grp.flapping and not now_flapping
    if now_flapping and not grp.flapping:
        ctx.note(grp.group_id, f"flapping: {len(recent)} flips in {cfg.window:.0f}s")
    if ended:
        ctx.note(grp.group_id, "stopped flapping")
    grp.flapping = now_flapping
    return ended


def flap(cands: list[Draft], ctx: Context) -> list[Draft]:
    out = []
    for cand in cands:
        if cand.flapping and cand.group.notified_flapping:
            cand.suppressed = "flapping (marked; waiting for it to settle)"
            cand.group.suppressed = cand.suppressed
            continue
        out.append(cand)
    return out
