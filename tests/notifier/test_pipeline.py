"""The notifier's pure core, driven with a fake clock: grouping, dedup, inhibition, silences, flap
control, routing, and the durable state across a restart."""

from __future__ import annotations

from tailhound.notifier.config import parse_config
from tailhound.notifier.matchers import Matcher
from tailhound.notifier.pipeline import RECHECK_S, Notifier
from tailhound.notifier.state import Silence

from .factories import T0, incident_event

CONFIG = """
grouping: {by: [root_cause, node], wait: 30s, interval: 5m, repeat: 4h}
flap: {window: 30m, max_flips: 3, min_flip_interval: 60s}
route:
  receiver: slack
  routes:
    - matchers: ['severity="critical"', 'transient="false"']
      receiver: pager
      continue: true
    - matchers: ['root_cause="capacity"']
      receiver: scaler
      continue: true
    - receiver: slack     # no matchers: everything reaches Slack
receivers:
  - {type: console, name: slack}
  - {type: console, name: pager}
  - {type: console, name: scaler}
inhibit_rules:
  - source_matchers: ['root_cause="network-path"']
    target_matchers: ['root_cause=~"capacity|retry-storm"']
    equal: [endpoint]
"""


def make(text: str = CONFIG) -> Notifier:
    return Notifier(parse_config(text))


def ev(n: int, event: str = "opened", seq: int = 1, ts: float = T0, **kw):
    return incident_event(incident_id=f"inc-{n:016d}", event=event, sequence=seq, ts=ts, **kw)


def sent(notifier: Notifier, now: float) -> list:
    """Flush at `now` and mark everything deliverable as delivered; returns the notifications."""
    out = notifier.flush(now).created
    for gid, name, n, _ in notifier.deliverable(now):
        notifier.delivered(gid, name, n.sequence, {"ts": "1"}, now)
    return out


def test_a_burst_of_50_related_firings_is_one_notification():
    nf = make()
    for i in range(50):
        nf.ingest([ev(i, gpus=(str(i % 8),))], T0 + i * 0.1)
    assert sent(nf, T0 + 10) == []  # group_wait not over
    out = sent(nf, T0 + 31)
    assert [(n.receiver, n.kind, len(n.incidents)) for n in out] == [("slack", "opened", 50)]
    assert out[0].group_id == "inc-0000000000000000"
    assert out[0].title().endswith("(+49 related)")


def test_duplicate_and_replayed_events_are_dropped():
    nf = make()
    nf.ingest([ev(1), ev(1)], T0)
    sent(nf, T0 + 31)
    nf.ingest([ev(1)], T0 + 40)  # a redelivery after the page
    assert nf.flush(T0 + 400).created == []


def test_update_is_rate_limited_by_group_interval_and_resolve_goes_where_the_page_went():
    nf = make()
    nf.ingest([ev(1, severity="critical")], T0)
    out = sent(nf, T0 + 31)
    assert sorted((n.receiver, n.kind) for n in out) == [("pager", "opened"), ("slack", "opened")]
    nf.ingest([ev(2, severity="critical")], T0 + 60)  # joins the group
    assert sent(nf, T0 + 100) == []
    out = sent(nf, T0 + 31 + 300)
    assert sorted((n.receiver, n.kind, len(n.incidents)) for n in out) == [
        ("pager", "updated", 2),
        ("slack", "updated", 2),
    ]
    nf.ingest([ev(1, "resolved", 2), ev(2, "resolved", 2)], T0 + 400)
    assert sent(nf, T0 + 430) == []  # a resolve waits the minimum flip time
    out = sent(nf, T0 + 461)
    assert sorted((n.receiver, n.kind, n.sequence) for n in out) == [("pager", "resolved", 3), ("slack", "resolved", 3)]


def test_an_incident_that_resolves_within_group_wait_never_pages():
    nf = make()
    nf.ingest([ev(1)], T0)
    nf.ingest([ev(1, "resolved", 2)], T0 + 10)
    assert sent(nf, T0 + 31) == []
    assert sent(nf, T0 + 4000) == []
    assert nf.groups == {}  # collected after the flap window


def test_transient_incidents_do_not_page():
    nf = make()
    nf.ingest([ev(1, severity="critical", transient=True)], T0)
    assert [n.receiver for n in sent(nf, T0 + 31)] == ["slack"]


def test_inhibited_symptom_is_not_notified_while_its_cause_fires():
    nf = make("""
grouping: {by: [incident], wait: 0s}
route: {receiver: slack}
receivers: [{type: console, name: slack}]
inhibit_rules:
  - source_matchers: ['root_cause="network-path"']
    target_matchers: ['root_cause="capacity"']
    equal: [endpoint]
""")
    from tailhound.incident import Scope

    cause = ev(1, root_cause="network-path", scope=Scope(endpoint="api.example.com"))
    symptom = ev(2, root_cause="capacity", scope=Scope(node="n1", endpoint="api.example.com"))
    other = ev(3, root_cause="capacity", scope=Scope(node="n2", endpoint="other.example.com"))
    nf.ingest([cause, symptom, other], T0)
    out = sent(nf, T0 + 1)
    assert sorted(n.group_id for n in out) == [cause.incident_id, other.incident_id]
    assert nf.groups[symptom.incident_id].suppressed == f"inhibited by {cause.incident_id}"
    nf.ingest([ev(1, "resolved", 2, root_cause="network-path", scope=cause.scope)], T0 + 100)
    out = sent(nf, T0 + 100 + RECHECK_S)
    assert [(n.group_id, n.kind) for n in out] == [(symptom.incident_id, "opened")]


def test_silence_suppresses_and_its_expiry_releases():
    nf = make()
    nf.add_silence(
        Silence(
            id="sil-1",
            matchers=[Matcher.parse('node="gpu-node-3"')],
            starts_at=T0,
            ends_at=T0 + 3600,
            author="ana",
            comment="rack maintenance",
            created_at=T0,
        )
    )
    nf.ingest([ev(1)], T0)
    assert sent(nf, T0 + 31) == []
    assert nf.groups[ev(1).incident_id].suppressed.startswith("silenced by sil-1 (ana: rack maintenance)")
    assert sent(nf, T0 + 31 + RECHECK_S) == []
    nf.expire_silence("sil-1", T0 + 100)
    out = sent(nf, T0 + 31 + 5 * RECHECK_S)
    assert [(n.receiver, n.kind) for n in out] == [("slack", "opened")]


def test_maintenance_window_from_config_silences():
    nf = make(
        CONFIG
        + """
maintenance:
  - matchers: ['node="gpu-node-3"']
    starts_at: 2026-09-21T00:00:00Z
    ends_at: 2026-09-23T00:00:00Z
    author: platform-team
    comment: driver upgrade
"""
    )
    nf.ingest([ev(1)], T0)  # T0 = 2026-09-21 14:13 UTC
    assert sent(nf, T0 + 31) == []
    assert "maintenance-1" in nf.groups[ev(1).incident_id].suppressed


def test_flapping_group_pages_at_most_once_per_flap_window():
    nf = make()
    pages = []
    t, seq = T0, 1
    nf.ingest([ev(1, seq=seq)], t)
    for _ in range(12):  # fires and clears every 3 minutes for over half an hour
        pages += sent(nf, t + 31)
        t += 90
        seq += 1
        nf.ingest([ev(1, "resolved", seq)], t)
        pages += sent(nf, t + 61)
        t += 90
        seq += 1
        nf.ingest([ev(1, "updated", seq)], t)  # the same incident id firing again
    pages += sent(nf, t + 31)
    kinds = [(n.kind, n.flapping) for n in pages]
    # opened, resolved, re-opened, resolved, then one flapping notice; nothing more in the window
    assert kinds[:4] == [("opened", False), ("resolved", False), ("opened", False), ("resolved", False)]
    assert kinds[4:] == [("updated", True)] or kinds[4:] == [("resolved", True)]
    # it settles: firing for a whole window -> one more notification with the current state
    settled = sent(nf, t + 1800 + RECHECK_S + 31)
    settled += sent(nf, t + 1800 + 2 * RECHECK_S + 31)
    assert [(n.kind, n.flapping) for n in settled] in ([("updated", False)], [("opened", False)])


def test_restart_mid_incident_sends_no_duplicate_and_still_resolves():
    nf = make()
    store: dict = {}

    def apply(outcome):
        for k, v in outcome.dirty.items():
            if v is None:
                store.pop(k, None)
            else:
                store[k] = v

    apply(nf.ingest([ev(1)], T0))
    apply(nf.flush(T0 + 31))
    for gid, name, n, _ in nf.deliverable(T0 + 31):
        apply(nf.delivered(gid, name, n.sequence, {"channel": "C1", "ts": "1.0"}, T0 + 31))
    restarted = Notifier.restore(parse_config(CONFIG), store)
    apply(restarted.ingest([ev(1)], T0 + 40))  # the streams side re-sends its last event after a crash
    assert restarted.flush(T0 + 400).created == []
    apply(restarted.ingest([ev(1, "resolved", 2)], T0 + 500))
    out = restarted.flush(T0 + 561).created
    assert [(n.kind, n.sequence) for n in out] == [("resolved", 2)]
    assert restarted.deliverable(T0 + 561)[0][3] == {"channel": "C1", "ts": "1.0"}  # Slack finds its message


def test_pending_notification_survives_restart():
    nf = make()
    store: dict = {}
    for outcome in (nf.ingest([ev(1)], T0), nf.flush(T0 + 31)):
        store.update(outcome.dirty)
    restarted = Notifier.restore(parse_config(CONFIG), store)
    due = restarted.deliverable(T0 + 32)
    assert [(n.kind, n.idempotency_key) for _, _, n, _ in due] == [("opened", "inc-0000000000000001/slack/1")]


def test_updates_queued_for_a_down_receiver_are_coalesced():
    nf = make(
        "grouping: {by: [incident], wait: 0s, interval: 0s}\nroute: {receiver: r}\n"
        "receivers: [{type: console, name: r}]\n"
    )
    nf.ingest([ev(1)], T0)
    nf.flush(T0)
    for i in range(2, 10):
        nf.ingest([ev(1, "updated", i, severity="critical" if i % 2 else "warning")], T0 + i)
        nf.flush(T0 + i)
    pending = nf.groups[ev(1).incident_id].logs["r"].pending
    assert [n.kind for n in pending] == ["opened", "updated"]
    assert pending[-1].incidents[0].sequence == 9


DEFAULTS = "route: {receiver: r}\nreceivers: [{type: console, name: r}]\n"


def test_flapping_group_that_keeps_firing_is_paged_again_once_it_settles_without_new_events():
    nf = make(DEFAULTS)  # default grouping (root cause + place) and flap control
    out = []
    nf.ingest([ev(1)], T0)
    out += sent(nf, T0 + 31)
    nf.ingest([ev(1, "resolved", 2)], T0 + 100)
    out += sent(nf, T0 + 161)
    nf.ingest([ev(2, ts=T0 + 300)], T0 + 300)  # the same cause on the same node fires again: new incident id
    t = T0 + 300
    while t < T0 + 4 * 3600:  # no event at all from here on: the notifier must come back by itself
        out += sent(nf, t)
        t += 10
    kinds = [(n.kind, n.flapping) for n in out]
    assert kinds[:3] == [("opened", False), ("resolved", False), ("updated", True)]
    # settled firing after the window: the page goes out again, once (plus 4 h repeats at most)
    assert kinds[3] == ("opened", False) and all(k == ("updated", False) for k in kinds[4:])
    assert out[3].lead.incident_id == ev(2).incident_id  # the firing incident leads, not the resolved one


def test_flapping_group_that_settles_resolved_sends_the_resolve():
    nf = make(DEFAULTS)
    out = []
    nf.ingest([ev(1)], T0)
    out += sent(nf, T0 + 31)
    nf.ingest([ev(1, "resolved", 2)], T0 + 100)
    out += sent(nf, T0 + 161)
    nf.ingest([ev(2)], T0 + 300)
    out += sent(nf, T0 + 331)
    nf.ingest([ev(2, "resolved", 2)], T0 + 400)
    t = T0 + 400
    while t < T0 + 3 * 3600:
        out += sent(nf, t)
        t += 10
    assert [(n.kind, n.flapping) for n in out] == [
        ("opened", False),
        ("resolved", False),
        ("updated", True),
        ("resolved", False),
    ]


def test_a_resolve_undone_within_the_minimum_flip_time_is_no_flip():
    nf = make(DEFAULTS)
    nf.ingest([ev(1)], T0)
    sent(nf, T0 + 31)
    nf.ingest([ev(1, "resolved", 2)], T0 + 100)
    nf.ingest([ev(2)], T0 + 130)  # fires again 30 s later: the resolve was never sent
    assert sent(nf, T0 + 200) == []
    grp = nf.groups[ev(1).incident_id]
    assert grp.flips == [] and not grp.flapping
    # the new incident joining is an update, after the group interval
    assert [(n.kind, n.flapping) for n in sent(nf, T0 + 331)] == [("updated", False)]
    nf.ingest([ev(2, "resolved", 2)], T0 + 600)
    out = sent(nf, T0 + 661)
    assert [(n.kind, n.flapping) for n in out] == [("resolved", False)]


def test_a_root_cause_change_is_notified():
    nf = make(DEFAULTS.replace("route:", "grouping: {by: [incident]}\nroute:"))
    nf.ingest([ev(1, root_cause="capacity")], T0)
    sent(nf, T0 + 31)
    nf.ingest([ev(1, "updated", 2, root_cause="gpu-thermal-throttle")], T0 + 60)
    out = sent(nf, T0 + 400)
    assert [(n.kind, n.lead.root_cause) for n in out] == [("updated", "gpu-thermal-throttle")]
