"""The Alertmanager receiver: the payload mapping and the delivery outcomes (a fake Alertmanager), then the
real thing (Debian's ``prometheus-alertmanager`` on loopback): alerts, dedup, resolve, silences,
re-posting, an HA pair, basic auth and a notifier takeover."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from datetime import datetime

import pytest
from pydantic import ValidationError

from tailhound.errors import ConfigError, DeliveryError
from tailhound.incident import Scope
from tailhound.notifier.config import NotifierConfig, parse_config
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.receivers import Receiver
from tailhound.notifier.receivers.alertmanager import (
    ALERTS_PATH,
    AlertmanagerConfig,
    AlertmanagerReceiver,
    alert_labels,
    alerts_endpoint,
    build_alerts,
    iso,
    resume_receivers,
    stand_by_receivers,
)
from tailhound.notifier.receivers.registry import build_receiver
from tests.conftest import require_tool

from .alertmanager_server import (
    BASIC_PASSWORD,
    BASIC_USER,
    run_alertmanager,
    serve_fake_alertmanager,
    serve_webhook_sink,
)
from .factories import T0, incident_event, notification
from .test_docs import NOTIFIER_MD, check_rows, section, table_rows, text

LOOPBACK = ["127.0.0.1"]
TOKEN = "am-b3arer-t0ken-SECRET"
ENV = {"AM_TOKEN": TOKEN, "AM_PASSWORD": BASIC_PASSWORD}
NOW = T0 + 120


def config(urls: list[str] | str, **over) -> AlertmanagerConfig:
    data = dict(type="alertmanager", name="am", urls=[urls] if isinstance(urls, str) else urls, timeout_s=2)
    data.update(over)
    return AlertmanagerConfig.model_validate(data)


def receiver(urls: list[str] | str, clock=lambda: NOW, **over) -> AlertmanagerReceiver:
    return AlertmanagerReceiver(config(urls, **over), ENV, allowed_hosts=LOOPBACK, clock=clock)


def ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


# --- config -----------------------------------------------------------------------------------------------------------
def test_config_in_a_notifier_file():
    cfg = parse_config("""
route: {receiver: am}
receivers:
  - type: alertmanager
    name: am
    urls: [http://am-0.monitoring:9093, http://am-1.monitoring:9093/]
    repost_interval: 30s
    labels: {cluster: prod-eu}
    basic_auth: {username: tailhound, password: {env: AM_PASSWORD}}
""")
    am = cfg.receiver("am")
    assert isinstance(am, AlertmanagerConfig)
    assert am.repost_interval == 30.0 and am.hold_s == 90.0
    assert am.timeout_s == 10 and am.alertname == "TailhoundIncident"


@pytest.mark.parametrize(
    ("over", "match"),
    [
        (dict(bearer_token=TOKEN), "never written inline"),
        (dict(basic_auth={"username": "u", "password": "hunter2-pw"}), "never written inline"),
        (dict(bearer_token={"env": "T"}, basic_auth={"username": "u", "password": {"env": "P"}}), "at most one"),
        (dict(labels={"team-name": "x"}), "not valid in Alertmanager"),
        (dict(labels={"severity": "page"}), "set by the alertmanager receiver"),
        (dict(labels={"team": ""}), "empty value"),
        (dict(timeout_s=60, repost_interval="30s"), "shorter than repost_interval"),
        (dict(repost_interval="500ms"), "greater than or equal to 1"),
        (dict(urls=[]), "at least 1"),
        (dict(urls=["http://u:p@am:9093"]), "credentials in the url"),
        (dict(urls=["http://am:9093?x=1"]), "no query"),
        (dict(urls=["ftp://am:9093"]), r"http\(s\)"),
        (dict(urls=["http://am:9093", "http://am:9093/api/v2/alerts"]), "listed twice"),
        (dict(console_url="grafana/d/x"), "http"),
        (dict(colour="red"), "Extra inputs"),
    ],
)
def test_config_refuses(over, match):
    with pytest.raises(ValidationError, match=match) as info:
        config(over.pop("urls", "http://am:9093"), **over)
    assert TOKEN not in str(info.value) and "hunter2-pw" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("http://am:9093", "http://am:9093/api/v2/alerts"),
        ("http://am:9093/", "http://am:9093/api/v2/alerts"),
        ("https://mon.example.com/alertmanager", "https://mon.example.com/alertmanager/api/v2/alerts"),
        ("http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts"),
    ],
)
def test_alerts_endpoint(url, endpoint):
    assert alerts_endpoint(url) == endpoint


def test_allow_list_and_secrets_checked_when_built():
    with pytest.raises(ConfigError, match=r"alertmanager receiver 'am': host 'am-1\.example' is not in"):
        build_receiver(config(["http://127.0.0.1:9093", "http://am-1.example:9093"]), allowed_hosts=LOOPBACK)
    with pytest.raises(ConfigError, match="is not in notifier.webhook_allowed_hosts"):
        build_receiver(config("https://am.example"), allowed_hosts=[])  # no default hosts for this kind
    with pytest.raises(ConfigError, match="receiver 'am'.*env AM_TOKEN is not set"):
        build_receiver(
            config("http://127.0.0.1:9093", bearer_token={"env": "AM_TOKEN"}), allowed_hosts=LOOPBACK, environ={}
        )
    built = build_receiver(config("http://127.0.0.1:9093"), allowed_hosts=LOOPBACK, environ={})
    assert isinstance(built, AlertmanagerReceiver) and isinstance(built, Receiver)


# --- the alerts -------------------------------------------------------------------------------------------------------
def test_labels_annotations_and_times():
    inc = incident_event(
        labels={"team": "ml-platform", "tier-1": "yes", "rules": "gpu-thermal-throttle,tpot-high"},
        rule_origin="rules/node.yaml:12",
        rules_version="git:0123abc",
    )
    related = incident_event(incident_id="inc-0000000000000002", root_cause="nvlink-degraded", node="gpu-node-4")
    n = notification(
        "opened",
        incidents=[inc, related],
        links={"runbook": "https://runbooks.example/thermal", "dashboard": "https://grafana.example/d/x"},
    )
    cfg = config(
        "http://am:9093",
        labels={"cluster": "prod-eu", "team": "overridden-by-the-rule"},
        console_url="https://console.example/incidents/{incident_id}",
    )
    alerts = build_alerts(n, cfg, NOW)
    assert len(alerts) == 2
    a = alerts[0]
    assert a["labels"] == {
        "alertname": "TailhoundIncident",
        "root_cause": "gpu-thermal-throttle",
        "severity": "warning",
        "incident_id": inc.incident_id,
        "rule": "gpu-thermal-throttle",
        "node": "gpu-node-3",
        "gpus": "2",
        "model": "llama-3-70b",
        "engine": "vllm-0",
        "team": "ml-platform",
        "tier_1": "yes",
        "cluster": "prod-eu",
    }
    assert a["startsAt"] == iso(T0) and ts(a["startsAt"]) == T0
    assert ts(a["endsAt"]) == pytest.approx(NOW + 3 * 60)
    assert a["generatorURL"] == f"https://console.example/incidents/{inc.incident_id}"
    ann = a["annotations"]
    assert ann["summary"] == inc.summary
    assert ann["evidence"].splitlines() == [f"- {e.describe()}" for e in inc.evidence]
    assert ann["evidence"].startswith("- gpu.temperature{gpu=2} = 91 C (>= 85 C) for 300s")
    assert ann["actions"] == "1. Check cooling and inlet temperature of the rack\n2. Drain the node if clocks stay low"
    assert ann["runbook_url"] == "https://runbooks.example/thermal"
    assert ann["dashboard_url"] == "https://grafana.example/d/x"
    assert ann["rules"] == "gpu-thermal-throttle,tpot-high"
    assert ann["current_severity"] == "warning" and ann["transient"] == "false"
    desc = ann["description"]
    for part in (
        "Root cause: gpu-thermal-throttle (GPU thermal throttle), severity warning, persistent",
        "Scope: node gpu-node-3 / GPU 2 / model llama-3-70b / engine vllm-0",
        f"Opened: {iso(T0)}",
        "Rule: gpu-thermal-throttle, defined at node.yaml:12 of the rule pack, version git:0123abc",
        f"tailhound group {n.group_id}",
        "Related in the group: inc-0000000000000002",
    ):
        assert part in desc, (part, desc)
    assert "flapping" not in ann
    assert alerts[1]["labels"]["root_cause"] == "nvlink-degraded" and alerts[1]["labels"]["node"] == "gpu-node-4"


def test_alertname_from_root_cause_fleet_scope_and_console_link():
    inc = incident_event(scope=Scope(model="llama-3-70b", nodes=["gpu-node-1", "gpu-node-2"]), labels={})
    n = notification(incidents=[inc], links={"console": "https://console.example/"}, flapping=True)
    [a] = build_alerts(n, config("http://am:9093", alertname="tailhound-{root_cause}"), NOW)
    assert a["labels"]["alertname"] == "tailhound-gpu-thermal-throttle"
    assert a["labels"]["nodes"] == "gpu-node-1,gpu-node-2" and "node" not in a["labels"]
    assert a["generatorURL"] == "https://console.example/"
    assert a["annotations"]["flapping"] == "true" and "Flapping" in a["annotations"]["description"]
    [plain] = build_alerts(notification(incidents=[inc], links={}), config("http://am:9093"), NOW)
    assert "generatorURL" not in plain


def test_resolve_ends_at_resolved_at_never_after_now_never_before_the_start():
    cfg = config("http://am:9093")
    [a] = build_alerts(notification("resolved", incidents=[incident_event(event="resolved", ts=T0 + 90)]), cfg, NOW)
    assert ts(a["endsAt"]) == T0 + 90 and ts(a["startsAt"]) == T0
    assert "Resolved: " + iso(T0 + 90) in a["annotations"]["description"]
    [ahead] = build_alerts(
        notification("resolved", incidents=[incident_event(event="resolved", ts=NOW + 50)]), cfg, NOW
    )
    assert ts(ahead["endsAt"]) == NOW  # an agent clock ahead of ours must not keep it firing
    [early] = build_alerts(
        notification("resolved", incidents=[incident_event(event="resolved", ts=T0 + 5, opened_at=NOW + 10)]), cfg, NOW
    )
    assert ts(early["endsAt"]) == ts(early["startsAt"])  # Alertmanager refuses endsAt before startsAt
    # in an update, a resolved member is resolved and the firing one fires
    firing, done = incident_event(), incident_event(incident_id="inc-0000000000000009", event="resolved", ts=T0 + 30)
    one, two = build_alerts(notification("updated", incidents=[firing, done]), cfg, NOW)
    assert ts(one["endsAt"]) > NOW and ts(two["endsAt"]) == T0 + 30


def test_labels_are_the_same_for_every_step_of_an_incident():
    cfg = config("http://am:9093")
    steps = [
        incident_event(),
        incident_event(event="updated", sequence=2, ts=T0 + 60),
        incident_event(event="resolved", sequence=3, ts=T0 + 600),
    ]
    assert len({json.dumps(alert_labels(s, cfg), sort_keys=True) for s in steps}) == 1


# --- delivery against a fake Alertmanager ---------------------------------------------------------------------------
@pytest.fixture
async def fake():
    async with serve_fake_alertmanager() as f:
        yield f


@pytest.fixture
async def fake2():
    async with serve_fake_alertmanager(prefix="/am") as f:
        yield f


async def test_a_changed_incident_keeps_its_first_labels_also_after_a_restart(fake):
    r = receiver(fake.url)
    try:
        opened = notification("opened", sequence=1)
        receipt = await r.send(opened, None)
        assert receipt["state"] == "firing"
        escalated = incident_event(
            event="updated",
            sequence=2,
            severity="critical",
            labels={"team": "infra"},
            scope=Scope(model="llama-3-70b", nodes=["gpu-node-3", "gpu-node-5"]),
        )
        receipt = await r.send(notification("updated", sequence=2, incidents=[escalated]), receipt)
    finally:
        await r.close()
    first, second = fake.alerts()
    assert second["labels"] == first["labels"] and first["labels"]["severity"] == "warning"
    assert second["annotations"]["current_severity"] == "critical"
    assert "nodes gpu-node-3, gpu-node-5" in second["annotations"]["description"]
    # a new process (a restart) gets the labels from the durable receipt
    again = receiver(fake.url)
    try:
        resolved = incident_event(
            event="resolved", sequence=3, severity="critical", ts=T0 + 100, scope=Scope(model="llama-3-70b")
        )
        final = await again.send(notification("resolved", sequence=3, incidents=[resolved]), receipt)
    finally:
        await again.close()
    assert final["state"] == "resolved"
    assert fake.alerts()[2]["labels"] == first["labels"] and ts(fake.alerts()[2]["endsAt"]) == T0 + 100
    assert json.loads(final["labels"]) == {opened.group_id: first["labels"]}


async def test_every_alertmanager_gets_every_post_one_is_enough(fake, fake2, caplog):
    r = receiver([fake.url, fake2.url])
    try:
        await r.send(notification(), None)
        assert len(fake.posts) == len(fake2.posts) == 1 and fake.posts[0].alerts == fake2.posts[0].alerts
        assert fake2.url.endswith("/am")
        fake.fail_next(503)
        assert (await r.send(notification("updated", sequence=2), None))["state"] == "firing"
        assert "HTTP 503" in caplog.text and "the others accepted it" in caplog.text
        fake.fail_next(500)
        fake2.fail_next(429, retry_after="7")
        with pytest.raises(DeliveryError) as info:
            await r.send(notification("updated", sequence=3), None)
        assert info.value.retryable is True and info.value.retry_after == 7.0
        assert "every Alertmanager failed" in info.value.reason and "HTTP 500" in info.value.reason
        fake.fail_next(400, "invalid label set")
        fake2.fail_next(400, "invalid label set")
        with pytest.raises(DeliveryError, match="invalid label set") as info:
            await r.send(notification("updated", sequence=4), None)
        assert info.value.retryable is False and info.value.status == 400
    finally:
        await r.close()


async def test_timeouts_and_refused_connections_are_retryable(fake):
    fake.delay_s = 1.0
    r = receiver(fake.url, timeout_s=0.2, repost_interval=1)
    dead = receiver("http://127.0.0.1:9")
    try:
        with pytest.raises(DeliveryError, match="timed out") as info:
            await r.send(notification(), None)
        assert info.value.retryable is True
        with pytest.raises(DeliveryError) as info:
            await dead.send(notification(), None)
        assert info.value.retryable is True
    finally:
        await r.close()
        await dead.close()


@pytest.mark.parametrize(
    ("over", "header", "secret"),
    [
        (dict(bearer_token={"env": "AM_TOKEN"}), f"Bearer {TOKEN}", TOKEN),
        (
            dict(basic_auth={"username": BASIC_USER, "password": {"env": "AM_PASSWORD"}}),
            "Basic " + base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode(),
            BASIC_PASSWORD,
        ),
    ],
    ids=["bearer", "basic"],
)
async def test_credentials_are_sent_and_never_shown(fake, caplog, over, header, secret):
    caplog.set_level(logging.DEBUG)
    r = receiver(fake.url, **over)
    try:
        await r.send(notification(), None)
        assert fake.posts[0].headers["Authorization"] == header
        fake.fail_next(401, f"bad credentials: {header} ({secret})")  # a far side that echoes them
        with pytest.raises(DeliveryError, match="HTTP 401: bad credentials") as info:
            await r.send(notification("updated", sequence=2), None)
    finally:
        await r.close()
    assert info.value.retryable is False and info.value.status == 401
    for shown in (info.value.reason, caplog.text, repr(r), str(r.config), str(r.config.model_dump())):
        assert secret not in shown and header.split(" ", 1)[1] not in shown


async def test_send_time_allow_list_check(fake):
    r = receiver(fake.url)
    r._endpoints.append("http://alertmanager.evil.example/api/v2/alerts")  # as if the list had changed
    r._hosts["http://alertmanager.evil.example/api/v2/alerts"] = "alertmanager.evil.example"
    try:
        assert (await r.send(notification(), None))["state"] == "firing"  # the allowed one took it
        r._endpoints.remove(fake.url + ALERTS_PATH)
        with pytest.raises(DeliveryError, match="refused to send: host 'alertmanager.evil.example'") as info:
            await r.send(notification("updated", sequence=2), None)
    finally:
        await r.close()
    assert info.value.retryable is False and len(fake.posts) == 1


async def test_repost_moves_ends_at_ahead_and_repeats_the_resolve_until_the_last_ends_at(fake):
    now = [NOW]
    r = receiver(fake.url, clock=lambda: now[0], repost_interval="1m")
    try:
        await r.send(notification(), None)
        assert r.open_groups == [notification().group_id]
        now[0] += 60
        assert await r.repost() == 1
        assert ts(fake.alerts()[-1]["endsAt"]) == NOW + 60 + 180
        assert fake.alerts()[-1]["labels"] == fake.alerts()[0]["labels"]
        receipt = await r.send(
            notification("resolved", sequence=2, incidents=[incident_event(event="resolved", sequence=2, ts=NOW + 30)]),
            None,
        )
        assert receipt["state"] == "resolved" and r.open_groups == []
        now[0] += 60
        assert await r.repost() == 1 and ts(fake.alerts()[-1]["endsAt"]) == NOW + 30  # the resolve again
        now[0] += 121  # past the last firing endsAt: nothing left to say
        assert await r.repost() == 0
        # a flapping notice for the resolved group is not sent (it would fire again there)
        flapping = notification("updated", sequence=3, flapping=True)
        assert await r.send(flapping, receipt) == receipt
        assert len(fake.posts) == 4
    finally:
        await r.close()


async def test_the_loop_reposts_on_its_own_and_stops_when_nothing_is_open(fake):
    r = receiver(fake.url, clock=time.time, repost_interval=1, timeout_s=0.5)
    try:
        await r.send(notification(incidents=[incident_event(ts=time.time(), opened_at=time.time() - 60)]), None)
        await asyncio.sleep(2.5)
        assert r.reposts >= 2 and len(fake.posts) >= 3
        await r.stand_by()  # another instance is active now
        posts = len(fake.posts)
        await asyncio.sleep(1.3)
        assert len(fake.posts) == posts and r.open_groups == []
    finally:
        await r.close()


async def _delivered(nf: Notifier, receivers: dict, now: float) -> list:
    """Flush `nf` and deliver what is due through the receivers (as the deliver stage does)."""
    nf.flush(now)
    out = []
    for gid, name, n, receipt in nf.deliverable(now):
        got = await receivers[name].send(n, receipt or None)
        nf.delivered(gid, name, n.sequence, got, now)
        out.append(n)
    return out


def _notifier_config(*urls: str, interval: str = "1m") -> NotifierConfig:
    urls_yaml = ", ".join(urls)
    return parse_config(f"""
grouping: {{wait: 0s}}
route: {{receiver: am}}
receivers:
  - {{type: alertmanager, name: am, urls: [{urls_yaml}], repost_interval: {interval}, timeout_s: 0.9}}
""")


async def test_takeover_resumes_the_groups_told_firing_with_their_labels(fake):
    cfg = _notifier_config(fake.url)
    nf = Notifier(cfg)
    first = AlertmanagerReceiver(cfg.receiver("am"), allowed_hosts=LOOPBACK, clock=lambda: NOW)  # type: ignore[arg-type]
    done = incident_event(incident_id="inc-00000000000000dd", node="gpu-node-9")
    nf.ingest([incident_event(), done], T0)
    await _delivered(nf, {"am": first}, T0 + 1)
    nf.ingest(
        [incident_event(incident_id=done.incident_id, event="resolved", sequence=2, node="gpu-node-9", ts=T0 + 2)],
        T0 + 2,
    )
    await _delivered(nf, {"am": first}, T0 + 200)
    await first.close()
    assert {p.alerts[0]["labels"]["incident_id"] for p in fake.posts} == {
        incident_event().incident_id,
        done.incident_id,
    }
    labels = next(p.alerts[0]["labels"] for p in fake.posts if p.alerts[0]["labels"]["node"] == "gpu-node-3")
    # the state as another instance reads it from the state topic
    items = {f"group:{gid}": g.model_dump(mode="json") for gid, g in nf.groups.items()}
    restored = Notifier.restore(cfg, items, now=NOW)
    second = AlertmanagerReceiver(cfg.receiver("am"), allowed_hosts=LOOPBACK, clock=lambda: NOW)  # type: ignore[arg-type]
    try:
        posts = len(fake.posts)
        await resume_receivers({"am": second, "other": object()}, restored, NOW)
        [resumed] = fake.posts[posts:]
        assert [a["labels"] for a in resumed.alerts] == [labels]  # the resolved group is not resumed
        assert ts(resumed.alerts[0]["endsAt"]) == NOW + 180
        assert resumed.alerts[0]["annotations"]["runbook_url"].endswith("#gpu-thermal-throttle")
        await stand_by_receivers({"am": second, "other": object()})
        assert second.open_groups == [] and await second.repost() == 0
    finally:
        await second.close()


# --- docs ---------------------------------------------------------------------------------------------------------
def test_fields_are_documented_with_their_defaults():
    rows = table_rows(section(text(NOTIFIER_MD), "### `alertmanager`"))
    check_rows(rows, list(AlertmanagerConfig.model_fields.items()), "notifier.md, receiver alertmanager")
    for name in ("basic_auth.username", "basic_auth.password"):
        assert name in rows


# --- a real Alertmanager --------------------------------------------------------------------------------------------
@pytest.fixture
def am_binary() -> str:
    return require_tool("prometheus-alertmanager", "apt-get install prometheus-alertmanager")


@pytest.fixture
async def sink():
    async with serve_webhook_sink() as s:
        yield s


@pytest.fixture
async def am(am_binary, sink, tmp_path):
    async with run_alertmanager(am_binary, tmp_path / "am", sink.url) as a:
        yield a


def live(incident_id: str = "inc-0000000000000001", event: str = "opened", sequence: int = 1, **over):
    now = time.time()
    over.setdefault("ts", now)
    return incident_event(incident_id=incident_id, event=event, sequence=sequence, opened_at=now - 60, **over)


async def test_real_alertmanager_one_alert_per_incident_from_open_to_resolve(am, sink):
    r = AlertmanagerReceiver(
        config(am.url, console_url="http://console.example/i/{incident_id}"), allowed_hosts=LOOPBACK
    )
    inc = live()
    try:
        receipt = await r.send(notification("opened", incidents=[inc]), None)
        alert = await am.alert(inc.incident_id)
        assert alert is not None and alert["status"]["state"] == "active"
        assert {
            k: alert["labels"][k]
            for k in ("alertname", "root_cause", "severity", "incident_id", "node", "gpus", "model", "engine", "team")
        } == {
            "alertname": "TailhoundIncident",
            "root_cause": "gpu-thermal-throttle",
            "severity": "warning",
            "incident_id": inc.incident_id,
            "node": "gpu-node-3",
            "gpus": "2",
            "model": "llama-3-70b",
            "engine": "vllm-0",
            "team": "ml-platform",
        }
        assert alert["annotations"]["summary"] == inc.summary
        assert alert["annotations"]["actions"].startswith("1. Check cooling")
        assert alert["annotations"]["runbook_url"].startswith("https://")
        assert alert["generatorURL"] == f"http://console.example/i/{inc.incident_id}"
        assert ts(alert["startsAt"]) == pytest.approx(inc.opened_at, abs=0.001)
        firing = await sink.wait_for("firing", inc.incident_id)
        assert firing["labels"] == alert["labels"]

        # an update (severity up, new evidence): still one alert, the same labels, new annotations
        up = live(event="updated", sequence=2, severity="critical", summary="hotter now")
        receipt = await r.send(notification("updated", sequence=2, incidents=[up]), receipt)
        [only] = [a for a in await am.alerts() if a["labels"]["incident_id"] == inc.incident_id]
        assert only["fingerprint"] == alert["fingerprint"] and only["labels"] == alert["labels"]
        assert only["annotations"]["summary"] == "hotter now" and only["annotations"]["current_severity"] == "critical"

        # the resolve: gone from the active alerts, and Alertmanager sends "resolved"
        done = live(event="resolved", sequence=3, severity="critical")
        await r.send(notification("resolved", sequence=3, incidents=[done]), receipt)
        assert await am.alert(inc.incident_id) is None
        resolved = await sink.wait_for("resolved", inc.incident_id)
        assert resolved["labels"] == alert["labels"] and ts(resolved["endsAt"]) == pytest.approx(done.ts, abs=0.001)
    finally:
        await r.close()


async def test_real_alertmanager_silence_on_root_cause(am):
    r = AlertmanagerReceiver(config(am.url), allowed_hosts=LOOPBACK)
    thermal, other = live(), live(incident_id="inc-0000000000000002", root_cause="kv-cache-pressure")
    try:
        silence_id = await am.silence("root_cause", "gpu-thermal-throttle")
        await r.send(notification(incidents=[thermal]), None)
        await r.send(notification(incidents=[other]), None)
        deadline = time.monotonic() + 10
        while (alert := await am.alert(thermal.incident_id))["status"]["state"] != "suppressed":
            assert time.monotonic() < deadline, alert
            await asyncio.sleep(0.1)
        assert alert["status"]["silencedBy"] == [silence_id]
        assert (await am.alert(other.incident_id))["status"]["state"] == "active"
        assert [a["labels"]["incident_id"] for a in await am.alerts(silenced="false")] == [other.incident_id]
    finally:
        await r.close()


async def test_real_alertmanager_repost_keeps_an_open_incident_active_past_its_first_ends_at(am, sink):
    r = AlertmanagerReceiver(config(am.url, repost_interval=1, timeout_s=0.9), allowed_hosts=LOOPBACK)
    inc = live()
    try:
        await r.send(notification(incidents=[inc]), None)
        first = await am.alert(inc.incident_id)
        first_end = ts(first["endsAt"])
        assert first_end - time.time() == pytest.approx(3.0, abs=0.5)
        await asyncio.sleep(first_end - time.time() + 1.0)  # past the first endsAt
        now = await am.alert(inc.incident_id)
        assert now is not None and now["status"]["state"] == "active" and ts(now["endsAt"]) > first_end
        assert r.reposts >= 3
    finally:
        await r.close()  # nothing re-posts it any more: Alertmanager resolves it by itself
    await sink.wait_for("resolved", inc.incident_id, timeout=10)
    assert await am.alert(inc.incident_id) is None
    assert len(sink.alerts("firing")) >= 1


async def test_real_alertmanager_ha_pair_each_gets_every_alert(am_binary, sink, tmp_path):
    async with (
        run_alertmanager(am_binary, tmp_path / "a", sink.url) as a,
        run_alertmanager(am_binary, tmp_path / "b", sink.url) as b,
    ):
        r = AlertmanagerReceiver(config([a.url, b.url, "http://127.0.0.1:9"]), allowed_hosts=LOOPBACK)
        inc = live()
        try:
            await r.send(notification(incidents=[inc]), None)  # the third one is down: two is plenty
            one, two = await a.alert(inc.incident_id), await b.alert(inc.incident_id)
            assert one is not None and two is not None and one["labels"] == two["labels"]
            await r.send(notification("resolved", sequence=2, incidents=[live(event="resolved", sequence=2)]), None)
            assert await a.alert(inc.incident_id) is None and await b.alert(inc.incident_id) is None
        finally:
            await r.close()


async def test_real_alertmanager_basic_auth(am_binary, sink, tmp_path):
    async with run_alertmanager(am_binary, tmp_path / "auth", sink.url, basic_auth=True) as a:
        good = AlertmanagerReceiver(
            config(a.url, basic_auth={"username": BASIC_USER, "password": {"env": "AM_PASSWORD"}}),
            ENV,
            allowed_hosts=LOOPBACK,
        )
        anonymous = AlertmanagerReceiver(config(a.url), allowed_hosts=LOOPBACK)
        inc = live()
        try:
            with pytest.raises(DeliveryError, match="HTTP 401") as info:
                await anonymous.send(notification(incidents=[inc]), None)
            assert info.value.retryable is False
            await good.send(notification(incidents=[inc]), None)
            assert (await a.alert(inc.incident_id))["status"]["state"] == "active"
        finally:
            await good.close()
            await anonymous.close()


async def test_real_alertmanager_takeover_keeps_the_alert_alive(am):
    """The instance that paged dies; the next one rebuilds the state and resumes re-posting."""
    cfg = _notifier_config(am.url, interval="1s")
    nf = Notifier(cfg)
    inc = live()
    dying = build_receiver(cfg.receiver("am"), allowed_hosts=LOOPBACK)
    nf.ingest([inc], time.time())
    assert [n.kind for n in await _delivered(nf, {"am": dying}, time.time() + 1)] == ["opened"]
    await dying.close()
    first_end = ts((await am.alert(inc.incident_id))["endsAt"])
    items = {f"group:{gid}": g.model_dump(mode="json") for gid, g in nf.groups.items()}
    active = build_receiver(cfg.receiver("am"), allowed_hosts=LOOPBACK)
    try:
        await resume_receivers({"am": active}, Notifier.restore(cfg, items), time.time())
        await asyncio.sleep(first_end - time.time() + 1.0)
        [alert] = await am.alerts()
        assert alert["labels"]["incident_id"] == inc.incident_id and ts(alert["endsAt"]) > first_end
    finally:
        await active.close()


def test_generator_url_without_console_url_is_the_console_the_api_serves(monkeypatch):
    """No `console_url`: links (and generatorURL) name the console this notifier's API serves, as Prometheus
    derives its external URL; a wildcard listen address names this host, an unknown port gives no link."""
    import socket

    from tailhound.settings import NotifierSettings

    monkeypatch.setattr(socket, "getfqdn", lambda *a: "notifier-0.example")
    assert NotifierSettings().console_link_base() == "http://127.0.0.1:9095/console"
    assert NotifierSettings(api_listen="0.0.0.0:9095").console_link_base() == "http://notifier-0.example:9095/console"
    assert NotifierSettings(api_listen="[::]:9095").console_link_base() == "http://notifier-0.example:9095/console"
    assert NotifierSettings(api_listen="[::1]:9095").console_link_base() == "http://[::1]:9095/console"
    assert NotifierSettings(api_listen="127.0.0.1:0").console_link_base() is None
    assert NotifierSettings(api_listen="").console_link_base() is None
    assert NotifierSettings(console=False).console_link_base() is None
    assert (
        NotifierSettings(console_url="https://th.example/console/").console_link_base() == "https://th.example/console"
    )
