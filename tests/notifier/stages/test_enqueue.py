"""The enqueue stage: one notification per receiver, in that receiver's terms, appended to its log."""

from __future__ import annotations

import pytest

from tailhound.notifier.stages import Draft
from tailhound.notifier.stages.enqueue import enqueue, receiver_kind
from tailhound.notifier.state import DeliveryLog

from ..factories import T0, notification
from .helpers import context, group


def _log(*kinds: str) -> DeliveryLog:
    """A receiver's log that was delivered `kinds`, in order."""
    return DeliveryLog(receiver="r", sequence=len(kinds), delivered=len(kinds), last_kind=kinds[-1] if kinds else None)


@pytest.mark.parametrize(
    ("kind", "flags", "told", "expected"),
    [
        ("opened", {}, (), "opened"),
        ("opened", {}, ("opened",), "updated"),  # already paged: the re-open is an update to it
        ("updated", {}, (), "opened"),  # never paged (a new route): the update is its page
        ("updated", {}, ("opened",), "updated"),
        ("resolved", {}, (), None),  # nothing open here: nothing to resolve
        ("resolved", {}, ("opened",), "resolved"),
        ("updated", {"flapping": True}, (), "opened"),
        ("updated", {"flapping": True}, ("opened", "resolved"), "updated"),
        ("resolved", {"settled": True}, ("opened", "resolved"), "resolved"),  # it got the flapping notice
        ("resolved", {"settled": True}, (), None),
    ],
)
def test_each_receiver_is_told_in_its_own_terms(kind, flags, told, expected):
    cand = Draft(group=group(), kind=kind, incidents=[], **flags)
    assert receiver_kind(cand, _log(*told)) == expected


def test_notifications_carry_the_links_and_the_group_remembers_what_was_said():
    grp = group(next_flush_at=None)  # as select leaves it
    ctx = context(runbook_url="https://docs.example/rc", console_url="https://console.example")
    cand = Draft(group=grp, kind="opened", incidents=grp.ordered(), receivers=["slack", "pager"])
    out = enqueue([cand], ctx)
    assert [(n.receiver, n.kind, n.sequence) for n in out] == [("slack", "opened", 1), ("pager", "opened", 1)]
    assert out[0].links == {
        "dashboard": "https://grafana.example/d/fleet",
        "runbook": "https://docs.example/rc#gpu-thermal-throttle",
        "console": "https://console.example/incidents/inc-0000000000000001",
    }
    assert [n.sequence for n in grp.logs["slack"].pending] == [1]
    assert (grp.notified_status, grp.notified_fingerprint, grp.last_notified_at) == (
        "firing",
        grp.fingerprint(),
        ctx.now,
    )
    assert grp.next_flush_at == ctx.now + 4 * 3600  # the repeat


def test_a_newer_update_replaces_one_that_was_never_attempted():
    grp = group()
    log = grp.logs["r"] = DeliveryLog(
        receiver="r",
        sequence=2,
        delivered=0,
        last_kind=None,
        pending=[notification("opened", "r", 1), notification("updated", "r", 2)],
    )
    out = enqueue([Draft(group=grp, kind="updated", incidents=grp.ordered(), receivers=["r"])], context())
    assert [n.sequence for n in out] == [2] and [n.sequence for n in log.pending] == [1, 2]
    assert log.pending[-1].ts == T0 + 60 and log.sequence == 2


def test_a_flapping_notice_only_marks_the_group():
    grp = group(notified_status="firing", notified_fingerprint="before")
    out = enqueue(
        [Draft(group=grp, kind="updated", incidents=grp.ordered(), flapping=True, receivers=["r"])], context()
    )
    assert [(n.kind, n.flapping) for n in out] == [("opened", True)]
    assert grp.notified_flapping and grp.notified_fingerprint == "before"
