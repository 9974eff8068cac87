"""Signed remediation webhooks: signing, the allow-list, the payload, and delivery outcomes."""

from __future__ import annotations

import email.utils
import json
import logging
import re
import time
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from tailhound import __version__
from tailhound.errors import ConfigError, DeliveryError, TailhoundError
from tailhound.notifier.receivers import Receiver
from tailhound.notifier.receivers.webhook import (
    USER_AGENT,
    WebhookConfig,
    WebhookReceiver,
    build_payload,
    host_allowed,
    retry_after_seconds,
)
from tailhound.notifier.signing import (
    IDEMPOTENCY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    SignatureError,
    sign,
    sign_all,
    verify,
)

from .factories import incident_event, notification
from .webhook_server import Fault, serve_webhook

SECRET = "whsec-s3cr3t-value-for-tests-0123"
ENV = {"HOOK_SECRET": SECRET, "OLD_SECRET": "whsec-old-secret-value-456"}
LOOPBACK = ["127.0.0.1"]


def config(url: str, **over) -> WebhookConfig:
    data = dict(type="webhook", name="remediate", url=url, secret={"env": "HOOK_SECRET"}, timeout_s=2)
    data.update(over)
    return WebhookConfig.model_validate(data)


@pytest.fixture
async def hook():
    async with serve_webhook(SECRET) as fake:
        yield fake


@pytest.fixture
async def receiver(hook):
    r = WebhookReceiver(config(hook.url, headers={"X-Team": "ml-platform"}), LOOPBACK, environ=ENV)
    yield r
    await r.close()


# --- signing --------------------------------------------------------------------------------------------------------
def test_sign_format_and_roundtrip():
    body = b'{"a":1}'
    sig = sign("k", 1700000000, body)
    assert sig == "v1=" + __import__("hmac").new(b"k", b"1700000000." + body, "sha256").hexdigest()
    verify("k", "1700000000", sig, body, now=1700000100)
    assert issubclass(SignatureError, TailhoundError)


@pytest.mark.parametrize(
    ("ts", "sig", "body", "secret", "now", "match"),
    [
        ("1700000000", None, b"x", "k", 1700000000, "missing X-Tailhound-Signature"),
        (None, "v1=00", b"x", "k", 1700000000, "missing X-Tailhound-Timestamp"),
        ("17000O0000", "v1=00", b"x", "k", 1700000000, "malformed"),
        ("1700000000", "sign(k)", b"y", "k", 1700000000, "does not match"),  # tampered body
        ("1700000000", "sign(k)", b"x", "other", 1700000000, "does not match"),  # wrong secret
        ("1700000000", "sign(k)", b"x", "k", 1700000301, "outside the 300s tolerance"),  # stale / replayed
        ("1700000400", "sign(k)", b"x", "k", 1700000000, "outside"),  # from the future
        ("1700000000", "v0=abc", b"x", "k", 1700000000, "no v1= signature"),
        ("1700000000", ",".join(["v1=00"] * 9), b"x", "k", 1700000000, "at most"),
    ],
)
def test_verify_refuses(ts, sig, body, secret, now, match):
    if sig == "sign(k)":
        sig = sign("k", int(ts), b"x")
    with pytest.raises(SignatureError, match=match):
        verify(secret, ts, sig, body, now=now)


def test_verify_accepts_rotation_both_ways():
    body, ts = b"{}", 1700000000
    header = sign_all(["new", "old"], ts, body)
    assert header.count("v1=") == 2
    verify("new", str(ts), header, body, now=ts)
    verify("old", str(ts), header, body, now=ts)
    verify(["newer", "new"], str(ts), sign("new", ts, body), body, now=ts)  # receiver knows two secrets
    verify("k", str(ts), "v0=zzz, " + sign("k", ts, body), body, now=ts)  # unknown schemes ignored
    with pytest.raises(ValueError):
        verify("", str(ts), header, body, now=ts)


# --- config and allow-list ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "allowed", "ok"),
    [
        ("hooks.example.com", ["hooks.example.com"], True),
        ("HOOKS.example.com.", ["hooks.example.com"], True),
        ("evil.com", ["hooks.example.com"], False),
        ("hooks.example.com.evil.com", ["hooks.example.com"], False),
        ("a.b.example.com", ["*.example.com"], True),
        ("example.com", ["*.example.com"], False),
        ("badexample.com", ["*.example.com"], False),
        ("10.0.0.5", ["10.0.0.5"], True),
        ("::1", ["[::1]"], True),
        ("anything", [], False),
        ("x", ["*."], False),
    ],
)
def test_host_allowed(host, allowed, ok):
    assert host_allowed(host, allowed) is ok


def test_allow_list_and_scheme_refused_at_construction():
    with pytest.raises(ConfigError, match=r"'remediate'.*'evil\.example\.org'.*webhook_allowed_hosts"):
        WebhookReceiver(config("https://evil.example.org/hook"), ["hooks.example.com"], environ=ENV)
    with pytest.raises(ConfigError, match="'remediate'"):
        WebhookReceiver(config("https://hooks.example.com/hook"), [], environ=ENV)
    with pytest.raises(ConfigError, match="scheme 'ftp'"):
        WebhookReceiver(config("ftp://hooks.example.com/hook"), ["hooks.example.com"], environ=ENV)
    with pytest.raises(ConfigError, match="credentials"):
        WebhookReceiver(config("https://u:p@hooks.example.com/"), ["hooks.example.com"], environ=ENV)
    with pytest.raises(ConfigError, match="'remediate'"):
        WebhookReceiver(config("https://hooks.example.com\\@evil.example.org/"), ["hooks.example.com"], environ=ENV)
    with pytest.raises(ConfigError, match="'remediate'"):
        WebhookReceiver(config("http:///hook"), ["hooks.example.com"], environ=ENV)
    with pytest.raises(ConfigError, match="HOOK_SECRET"):
        WebhookReceiver(config("https://hooks.example.com/"), ["hooks.example.com"], environ={})


def test_config_validation():
    with pytest.raises(ValidationError):
        config("https://h/", secret=SECRET)  # inline secret
    with pytest.raises(ValidationError, match="set by the webhook receiver"):
        config("https://h/", headers={"idempotency-key": "x"})
    with pytest.raises(ValidationError, match="credentials"):
        config("https://h/", headers={"Authorization": "Bearer abc"})
    with pytest.raises(ValidationError):
        config("https://h/", retries=3)
    assert config("https://h/").timeout_s == 2
    assert WebhookConfig(type="webhook", name="w", url="https://h/", secret={"env": "S"}).timeout_s == 5


# --- payload --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("root_cause", "action"),
    [
        ("capacity", "scale-out"),
        ("gpu-thermal-throttle", "drain-node"),
        ("nvlink-degraded", "drain-node"),
        ("kv-cache-pressure", "reduce-batch"),
        ("retry-storm", "shed-load"),
        ("network-path", "investigate"),
    ],
)
def test_requested_action_by_root_cause(root_cause, action):
    n = notification(incidents=[incident_event(root_cause=root_cause)])
    requested = build_payload(n)["requested_action"]
    assert requested["type"] == action and requested["root_cause"] == root_cause
    assert requested["target"] == {"node": "gpu-node-3", "engine": "vllm-0", "model": "llama-3-70b", "endpoint": None}
    assert requested["suggested_actions"] == n.lead.actions


async def test_delivery_is_signed_and_documented(hook, receiver):
    assert isinstance(receiver, Receiver)
    related = incident_event(incident_id="inc-0000000000000002", root_cause="capacity")
    n = notification("updated", sequence=2, incidents=[incident_event(event="updated", sequence=2), related])
    assert await receiver.send(n, None) == {}
    [d] = hook.deliveries
    assert d.error is None
    assert d.headers[IDEMPOTENCY_HEADER] == n.idempotency_key == f"{n.group_id}/test/2"
    assert d.headers["Content-Type"] == "application/json"
    assert d.headers["User-Agent"] == USER_AGENT == f"tailhound/{__version__}"
    assert d.headers["X-Team"] == "ml-platform"
    assert abs(int(d.headers[TIMESTAMP_HEADER]) - time.time()) < 10
    body = d.json
    assert body["schema_version"] == 1
    assert body["idempotency_key"] == n.idempotency_key
    assert (body["kind"], body["group_id"], body["sequence"]) == ("updated", n.group_id, 2)
    assert body["sent_at"].endswith("Z") and body["flapping"] is False
    assert body["requested_action"]["type"] == "drain-node"
    assert body["incident"] == n.lead.model_dump(mode="json")
    assert body["incidents"] == [i.model_dump(mode="json") for i in n.incidents]


async def test_tampered_body_and_wrong_secret_fail_verification(hook, receiver):
    await receiver.send(notification(), None)
    d = hook.deliveries[0]
    ts, sig = d.headers[TIMESTAMP_HEADER], d.headers[SIGNATURE_HEADER]
    verify(SECRET, ts, sig, d.body)
    with pytest.raises(SignatureError):
        verify(SECRET, ts, sig, d.body.replace(b'"opened"', b'"resolved"'))
    with pytest.raises(SignatureError):
        verify("not-the-secret", ts, sig, d.body)
    with pytest.raises(SignatureError, match="tolerance"):
        verify(SECRET, ts, sig, d.body, now=int(ts) + 301)


async def test_receiver_with_other_secret_answers_401_not_retryable(receiver):
    async with serve_webhook("a-different-secret") as other:
        r = WebhookReceiver(config(other.url), LOOPBACK, environ=ENV)
        try:
            with pytest.raises(DeliveryError) as info:
                await r.send(notification(), None)
        finally:
            await r.close()
    assert "does not match" in other.deliveries[0].error
    assert info.value.retryable is False and info.value.status == 401


async def test_stale_timestamp_refused_by_receiver(hook, receiver):
    hook.clock_skew_s = 600  # the request looks ten minutes old to the receiver
    with pytest.raises(DeliveryError) as info:
        await receiver.send(notification(), None)
    assert "tolerance" in hook.deliveries[0].error and info.value.status == 401


async def test_rotation_previous_secret_signs_too():
    async with serve_webhook("whsec-old-secret-value-456") as old_only:
        r = WebhookReceiver(config(old_only.url, previous_secret={"env": "OLD_SECRET"}), LOOPBACK, environ=ENV)
        try:
            await r.send(notification(), None)
        finally:
            await r.close()
    assert old_only.deliveries[0].error is None


async def test_redelivery_keeps_the_idempotency_key_and_body(hook, receiver):
    hook.fail_next(Fault(503, retry_after="3"))
    n = notification()
    with pytest.raises(DeliveryError) as info:
        await receiver.send(n, None)
    assert info.value.retryable is True and info.value.retry_after == 3.0
    assert await receiver.send(n, None) == {}
    assert await receiver.send(n, None) == {}  # the far side answers 409: already processed = delivered
    keys = [d.headers[IDEMPOTENCY_HEADER] for d in hook.deliveries]
    assert keys == [n.idempotency_key] * 3
    assert len({d.body for d in hook.deliveries}) == 1
    assert hook.processed == [n.idempotency_key]
    await receiver.send(notification("updated", sequence=2), None)
    assert hook.processed[-1] != n.idempotency_key


@pytest.mark.parametrize(
    ("fault", "retryable", "retry_after"),
    [
        (Fault(400, body="bad payload " + "x" * 500), False, None),
        (Fault(404), False, None),
        (Fault(422), False, None),
        (Fault(302), False, None),
        (Fault(408), True, None),
        (Fault(425), True, None),
        (Fault(429, retry_after="12"), True, 12.0),
        (Fault(500), True, None),
        (Fault(502), True, None),
        (Fault(503, retry_after="0"), True, 0.0),
    ],
)
async def test_status_outcomes(hook, receiver, fault, retryable, retry_after):
    hook.fail_next(fault)
    with pytest.raises(DeliveryError) as info:
        await receiver.send(notification(), None)
    err = info.value
    assert (err.retryable, err.retry_after, err.status) == (retryable, retry_after, fault.status)
    assert f"HTTP {fault.status}" in err.reason
    if fault.status == 400:
        assert "bad payload" in err.reason and "x" * 200 not in err.reason and len(err.reason) < 300


def test_retry_after_http_date():
    now = 1_790_000_000.0
    assert retry_after_seconds(email.utils.formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30)
    assert retry_after_seconds(email.utils.formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon", now=now) is None
    assert retry_after_seconds(None) is None


async def test_429_with_http_date(hook, receiver):
    hook.fail_next(Fault(429, retry_after=email.utils.formatdate(time.time() + 60, usegmt=True)))
    with pytest.raises(DeliveryError) as info:
        await receiver.send(notification(), None)
    assert 50 < info.value.retry_after <= 61


async def test_timeout_and_refused_connection_are_retryable(hook):
    r = WebhookReceiver(config(hook.url, timeout_s=0.2), LOOPBACK, environ=ENV)
    hook.fail_next(Fault(200, delay_s=1.0))
    try:
        with pytest.raises(DeliveryError, match="timed out") as info:
            await r.send(notification(), None)
    finally:
        await r.close()
    assert info.value.retryable is True
    r = WebhookReceiver(config("http://127.0.0.1:9/hook"), LOOPBACK, environ=ENV)
    try:
        with pytest.raises(DeliveryError) as info:
            await r.send(notification(), None)
    finally:
        await r.close()
    assert info.value.retryable is True


async def test_secret_never_shown(hook, receiver, caplog):
    caplog.set_level(logging.DEBUG)
    hook.fail_next(Fault(400, body=f"you sent {SECRET}"), Fault(500, body=SECRET))
    texts = [repr(receiver), str(receiver), repr(receiver.config), str(receiver.config.model_dump())]
    for _ in range(2):
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
        texts += [info.value.reason, repr(info.value)]
    await receiver.send(notification(), None)
    assert "'remediate'" in caplog.text and "HTTP 400" in caplog.text  # the failures were logged, redacted
    texts.append(caplog.text)
    for d in hook.deliveries:
        texts.append(str(d.headers))
        texts.append(d.body.decode())
    assert all(SECRET not in t for t in texts)


# --- docs/webhooks.md stays true ----------------------------------------------------------------------------------
DOC = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_documented_example_matches_the_payload():
    [example] = [json.loads(b) for b in _blocks("json")]
    real = build_payload(notification(incidents=[incident_event(root_cause="capacity")]))
    assert list(example) == list(real)
    assert list(example["requested_action"]) == list(real["requested_action"])
    assert example["requested_action"]["type"] == "scale-out"
    assert example["incident"] == example["incidents"][0]


async def test_documented_stdlib_verification_accepts_real_requests(hook, receiver):
    [snippet] = [b for b in _blocks("python") if "def verify_tailhound" in b]
    namespace: dict = {}
    exec(compile(snippet, str(DOC), "exec"), namespace)
    verify_tailhound = namespace["verify_tailhound"]
    await receiver.send(notification(), None)
    d = hook.deliveries[0]
    headers = httpx.Headers(d.headers)
    assert verify_tailhound(SECRET, headers, d.body) is True
    assert verify_tailhound("wrong", headers, d.body) is False
    assert verify_tailhound(SECRET, headers, d.body + b" ") is False
    stale = httpx.Headers({**d.headers, TIMESTAMP_HEADER: str(int(time.time()) - 301)})
    assert verify_tailhound(SECRET, stale, d.body) is False
    assert verify_tailhound(SECRET, httpx.Headers({}), d.body) is False
