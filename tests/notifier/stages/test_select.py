"""The select stage: whether a due group notifies now, what kind, and when it is looked at again."""

from __future__ import annotations

from tailhound.notifier.stages.select import RECHECK_S, reschedule, select

from ..factories import T0
from .helpers import context, group


def test_a_new_firing_group_opens():
    ctx, grp = context(), group()
    [cand] = select([grp], ctx)
    assert (cand.kind, cand.flapping, cand.settled) == ("opened", False, False)
    assert grp.next_flush_at is None and f"group:{grp.group_id}" in ctx.dirty


def test_a_group_resolved_before_its_first_page_never_notifies():
    assert select([group("resolved")], context()) == []


def test_a_paged_group_that_resolves_sends_the_resolve():
    grp = group("resolved", notified_status="firing", last_notified_at=T0)
    assert [c.kind for c in select([grp], context())] == ["resolved"]


def test_an_unchanged_paged_group_waits_for_the_repeat():
    grp = group(notified_status="firing", last_notified_at=T0)
    grp.notified_fingerprint = grp.fingerprint()
    ctx = context()
    assert select([grp], ctx) == []
    assert grp.next_flush_at == T0 + 4 * 3600
    assert [c.kind for c in select([grp], context(now=T0 + 4 * 3600))] == ["updated"]


def test_a_change_inside_the_interval_waits_until_the_interval_is_over():
    grp = group(notified_status="firing", last_notified_at=T0, notified_fingerprint="other")
    assert select([grp], context(now=T0 + 60)) == []
    assert grp.next_flush_at == T0 + 300
    assert [c.kind for c in select([grp], context(now=T0 + 300))] == ["updated"]


def test_too_many_flips_make_a_flapping_candidate_and_prune_old_flips():
    now = T0 + 3000
    grp = group(flips=[T0, now - 300, now - 200, now - 100], notified_status="firing", last_notified_at=T0)
    ctx = context(now=now)
    [cand] = select([grp], ctx)
    assert cand.flapping and cand.kind == "updated"
    assert grp.flapping and grp.flips == [now - 300, now - 200, now - 100]
    assert any("flapping: 3 flips" in what for _, what in ctx.decisions)


def test_a_group_that_settled_after_the_flapping_notice_says_how_it_ended():
    grp = group("resolved", notified_flapping=True, notified_status="firing", flapping=True, flips=[T0])
    [cand] = select([grp], context(now=T0 + 3600))
    assert (cand.kind, cand.settled, grp.flapping) == ("resolved", True, False)


def test_reschedule_looks_again_soon_at_a_suppressed_group_and_after_the_flips_of_a_flapping_one():
    ctx = context()
    held = group(suppressed="silenced by s-1", next_flush_at=None)
    reschedule(held, ctx)
    assert held.next_flush_at == ctx.now + RECHECK_S
    flapping = group(flapping=True, flips=[ctx.now - 10, ctx.now - 5], next_flush_at=None)
    reschedule(flapping, ctx)
    assert flapping.next_flush_at == ctx.now - 10 + 1800 + 0.001
    quiet = group(next_flush_at=None)
    reschedule(quiet, ctx)
    assert quiet.next_flush_at is None
