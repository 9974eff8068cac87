"""PagerDuty receiver against a fake Events API v2 that validates events like PagerDuty does."""

from __future__ import annotations

import logging
from datetime import datetime

import pytest
from pydantic import ValidationError

from tailhound.errors import ConfigError, DeliveryError
from tailhound.notifier.receivers import Receiver
from tailhound.notifier.receivers.pagerduty import PagerDutyConfig, PagerDutyReceiver, build_event

from .factories import incident_event, notification
from .pagerduty_server import Fault, serve_pagerduty

ROUTING_KEY = "R0UT1NGK3Y0123456789abcdefSECRET"  # 32 characters, like a real integration key
ENV = {"PD_KEY": ROUTING_KEY}
LOOPBACK = ["127.0.0.1"]  # the local fake servers: allowed explicitly, as an operator would


def config(url: str, **over) -> PagerDutyConfig:
    data = dict(type="pagerduty", name="pd-oncall", routing_key={"env": "PD_KEY"}, url=url, timeout_s=2)
    data.update(over)
    return PagerDutyConfig.model_validate(data)


@pytest.fixture
async def pd():
    async with serve_pagerduty() as fake:
        yield fake


@pytest.fixture
async def receiver(pd):
    r = PagerDutyReceiver(config(pd.url), allowed_hosts=LOOPBACK, environ=ENV)
    yield r
    await r.close()


def assert_no_key(*texts: str) -> None:
    for text in texts:
        assert ROUTING_KEY not in text


async def test_trigger_update_resolve_share_one_alert(pd, receiver):
    assert isinstance(receiver, Receiver)
    opened = notification("opened", sequence=1)
    receipt = await receiver.send(opened, None)
    assert receipt == {"dedup_key": opened.group_id, "state": "triggered"}
    receipt = await receiver.send(notification("updated", sequence=2), receipt)
    assert receipt == {"dedup_key": opened.group_id, "state": "triggered"}
    receipt = await receiver.send(notification("resolved", sequence=3), receipt)
    assert receipt == {"dedup_key": opened.group_id, "state": "resolved"}
    # it re-fires and flaps: the flapping notice does not re-page an alert already resolved
    flapping = notification("updated", sequence=4, flapping=True)
    assert await receiver.send(flapping, receipt) == receipt

    assert [e["event_action"] for e in pd.accepted] == ["trigger", "trigger", "resolve"]
    assert {e["dedup_key"] for e in pd.accepted} == {opened.group_id}
    assert list(pd.alerts) == [opened.group_id]
    alert = pd.alerts[opened.group_id]
    assert alert.status == "resolved" and len(alert.events) == 3


async def test_trigger_event_fields(pd, receiver):
    inc = incident_event(severity="critical", labels={"team": "ml-platform"})
    related = incident_event(incident_id="inc-0000000000000002", root_cause="nvlink-degraded")
    n = notification("opened", incidents=[inc, related], flapping=True)
    await receiver.send(n, None)
    event = pd.accepted[0]
    assert event["routing_key"] == ROUTING_KEY
    payload = event["payload"]
    assert payload["summary"] == n.title()
    assert payload["source"] == "gpu-node-3"
    assert payload["severity"] == "critical"
    assert payload["component"] == "vllm-0" and payload["group"] == "llama-3-70b"
    assert payload["class"] == "gpu-thermal-throttle"
    assert datetime.fromisoformat(payload["timestamp"]).timestamp() == pytest.approx(inc.ts)
    details = payload["custom_details"]
    assert details["incident_ids"] == [inc.incident_id, related.incident_id]
    assert details["rule"] == "gpu-thermal-throttle"
    assert details["flapping"] is True and details["transient"] is False
    assert details["suggested_actions"] == list(inc.actions)
    assert details["scope"]["node"] == "gpu-node-3" and details["scope"]["gpus"] == ["2"]
    temp = details["evidence"][0]
    assert temp["signal"] == "gpu.temperature" and temp["value"] == 91.0 and temp["threshold"] == 85.0
    assert temp["window_s"] == 300 and temp["labels"] == {"gpu": "2"}
    assert details["evidence"][1]["baseline"] == 0.035
    assert details["related"][0]["root_cause"] == "nvlink-degraded"
    assert event["links"] == [{"href": n.links["runbook"], "text": "runbook"}]
    assert event["client"] == "tailhound"


async def test_severity_map_and_fleet_source(pd):
    r = PagerDutyReceiver(config(pd.url, severity_map={"warning": "error"}), allowed_hosts=LOOPBACK, environ=ENV)
    try:
        await r.send(notification(incidents=[incident_event(severity="warning", node=None, gpus=())]), None)
        await r.send(notification(incidents=[incident_event(severity="info")]), None)
    finally:
        await r.close()
    assert pd.accepted[0]["payload"]["severity"] == "error"
    assert pd.accepted[0]["payload"]["source"] == "fleet"
    assert pd.accepted[1]["payload"]["severity"] == "info"


def test_config_validation():
    with pytest.raises(ValidationError):
        config("https://x", severity_map={"warning": "page-everyone"})
    with pytest.raises(ValidationError):
        config("https://x", routing_key=ROUTING_KEY)  # inline secrets are refused
    with pytest.raises(ValidationError):
        config("https://x", colour="red")
    with pytest.raises(ValidationError):
        config("ftp://x")
    assert config("https://x").url == "https://x"
    assert PagerDutyConfig(type="pagerduty", name="a", routing_key={"env": "K"}).url.startswith(
        "https://events.pagerduty.com/"
    )
    with pytest.raises(ConfigError, match="PD_KEY"):
        PagerDutyReceiver(config("https://events.pagerduty.com/v2/enqueue"), environ={})


async def test_long_summary_is_truncated_and_accepted(pd, receiver):
    n = notification(incidents=[incident_event(summary="hot " * 600)])
    assert len(n.title()) > 1024
    await receiver.send(n, None)
    summary = pd.accepted[0]["payload"]["summary"]
    assert len(summary) == 1024 and summary.endswith("…")


async def test_resolve_needs_only_the_key(pd, receiver):
    event = build_event(notification("resolved"), ROUTING_KEY, receiver.config)
    assert set(event) == {"routing_key", "dedup_key", "event_action"}
    await receiver.send(notification("resolved"), None)
    assert pd.accepted[0]["event_action"] == "resolve"


async def test_400_is_not_retryable_and_carries_pagerduty_errors(pd, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    bad = PagerDutyReceiver(config(pd.url, severity_map={}), allowed_hosts=LOOPBACK, environ={"PD_KEY": "too-short"})
    try:
        with pytest.raises(DeliveryError) as info:
            await bad.send(notification(), None)
    finally:
        await bad.close()
    err = info.value
    assert err.retryable is False and err.status == 400
    assert "Event object is invalid" in err.reason and "'routing_key' must be 32 characters" in err.reason
    assert "too-short" not in err.reason and "too-short" not in caplog.text


@pytest.mark.parametrize(
    ("fault", "retry_after"),
    [
        (Fault(429, retry_after="7"), 7.0),
        (Fault(429), None),
        (Fault(500), None),
        (Fault(502, body="bad gateway"), None),
        (Fault(503, retry_after="2"), 2.0),
    ],
)
async def test_throttling_and_server_errors_are_retryable(pd, receiver, fault, retry_after):
    pd.fail_next(fault)
    with pytest.raises(DeliveryError) as info:
        await receiver.send(notification(), None)
    assert info.value.retryable is True
    assert info.value.status == fault.status
    assert info.value.retry_after == retry_after
    # the retry (same event) then goes through
    assert await receiver.send(notification(), None) == {"dedup_key": notification().group_id, "state": "triggered"}
    assert len(pd.requests) == 2 and pd.requests[0] == pd.requests[1]


async def test_timeout_is_retryable(pd):
    r = PagerDutyReceiver(config(pd.url, timeout_s=0.2), allowed_hosts=LOOPBACK, environ=ENV)
    pd.fail_next(Fault(0, delay_s=1.0))
    try:
        with pytest.raises(DeliveryError, match="timed out") as info:
            await r.send(notification(), None)
    finally:
        await r.close()
    assert info.value.retryable is True


async def test_connection_refused_is_retryable():
    r = PagerDutyReceiver(config("http://127.0.0.1:9/v2/enqueue"), allowed_hosts=LOOPBACK, environ=ENV)
    try:
        with pytest.raises(DeliveryError) as info:
            await r.send(notification(), None)
    finally:
        await r.close()
    assert info.value.retryable is True


async def test_routing_key_never_shown(pd, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    # a far side that echoes the request must not leak the key through our error either
    pd.fail_next(Fault(400, body={"message": f"bad key {ROUTING_KEY}", "errors": [ROUTING_KEY]}), Fault(500))
    texts = [repr(receiver), str(receiver), repr(receiver.config), str(receiver.config.model_dump())]
    for _ in range(2):
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
        texts += [info.value.reason, str(info.value), repr(info.value)]
        assert "***" in info.value.reason or info.value.status == 500
    await receiver.send(notification(), None)
    assert "pd-oncall" in caplog.text and "HTTP 400" in caplog.text  # the failures were logged, redacted
    texts.append(caplog.text)
    assert_no_key(*texts)
