"""`views_from_groups`: the console's incidents built from the notifier's groups -- the latest event with
its chart data, lifecycle marks, every receiver's notifications (recorded, and pending ones state written
before the history has no record of), the group and why it was held back; open first, newest first."""

from __future__ import annotations

from tailhound.notifier.config import parse_config
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import GroupState, Silence
from tailhound.notifier.webconsole.view import Mark, event_clock_offset, views_from_groups
from tests.notifier.factories import T0, incident_event

from .api_helpers import KV, OLD, THERMAL, populated_notifier, temperature_series


def test_views_of_live_and_recent_groups_open_first_newest_first():
    nf = populated_notifier()
    views = views_from_groups([*nf.groups.values(), *nf.recent.values()])
    assert [(v.incident_id, v.open, v.group_id) for v in views] == [
        (KV, True, KV),
        (THERMAL, True, THERMAL),
        (OLD, False, OLD),
    ]
    thermal = views[1]
    assert thermal.event.series == [temperature_series()]
    assert thermal.marks == [Mark(T0, "opened", 1)]
    assert [(d.receiver, d.kind, d.outcome, d.attempts, d.error) for d in thermal.deliveries] == [
        ("slack", "opened", "retrying", 1, "HTTP 503 from hooks.slack.com")
    ]
    old = views[2]
    assert [m.kind for m in old.marks] == ["opened", "resolved"]
    assert [(d.sequence, d.kind, d.outcome, d.at) for d in old.deliveries] == [
        (1, "opened", "delivered", T0 - 3999),
        (2, "resolved", "delivered", T0 - 3899),
    ]


def test_pending_notifications_without_a_record_still_show():
    nf = populated_notifier()
    record = nf.groups[THERMAL].model_dump(mode="json")
    for log in record["logs"].values():
        del log["history"]  # as written before the history was kept
    del record["marks"]
    (view,) = views_from_groups([GroupState.model_validate(record)])
    assert [(d.sequence, d.outcome, d.attempts, d.error, d.at) for d in view.deliveries] == [
        (1, "retrying", 1, "HTTP 503 from hooks.slack.com", None)
    ]
    assert view.marks == [Mark(T0, "opened", 1)]  # no recorded marks: the latest event is one


def test_an_incident_in_a_live_and_a_recent_group_shows_once_as_the_live_one():
    nf = populated_notifier()
    recent = nf.recent[OLD].model_copy(deep=True)
    live = nf.recent[OLD].model_copy(update={"status": "firing"}, deep=True)
    live.incidents[OLD] = incident_event(incident_id=OLD, sequence=5, event="updated", ts=T0 + 100)
    (view,) = views_from_groups([live, recent])
    assert view.event.sequence == 5 and view.open


def test_why_a_group_was_held_back_is_shown():
    nf = Notifier(
        parse_config(
            "grouping: {by: [incident], wait: 0s}\nroute: {receiver: r}\nreceivers: [{type: console, name: r}]\n"
        )
    )
    nf.add_silence(
        Silence(
            id="sil-1",
            matchers=['node="gpu-node-3"'],
            starts_at=T0 - 1,
            ends_at=T0 + 3600,
            author="ana",
            comment="rack maintenance",
            created_at=T0 - 1,
        )
    )
    nf.ingest([incident_event()], T0)
    nf.flush(T0)
    (view,) = views_from_groups(nf.groups.values())
    assert view.suppressed and view.suppressed.startswith("silenced by sil-1") and view.deliveries == []


def test_resolved_incidents_are_ordered_by_their_resolution():
    groups = []
    for n, resolved in ((1, T0 + 50), (2, T0 + 90), (3, T0 + 70)):
        iid = f"inc-{n:016d}"
        grp = GroupState(group_id=iid, group_key=iid, created_at=T0, status_since=resolved, status="resolved")
        grp.incidents[iid] = incident_event(incident_id=iid, event="resolved", sequence=2, ts=resolved)
        groups.append(grp)
    assert [v.incident_id for v in views_from_groups(groups)] == [f"inc-{n:016d}" for n in (2, 3, 1)]


def test_ages_read_in_the_fleets_time_when_its_clock_is_another():
    def group(created_at: float, opened_at: float) -> GroupState:
        ev = incident_event(incident_id=f"inc-{int(created_at)}", opened_at=opened_at, ts=opened_at)
        return GroupState(
            group_id=ev.incident_id,
            group_key="k",
            incidents={ev.incident_id: ev},
            created_at=created_at,
            status_since=created_at,
        )

    live = [group(T0 + 5, T0), group(T0 + 900, T0 + 898)]  # taken in seconds after they opened
    assert event_clock_offset(live) == 0.0
    demo = [group(T0 + 86_400 * 330, T0), group(T0 + 86_400 * 330 + 40, T0 + 2400)]  # a simulated fleet's clock
    assert event_clock_offset(demo) == 86_400 * 330 - 2360 or event_clock_offset(demo) == 86_400 * 330
    assert event_clock_offset([]) == 0.0
