"""The Slack receiver against a fake Slack on loopback: assertions on what arrives there."""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import pytest
from pydantic import ValidationError

from tailhound.console import format_ts
from tailhound.errors import ConfigError, DeliveryError
from tailhound.incident import Evidence
from tailhound.notifier.receivers import Receiver
from tailhound.notifier.receivers.slack import ChannelPacer, SlackConfig, SlackReceiver
from tailhound.notifier.receivers.slack_blocks import escape, format_duration
from tests.notifier.factories import T0, incident_event, notification
from tests.notifier.slack_server import TOKEN, WEBHOOK_PATH, FakeSlack, serve_slack, validate_blocks

ENV_TOKEN = "SLACK_TEST_TOKEN"
ENV_HOOK = "SLACK_TEST_WEBHOOK"
LOOPBACK = ["127.0.0.1"]  # the local fake servers: allowed explicitly, as an operator would


@pytest.fixture
async def slack():
    async with serve_slack() as fake:
        yield fake


def bot_config(fake: FakeSlack, **over: Any) -> SlackConfig:
    data: dict[str, Any] = dict(
        type="slack",
        name="slack-oncall",
        token={"env": ENV_TOKEN},
        channel="#alerts",
        base_url=fake.base_url,
        timeout_s=2,
        min_interval_s=0,
    )
    data.update(over)
    return SlackConfig(**data)


def hook_config(**over: Any) -> SlackConfig:
    data: dict[str, Any] = dict(
        type="slack", name="slack-hook", webhook_url={"env": ENV_HOOK}, timeout_s=2, min_interval_s=0
    )
    data.update(over)
    return SlackConfig(**data)


@pytest.fixture
async def bot(slack):
    receiver = SlackReceiver(bot_config(slack), allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    yield receiver
    await receiver.close()


@pytest.fixture
async def hook(slack):
    receiver = SlackReceiver(hook_config(), allowed_hosts=LOOPBACK, environ={ENV_HOOK: slack.webhook_url})
    yield receiver
    await receiver.close()


def all_text(blocks: list[dict[str, Any]]) -> str:
    """Every text in a message's blocks, one per line."""
    out = []
    for b in blocks:
        if b.get("text"):
            out.append(b["text"]["text"])
        out += [f["text"] for f in b.get("fields", [])]
        out += [e["text"] for e in b.get("elements", [])]
    return "\n".join(out)


def group(n: int, kind: str = "updated") -> list:
    """A lead incident plus n-1 related ones on other nodes."""
    lead = incident_event(event=kind, sequence=2, ts=T0 + 30)
    related = [
        incident_event(
            incident_id=f"inc-rel-{i:04d}", node=f"gpu-node-{i + 10}", root_cause="nvlink-degraded", ts=T0 + 40 + i
        )
        for i in range(n - 1)
    ]
    return [lead, *related]


# -- bot mode -------------------------------------------------------------------------------------


async def test_receiver_protocol_and_repr(bot):
    assert isinstance(bot, Receiver)
    assert bot.name == "slack-oncall"
    assert "slack-oncall" in repr(bot) and TOKEN not in repr(bot)


async def test_opened_posts_one_message_with_the_incident(bot, slack):
    n = notification("opened", receiver="slack-oncall")
    receipt = await bot.send(n, None)

    [call] = slack.requests
    assert call.api == "chat.postMessage" and call.content_type == "application/json"
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert call.body["channel"] == "#alerts" and "thread_ts" not in call.body
    assert call.body["text"] == n.title()
    assert receipt == {"channel": "C0123", "ts": slack.messages[receipt["ts"]]["ts"]}

    blocks = call.body["blocks"]
    assert blocks[0]["type"] == "header" and n.title() in blocks[0]["text"]["text"]
    text = all_text(blocks)
    lead = n.lead
    for expected in (
        "`gpu-thermal-throttle` (GPU thermal throttle)",
        "warning",
        lead.scope.describe(),
        "persistent",
        format_ts(lead.opened_at),
        escape(lead.evidence[0].describe()),
        escape(lead.evidence[1].describe()),
        "1. Check cooling and inlet temperature of the rack",
        "2. Drain the node if clocks stay low",
        n.links["runbook"],
        lead.incident_id,
        f"rule `{lead.rule}`",
        "notification #1",
    ):
        assert expected in text, expected
    assert "Related incidents" not in text
    assert not validate_blocks(blocks)


async def test_critical_mentions_and_console_link(slack):
    receiver = SlackReceiver(
        bot_config(slack, mention_on_critical="<!here>", console_url="https://console.example/x"),
        allowed_hosts=LOOPBACK,
        environ={ENV_TOKEN: TOKEN},
    )
    try:
        n = notification("opened", incidents=[incident_event(severity="critical")])
        await receiver.send(n, None)
    finally:
        await receiver.close()
    body = slack.requests[0].body
    assert body["text"].startswith("<!here> ")
    text = all_text(body["blocks"])
    assert "<!here> critical incident" in text and "<https://console.example/x|Console>" in text


async def test_updated_edits_the_message_and_replies_in_its_thread(bot, slack):
    receipt = await bot.send(notification("opened"), None)
    n = notification("updated", sequence=2, incidents=group(3))
    assert await bot.send(n, receipt) == receipt

    post, update, reply = slack.requests
    assert update.api == "chat.update"
    assert (update.body["channel"], update.body["ts"]) == (receipt["channel"], receipt["ts"])
    assert update.body["text"] == n.title() and "(+2 related)" in n.title()
    parent = slack.messages[receipt["ts"]]
    assert "Related incidents (2)" in all_text(parent["blocks"])
    assert "`nvlink-degraded` (NVLink degraded) — node gpu-node-11" in all_text(parent["blocks"])

    assert reply.api == "chat.postMessage" and reply.body["thread_ts"] == receipt["ts"]
    assert len(parent["replies"]) == 1 and slack.messages[parent["replies"][0]]["thread_ts"] == receipt["ts"]
    reply_text = all_text(reply.body["blocks"])
    assert "*Updated* (notification #2)" in reply_text and "3 incidents" in reply_text
    assert reply.body["text"].startswith("Updated:")


async def test_resolved_is_short_and_says_how_long(bot, slack):
    receipt = await bot.send(notification("opened"), None)
    resolved = incident_event(event="resolved", sequence=3, ts=T0 + 14 * 60)
    n = notification("resolved", sequence=3, incidents=[resolved])
    assert await bot.send(n, receipt) == receipt

    _, update, reply = slack.requests
    assert update.api == "chat.update" and update.body["ts"] == receipt["ts"]
    text = all_text(update.body["blocks"])
    assert update.body["blocks"][0]["text"]["text"].startswith(":white_check_mark: [RESOLVED]")
    assert f"{format_ts(T0 + 840)} (after 14m)" in text
    assert "Evidence" not in text and "Suggested actions" not in text
    assert reply.body["thread_ts"] == receipt["ts"]
    assert reply.body["text"] == "Resolved after 14m"


async def test_update_of_a_deleted_message_posts_a_fresh_one(bot, slack):
    stale = {"channel": "C0123", "ts": "1789999999.000100"}
    receipt = await bot.send(notification("updated", sequence=2), stale)

    update, post = slack.requests
    assert update.api == "chat.update" and post.api == "chat.postMessage"
    assert "thread_ts" not in post.body
    assert receipt["ts"] != stale["ts"] and receipt["ts"] in slack.messages


async def test_scripted_message_not_found_also_posts_fresh(bot, slack):
    receipt = await bot.send(notification("opened"), None)
    slack.fail_next("message_not_found", only="chat.update")
    new = await bot.send(notification("updated", sequence=2), receipt)
    assert new != receipt and [r.api for r in slack.requests] == ["chat.postMessage", "chat.update", "chat.postMessage"]


async def test_other_update_errors_are_raised(bot, slack):
    receipt = await bot.send(notification("opened"), None)
    slack.fail_next("cant_update_message", only="chat.update")
    with pytest.raises(DeliveryError) as info:
        await bot.send(notification("updated", sequence=2), receipt)
    assert "cant_update_message" in info.value.reason and not info.value.retryable


# -- webhook mode ---------------------------------------------------------------------------------


async def test_webhook_posts_every_notification_as_a_new_message(hook, slack):
    opened = notification("opened")
    assert await hook.send(opened, None) == {}
    assert await hook.send(notification("resolved", sequence=2), {}) == {}

    first, second = slack.requests
    assert first.api == second.api == "webhook" and first.path == WEBHOOK_PATH
    assert "Authorization" not in first.headers
    assert first.body["text"] == opened.title() and not validate_blocks(first.body["blocks"])
    assert second.body["blocks"][0]["text"]["text"].startswith(":white_check_mark:")
    assert len(slack.messages) == 2


async def test_webhook_failures(hook, slack):
    slack.fail_next(status=429, retry_after=3, only="webhook")
    with pytest.raises(DeliveryError) as info:
        await hook.send(notification(), None)
    assert info.value.retryable and info.value.retry_after == 3 and info.value.status == 429
    slack.fail_next("channel_is_archived", status=410, only="webhook")
    with pytest.raises(DeliveryError) as info:
        await hook.send(notification(), None)
    assert not info.value.retryable and "channel_is_archived" in info.value.reason
    slack.fail_next(status=503, only="webhook")
    with pytest.raises(DeliveryError) as info:
        await hook.send(notification(), None)
    assert info.value.retryable and info.value.status == 503


# -- pacing ---------------------------------------------------------------------------------------


async def test_messages_to_one_channel_arrive_min_interval_apart(slack):
    receiver = SlackReceiver(bot_config(slack, min_interval_s=0.25), allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    try:
        receipt = await receiver.send(notification("opened"), None)
        # an update (chat.update + thread reply) and a new group at the same time: three more messages
        other = notification("opened", incidents=[incident_event(incident_id="inc-other", node="gpu-node-9")])
        await asyncio.gather(receiver.send(notification("updated", sequence=2), receipt), receiver.send(other, None))
    finally:
        await receiver.close()
    arrivals = [r.at for r in slack.requests]
    assert len(arrivals) == 4
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:], strict=False)]
    assert all(gap >= 0.25 for gap in gaps), gaps


async def test_pacer_waits_per_channel_with_an_injected_clock():
    now = [100.0]
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    pacer = ChannelPacer(1.0, clock=lambda: now[0], sleep=fake_sleep)
    async with pacer.slot("C1"):
        now[0] += 0.1  # the call takes 100 ms
    async with pacer.slot("C2"):  # another channel: no wait
        pass
    assert slept == []
    now[0] += 0.4
    async with pacer.slot("C1"):
        pass
    assert slept == [pytest.approx(0.6)]


# -- errors ---------------------------------------------------------------------------------------


async def test_429_is_retryable_with_retry_after(bot, slack):
    slack.fail_next(status=429, retry_after=7)
    with pytest.raises(DeliveryError) as info:
        await bot.send(notification(), None)
    err = info.value
    assert err.retryable and err.retry_after == 7 and err.status == 429 and "ratelimited" in err.reason
    assert len(slack.requests) == 1  # slack_sdk's own retry handlers are off


@pytest.mark.parametrize("html", [False, True])
async def test_server_errors_are_retryable(bot, slack, html):
    slack.fail_next(status=502 if html else 500, html=html)
    with pytest.raises(DeliveryError) as info:
        await bot.send(notification(), None)
    assert info.value.retryable and info.value.status == (502 if html else 500)
    assert info.value.retry_after is None and len(slack.requests) == 1


async def test_invalid_auth_is_not_retryable(slack):
    receiver = SlackReceiver(bot_config(slack), allowed_hosts=LOOPBACK, environ={ENV_TOKEN: "xoxb-wrong-token"})
    try:
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
    finally:
        await receiver.close()
    assert not info.value.retryable and "invalid_auth" in info.value.reason and info.value.status == 200


async def test_unknown_channel_is_not_retryable(slack):
    receiver = SlackReceiver(bot_config(slack, channel="#nope"), allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    try:
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
    finally:
        await receiver.close()
    assert not info.value.retryable and "channel_not_found" in info.value.reason


async def test_timeout_is_retryable(slack):
    receiver = SlackReceiver(bot_config(slack, timeout_s=0.2), allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    slack.fail_next(delay=1.0)
    try:
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
    finally:
        await receiver.close()
    assert info.value.retryable and "no answer within 0.2s" in info.value.reason


async def test_connection_refused_is_retryable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = SlackConfig(
        type="slack",
        name="s",
        token={"env": ENV_TOKEN},
        channel="#alerts",
        base_url=f"http://127.0.0.1:{port}/api/",
        timeout_s=2,
    )
    receiver = SlackReceiver(config, allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    try:
        with pytest.raises(DeliveryError) as info:
            await receiver.send(notification(), None)
    finally:
        await receiver.close()
    assert info.value.retryable and "ClientConnectorError" in info.value.reason


# -- Slack's limits -------------------------------------------------------------------------------


async def test_very_long_content_is_cut_to_slacks_limits(bot, slack):
    evidence = [Evidence(signal=f"gpu.xid.{i}", value=i, op=">", threshold=0, detail="x" * 5000) for i in range(20)]
    actions = [f"step {i}: " + "do the thing <carefully> & " * 60 for i in range(30)]
    ev = incident_event(summary="s" * 400, evidence=evidence, actions=actions, rule="r" * 4000)
    receipt = await bot.send(notification(incidents=[ev]), None)

    assert receipt["ts"] in slack.messages  # the fake accepted it, so Slack's checks passed
    blocks = slack.requests[0].body["blocks"]
    assert not validate_blocks(blocks)
    assert len(blocks[0]["text"]["text"]) <= 150
    assert all(len(b["text"]["text"]) <= 3000 for b in blocks if b.get("text"))
    text = all_text(blocks)
    assert "*Evidence*" in text and "more" in text and "&lt;carefully&gt; &amp;" in text
    assert "s" * 400 in text  # the summary cut from the header is shown in full below it


async def test_a_60_incident_group_stays_within_50_blocks(bot, slack):
    n = notification("updated", sequence=2, incidents=group(60))
    receipt = await bot.send(n, None)
    blocks = slack.requests[0].body["blocks"]
    assert receipt["ts"] in slack.messages and len(blocks) <= 50
    text = all_text(blocks)
    assert "Related incidents (59)" in text and "…and 49 more" in text


async def test_the_fake_rejects_what_slack_rejects(bot, slack):
    """The fake's own checks, so the tests above mean something."""
    too_many = [{"type": "divider"}] * 51
    long_header = [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}]
    long_section = [{"type": "section", "text": {"type": "mrkdwn", "text": "t" * 3001}}]
    for blocks in (too_many, long_header, long_section):
        assert validate_blocks(blocks)
    from slack_sdk.web.async_client import AsyncWebClient

    client = AsyncWebClient(token=TOKEN, base_url=slack.base_url, retry_handlers=[])
    response = await client.api_call(
        "chat.postMessage", data={"channel": "C0123", "text": "hi", "blocks": '[{"type": "divider"}]'}
    )
    assert response["ok"] and slack.requests[-1].content_type == "application/x-www-form-urlencoded"
    with pytest.raises(DeliveryError) as info:
        await bot._call("chat.postMessage", "#alerts", text="x", blocks=long_section)
    assert "invalid_blocks" in info.value.reason and "3001 characters" in info.value.reason
    assert not info.value.retryable


# -- secrets --------------------------------------------------------------------------------------


async def test_token_never_in_errors_reprs_or_logs(slack, caplog):
    caplog.set_level(logging.DEBUG)
    config = bot_config(slack, timeout_s=0.2)
    receiver = SlackReceiver(config, allowed_hosts=LOOPBACK, environ={ENV_TOKEN: TOKEN})
    errors: list[DeliveryError] = []
    try:
        await receiver.send(notification(), None)
        for script in (dict(status=429, retry_after=1), dict(error="invalid_auth"), dict(delay=0.5)):
            slack.fail_next(**script)
            with pytest.raises(DeliveryError) as info:
                await receiver.send(notification(), None)
            errors.append(info.value)
    finally:
        await receiver.close()
    assert any("Sending a request" in r.getMessage() for r in caplog.records)  # slack_sdk did log
    shown = [caplog.text, repr(receiver), str(config), repr(config)]
    shown += [s for e in errors for s in (str(e), repr(e), e.reason)]
    assert not [s for s in shown if TOKEN in s]


async def test_webhook_url_never_in_errors_reprs_or_logs(slack, caplog):
    caplog.set_level(logging.DEBUG)
    receiver = SlackReceiver(hook_config(timeout_s=0.2), allowed_hosts=LOOPBACK, environ={ENV_HOOK: slack.webhook_url})
    errors: list[DeliveryError] = []
    try:
        await receiver.send(notification(), None)
        for script in (
            dict(status=429, retry_after=1),
            dict(status=500),
            dict(error="invalid_token", status=403),
            dict(delay=0.5),
        ):
            slack.fail_next(**script, only="webhook")
            with pytest.raises(DeliveryError) as info:
                await receiver.send(notification(), None)
            errors.append(info.value)
    finally:
        await receiver.close()
    assert any("Sending a request" in r.getMessage() and "***" in r.getMessage() for r in caplog.records)
    shown = [caplog.text, repr(receiver)] + [s for e in errors for s in (str(e), repr(e), e.reason)]
    secret_part = WEBHOOK_PATH.rsplit("/", 1)[-1]
    assert not [s for s in shown if secret_part in s or slack.webhook_url in s]


# -- config ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "over, message",
    [
        (dict(webhook_url={"env": ENV_HOOK}), "exactly one of `token`"),
        (dict(token=None), "exactly one of `token`"),
        (dict(channel=None), "`channel` is required"),
        (dict(token="xoxb-inline-secret-123"), "never written inline"),
        (dict(unknown=1), "Extra inputs"),
    ],
)
def test_config_errors(over, message):
    data: dict[str, Any] = dict(type="slack", name="s", token={"env": ENV_TOKEN}, channel="#alerts")
    data.update(over)
    with pytest.raises(ValidationError) as info:
        SlackConfig(**data)
    assert message in str(info.value)
    assert "xoxb-inline-secret-123" not in str(info.value)


def test_inline_webhook_url_rejected_and_not_echoed():
    with pytest.raises(ValidationError) as info:
        SlackConfig(type="slack", name="s", webhook_url="https://hooks.slack.com/services/T/B/inlinesecret")
    assert "never written inline" in str(info.value) and "inlinesecret" not in str(info.value)


def test_missing_secret_is_a_config_error():
    with pytest.raises(ConfigError, match=f"env {ENV_TOKEN}"):
        SlackReceiver(SlackConfig(type="slack", name="s", token={"env": ENV_TOKEN}, channel="#a"), environ={})


def test_format_duration():
    assert [format_duration(s) for s in (45, 840, 7500, 97200)] == ["45s", "14m", "2h 05m", "1d 3h"]
