"""What the notifier keeps for the incident console, driven with a fake clock: each notification's outcome
per receiver (bounded), each incident's lifecycle marks (bounded), resolved groups kept as recent history
(bounded, persisted and restored through the state records the service writes), and chart data kept in
the groups but never sent to receivers."""

from __future__ import annotations

import json

import pytest

from tailhound.errors import DeliveryError
from tailhound.incident import EvidenceSeries
from tailhound.notifier import history
from tailhound.notifier.config import parse_config
from tailhound.notifier.limits import MAX_DELIVERY_HISTORY, MAX_MARKS_PER_INCIDENT, RECENT_RETENTION_S
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.state import DeliveryLog, GroupState
from tailhound.settings import NotifierSettings

from .factories import T0, incident_event, notification

# one group per incident, no waiting: every event is a notification at once
CONFIG = """
grouping: {by: [incident], wait: 0s, interval: 0s}
flap: {window: 10m, max_flips: 100, min_flip_interval: 0s}
route: {receiver: r}
receivers: [{type: console, name: r}]
"""


def make(**kw) -> Notifier:
    return Notifier(parse_config(CONFIG), **kw)


def ev(n: int, event: str = "opened", seq: int = 1, ts: float = T0, **kw):
    return incident_event(incident_id=f"inc-{n:016d}", event=event, sequence=seq, ts=ts, **kw)


def series(points: int = 10, entities: int = 2) -> EvidenceSeries:
    ts = [T0 - 15.0 * (points - i) for i in range(points)]
    return EvidenceSeries(
        rule="gpu-thermal-throttle",
        signal="gpu.temperature",
        unit="C",
        op=">=",
        threshold=85.0,
        for_s=60,
        per="gpu",
        focus=["2"],
        ts=ts,
        values={str(g): [70.0 + g] * points for g in range(entities)},
        baseline={"2": [63.0] * points},
    )


class Store(dict):
    """The state topic as the service writes it: JSON values, None deletes (a tombstone)."""

    def apply(self, outcome) -> None:
        for key, value in outcome.dirty.items():
            if value is None:
                self.pop(key, None)
            else:
                self[key] = json.loads(json.dumps(value, separators=(",", ":")))


def deliver_all(nf: Notifier, now: float, store: Store | None = None) -> None:
    for gid, name, n, _ in nf.deliverable(now):
        out = nf.delivered(gid, name, n.sequence, {"ts": "1"}, now)
        if store is not None:
            store.apply(out)


# --- notification history ----------------------------------------------------------------------------------
def test_each_notification_is_recorded_pending_then_delivered():
    nf = make()
    nf.ingest([ev(1)], T0)
    created = nf.flush(T0).created
    log = nf.groups[ev(1).incident_id].logs["r"]
    assert [(r.sequence, r.kind, r.outcome, r.created_at, r.at) for r in log.history] == [
        (1, "opened", "pending", T0, None)
    ]
    assert created[0].ts == T0
    deliver_all(nf, T0 + 2)
    assert [(r.outcome, r.at, r.attempts) for r in log.history] == [("delivered", T0 + 2, 0)]


def test_retries_and_giving_up_are_recorded_with_attempts_and_error():
    nf = make()
    nf.ingest([ev(1)], T0)
    nf.flush(T0)
    gid = ev(1).incident_id
    out, dead = nf.failed(gid, "r", 1, DeliveryError("HTTP 503", retryable=True), T0 + 1, 5.0)
    assert dead is None and out.dirty[f"group:{gid}"]["logs"]["r"]["history"][0]["outcome"] == "retrying"
    record = nf.groups[gid].logs["r"].history[0]
    assert (record.outcome, record.attempts, record.error, record.at) == ("retrying", 1, "HTTP 503", None)
    _, dead = nf.failed(gid, "r", 1, DeliveryError("HTTP 400 bad payload", retryable=False), T0 + 7, 5.0)
    assert dead is not None
    record = nf.groups[gid].logs["r"].history[0]
    assert (record.outcome, record.attempts, record.error, record.at) == ("gave-up", 2, "HTTP 400 bad payload", T0 + 7)


def test_a_delivery_after_retries_counts_the_failed_attempts():
    nf = make()
    nf.ingest([ev(1)], T0)
    nf.flush(T0)
    gid = ev(1).incident_id
    nf.failed(gid, "r", 1, DeliveryError("timeout", retryable=True), T0 + 1, 1.0)
    nf.delivered(gid, "r", 1, {}, T0 + 3)
    record = nf.groups[gid].logs["r"].history[0]
    assert (record.outcome, record.attempts, record.error, record.at) == ("delivered", 1, None, T0 + 3)


def test_a_coalesced_update_replaces_the_record_of_the_one_it_replaced():
    nf = make()
    nf.ingest([ev(1)], T0)
    nf.flush(T0)  # opened, pending (the receiver is down: nothing delivered)
    for i in range(2, 6):
        nf.ingest([ev(1, "updated", i, ts=T0 + i, severity="critical" if i % 2 else "warning")], T0 + i)
        nf.flush(T0 + i)
    log = nf.groups[ev(1).incident_id].logs["r"]
    assert [n.sequence for n in log.pending] == [r.sequence for r in log.history] == [1, 2]
    assert log.history[-1].created_at == T0 + 5


def test_history_is_bounded_oldest_first_out():
    log = DeliveryLog(receiver="r")
    for seq in range(1, MAX_DELIVERY_HISTORY + 6):
        log.note_created(notification(sequence=seq, ts=T0 + seq))
        log.note_outcome(seq, "delivered", at=T0 + seq + 1)
    assert len(log.history) == MAX_DELIVERY_HISTORY
    assert log.history[0].sequence == 6 and log.history[-1].sequence == MAX_DELIVERY_HISTORY + 5
    log.note_outcome(1, "gave-up", at=T0)  # a record the bound dropped is not brought back
    assert len(log.history) == MAX_DELIVERY_HISTORY and log.history[0].sequence == 6


def test_state_written_before_the_history_still_loads():
    nf = make()
    nf.ingest([ev(1)], T0)
    nf.flush(T0)
    record = nf.groups[ev(1).incident_id].model_dump(mode="json")
    for log in record["logs"].values():
        del log["history"]
    del record["marks"]
    grp = GroupState.model_validate(record)
    assert grp.logs["r"].history == [] and grp.marks == {} and len(grp.logs["r"].pending) == 1
    with pytest.raises(ValueError, match="Extra inputs"):  # still strict about fields it does not know
        GroupState.model_validate(dict(record, surprise=1))


# --- lifecycle marks -----------------------------------------------------------------------------------------
def test_every_event_taken_in_is_a_mark_once():
    nf = make()
    nf.ingest([ev(1, ts=T0)], T0)
    nf.ingest([ev(1, ts=T0)], T0 + 1)  # redelivered: dropped by dedup, no second mark
    nf.ingest([ev(1, "updated", 2, ts=T0 + 60)], T0 + 60)
    nf.ingest([ev(1, "resolved", 3, ts=T0 + 120)], T0 + 120)
    assert nf.groups[ev(1).incident_id].marks[ev(1).incident_id] == [
        (T0, "opened", 1),
        (T0 + 60, "updated", 2),
        (T0 + 120, "resolved", 3),
    ]


def test_marks_keep_the_first_and_the_newest():
    grp = GroupState(group_id="g", group_key="k", created_at=T0, status_since=T0)
    for seq in range(1, 101):
        grp.mark(ev(1, "opened" if seq == 1 else "updated", seq, ts=T0 + seq))
    grp.mark(ev(1, "updated", 100, ts=T0 + 100))  # already there
    marks = grp.marks[ev(1).incident_id]
    assert len(marks) == MAX_MARKS_PER_INCIDENT
    assert marks[0] == (T0 + 1, "opened", 1)
    assert [m[2] for m in marks[1:]] == list(range(100 - MAX_MARKS_PER_INCIDENT + 2, 101))


def test_a_resolve_of_an_incident_never_seen_open_leaves_no_group_and_no_mark():
    nf = make()
    nf.ingest([ev(9, "resolved", 4)], T0)
    assert nf.groups == {} and nf.recent == {}


# --- recent groups -------------------------------------------------------------------------------------------
def resolve_and_collect(nf: Notifier, n: int, t: float, store: Store | None = None) -> None:
    """Open incident n at t, page it, resolve it, send the resolve; the group is collected a flap window on."""
    for outcome in (nf.ingest([ev(n, ts=t)], t), nf.flush(t)):
        if store is not None:
            store.apply(outcome)
    deliver_all(nf, t, store)
    for outcome in (nf.ingest([ev(n, "resolved", 2, ts=t + 60)], t + 60), nf.flush(t + 60)):
        if store is not None:
            store.apply(outcome)
    deliver_all(nf, t + 60, store)


def test_a_collected_group_becomes_recent_history_with_a_tombstone_for_the_live_one():
    nf = make()
    store = Store()
    resolve_and_collect(nf, 1, T0, store)
    gid = ev(1).incident_id
    assert gid in nf.groups and nf.recent == {}
    out = nf.flush(T0 + 60 + 601)
    store.apply(out)
    assert out.dirty[f"group:{gid}"] is None and out.dirty[f"recent:{gid}"]["group_id"] == gid
    assert gid not in nf.groups and nf.recent[gid].status == "resolved"
    assert set(store) == {f"recent:{gid}"}
    recent = nf.recent[gid]
    assert [r.outcome for r in recent.logs["r"].history] == ["delivered", "delivered"]
    assert [m[1] for m in recent.marks[gid]] == ["opened", "resolved"]


def test_recent_groups_are_never_consulted_by_the_stages():
    nf = make()
    resolve_and_collect(nf, 1, T0)
    nf.flush(T0 + 60 + 601)
    gid = ev(1).incident_id
    assert gid in nf.recent
    # the same incident id seen again (a replay after its group was forgotten) opens a new live group,
    # exactly as before recent groups existed
    nf.ingest([ev(1, ts=T0 + 1000)], T0 + 1000)
    out = nf.flush(T0 + 1000).created
    assert [(n.kind, n.sequence) for n in out] == [("opened", 1)]
    assert gid in nf.groups and nf.recent[gid].status == "resolved"


def test_recent_groups_are_bounded_by_count_and_age(monkeypatch):
    monkeypatch.setattr(history, "MAX_RECENT_GROUPS", 3)
    nf = make()
    store = Store()
    for n in range(5):
        resolve_and_collect(nf, n, T0 + n * 10, store)
    out = nf.flush(T0 + 2000)  # all five are collected; the two that resolved first are evicted at once
    store.apply(out)
    assert sorted(nf.recent) == [ev(n).incident_id for n in (2, 3, 4)]
    assert sorted(k for k in store if k.startswith("recent:")) == [f"recent:{ev(n).incident_id}" for n in (2, 3, 4)]
    assert not any(k.startswith("group:") for k in store)
    dirty: set[str] = set()
    history.evict(nf.recent, T0 + 90 + RECENT_RETENTION_S + 5, dirty)  # 2 and 3 resolved over 7 days ago
    assert sorted(nf.recent) == [ev(4).incident_id]
    assert dirty == {f"recent:{ev(2).incident_id}", f"recent:{ev(3).incident_id}"}


def test_the_flush_evicts_old_recent_groups_with_tombstones():
    nf = make()
    store = Store()
    resolve_and_collect(nf, 1, T0, store)
    store.apply(nf.flush(T0 + 700))
    assert f"recent:{ev(1).incident_id}" in store
    out = nf.flush(T0 + 60 + RECENT_RETENTION_S + 1)
    store.apply(out)
    assert out.dirty == {f"recent:{ev(1).incident_id}": None} and nf.recent == {} and store == {}


def test_recent_groups_round_trip_through_the_state_records():
    nf = make()
    store = Store()
    resolve_and_collect(nf, 1, T0, store)
    store.apply(nf.flush(T0 + 700))
    store.apply(nf.ingest([ev(2, ts=T0 + 800)], T0 + 800))  # and one live group
    store.apply(nf.flush(T0 + 800))
    store["recent:broken"] = {"group_id": "x"}  # a bad record is skipped, it never stops the takeover
    restarted = Notifier.restore(parse_config(CONFIG), dict(store), now=T0 + 900)
    assert list(restarted.recent) == [ev(1).incident_id] and list(restarted.groups) == [ev(2).incident_id]
    assert restarted.recent[ev(1).incident_id] == nf.recent[ev(1).incident_id]
    assert ev(1).incident_id not in restarted.seen and ev(1).incident_id not in restarted.incident_group


def test_a_standing_by_notifier_mirrors_the_active_ones_groups_for_its_console():
    class Topic(Store):
        """The state topic's records in order, as a standing-by instance reads them."""

        records: list[tuple[str, bytes | None]] = []

        def apply(self, outcome) -> None:
            super().apply(outcome)
            self.records += [(k, json.dumps(v).encode() if v is not None else None) for k, v in outcome.dirty.items()]

    active, standby = make(), make()
    topic = Topic()
    topic.apply(active.ingest([ev(2, ts=T0 + 5)], T0 + 5))
    topic.apply(active.flush(T0 + 5))
    resolve_and_collect(active, 1, T0, topic)
    topic.apply(active.flush(T0 + 700))  # incident 1's group is retired: a recent record, a tombstone
    assert list(active.recent) == [ev(1).incident_id]
    handled = [history.mirror(standby.groups, standby.recent, key, raw) for key, raw in topic.records]
    assert all(handled)
    assert list(standby.groups) == [ev(2).incident_id] and list(standby.recent) == [ev(1).incident_id]
    assert standby.groups[ev(2).incident_id] == active.groups[ev(2).incident_id]
    assert standby.recent == active.recent
    assert history.mirror(standby.groups, standby.recent, "silence:x", b"{}") is False  # the silence path's
    assert history.mirror(standby.groups, standby.recent, "group:bad", b'{"group_id": 1}') is True  # skipped
    assert "bad" not in standby.groups


# --- chart data ----------------------------------------------------------------------------------------------
def test_notifications_do_not_carry_chart_data_but_the_group_keeps_it():
    nf = make()
    nf.ingest([ev(1, series=[series()])], T0)
    created = nf.flush(T0).created
    assert created and all(not i.series for n in created for i in n.incidents)
    grp = nf.groups[ev(1).incident_id]
    assert grp.incidents[ev(1).incident_id].series == [series()]
    assert all(not i.series for n in grp.logs["r"].pending for i in n.incidents)
    assert '"series":[]' in created[0].model_dump_json()  # what a webhook is sent


def test_chart_data_and_marks_survive_a_restart_open_and_recent():
    nf = make()
    store = Store()
    store.apply(nf.ingest([ev(1, series=[series()]), ev(2, ts=T0 + 5, series=[series(points=5)])], T0 + 5))
    store.apply(nf.flush(T0 + 5))
    deliver_all(nf, T0 + 5, store)
    for outcome in (
        nf.ingest([ev(1, "resolved", 2, ts=T0 + 60, series=[series(points=12)])], T0 + 60),
        nf.flush(T0 + 60),
    ):
        store.apply(outcome)
    deliver_all(nf, T0 + 60, store)
    store.apply(nf.flush(T0 + 700))  # incident 1's group is retired to the recent history
    restarted = Notifier.restore(parse_config(CONFIG), dict(store), now=T0 + 800)
    done, live = restarted.recent[ev(1).incident_id], restarted.groups[ev(2).incident_id]
    assert done.incidents[ev(1).incident_id].series == [series(points=12)]
    assert live.incidents[ev(2).incident_id].series == [series(points=5)]
    assert [m[1] for m in done.marks[ev(1).incident_id]] == ["opened", "resolved"]
    assert [r.outcome for r in done.logs["r"].history] == ["delivered", "delivered"]


def test_a_notification_built_anywhere_drops_the_chart_data():
    n = notification(incidents=[ev(1, series=[series()])])
    assert n.incidents[0].series == [] and n.incidents[0].summary


def test_a_group_keeps_chart_data_within_its_budget(monkeypatch):
    monkeypatch.setattr(history, "MAX_GROUP_SERIES_VALUES", 100)
    nf = Notifier(
        parse_config(
            "grouping: {by: [root_cause], wait: 0s}\nroute: {receiver: r}\nreceivers: [{type: console, name: r}]\n"
        )
    )
    small = series(points=10, entities=2)  # 10 x (1 + 2 + 1) = 40 values
    nf.ingest([ev(1, series=[small]), ev(2, series=[small]), ev(3, series=[small])], T0)
    (grp,) = nf.groups.values()
    assert [bool(e.series) for e in grp.incidents.values()] == [True, True, False]
    nf.ingest([ev(3, "updated", 2, ts=T0 + 1, series=[small])], T0 + 1)  # still no room for the third
    assert not grp.incidents[ev(3).incident_id].series
    nf.ingest([ev(1, "resolved", 2, ts=T0 + 2, series=[])], T0 + 2)  # the first one's charts go: room again
    nf.ingest([ev(3, "updated", 3, ts=T0 + 3, series=[small])], T0 + 3)
    assert [bool(e.series) for e in grp.incidents.values()] == [False, True, True]
    assert history.series_values(grp.incidents[ev(3).incident_id]) == 40


# --- the console link ----------------------------------------------------------------------------------------
def test_notifications_link_to_the_console_when_its_url_is_set():
    nf = make(console_url="https://tailhound.example/console/")
    nf.ingest([ev(1)], T0)
    (n,) = nf.flush(T0).created
    assert n.links["console"] == f"https://tailhound.example/console/incidents/{ev(1).incident_id}"
    assert n.links["runbook"].endswith("#gpu-thermal-throttle")
    nf = make()
    nf.ingest([ev(1)], T0)
    assert "console" not in nf.flush(T0).created[0].links


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x.example/console",
        "https://",
        "tailhound.example/console",
        "https://x.example/console?a=1",
        "https://x .example/",
    ],
)
def test_console_url_must_be_an_http_base_url(url):
    with pytest.raises(ValueError, match="console_url"):
        NotifierSettings(console_url=url)


def test_console_settings_defaults():
    s = NotifierSettings()
    assert s.console is True and s.console_url is None
    assert NotifierSettings(console_url=" https://x.example/console/ ").console_url == "https://x.example/console"
    assert NotifierSettings(console_url="").console_url is None
