"""Hostile text in incidents reaches Slack as text: no live mention, link or entity, in any block or fallback."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tailhound.notifier.receivers.slack import SlackConfig, SlackReceiver
from tailhound.notifier.receivers.slack_blocks import escape, render_message, render_reply
from tests.notifier.factories import incident_event, notification
from tests.notifier.slack_server import TOKEN, serve_slack, validate_blocks

HOSTILE = [
    "<!channel>",
    "<!everyone>",
    "<!here>",
    "<@U024BE7LH>",
    "<!subteam^S012|@oncall>",
    "<https://evil.example|click>",
    "@channel",
    "@everyone",
    "@HERE",
]
#: What Slack would turn into a mention or a link: a control sequence, or a bare @-word outside verbatim text.
LIVE = re.compile(r"<[!@#]|<https?:|(?<![\w\u2060])@(channel|here|everyone)\b", re.IGNORECASE)


def texts(obj: Any, out: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every text object (``{"type": ..., "text": str}``) anywhere in `obj`."""
    out = [] if out is None else out
    if isinstance(obj, dict):
        if isinstance(obj.get("text"), str) and obj.get("type") in ("mrkdwn", "plain_text"):
            out.append(obj)
        for value in obj.values():
            texts(value, out)
    elif isinstance(obj, list):
        for value in obj:
            texts(value, out)
    return out


def hostile_group(kind: str) -> list:
    event = {"opened": "opened", "updated": "updated", "resolved": "resolved"}[kind]
    lead = incident_event(
        event=event,
        severity="critical",
        node="<!channel>",
        summary="gpu throttles <!everyone> @here <@U024BE7LH> & <https://evil.example|x>",
        actions=[f"drain {h}" for h in HOSTILE],
        rule="r-<!channel>",
    )
    related = [
        incident_event(incident_id=f"inc-rel-{i}", event=event, node=h, summary=f"related {h}")
        for i, h in enumerate(HOSTILE)
    ]
    return [lead, *related]


@pytest.mark.parametrize("kind", ["opened", "updated", "resolved"])
def test_no_live_mention_in_any_block_or_fallback(kind):
    n = notification(kind, incidents=hostile_group(kind), links={"<!channel>": "https://x.example/<!here>"})
    for text, blocks in (render_message(n, mention="<!here>"), render_reply(n)):
        assert validate_blocks(blocks) == []
        objects = texts(blocks)
        assert objects
        for obj in objects:
            if obj["type"] == "mrkdwn":
                assert obj.get("verbatim") is True, obj
                body = obj["text"].replace("<!here> critical incident", "")  # the operator's own mention
                body = re.sub(r"<https://x\.example/[^|>]*\|[^>]*>", "", body)  # the escaped link we wrote
                body = body.replace("<https://github.com/tailhound/tailhound/blob/main/docs/root-causes.md|", "")
                assert not LIVE.search(body), obj["text"]
        fallback = text.removeprefix("<!here> ")
        assert not LIVE.search(fallback), text


def test_the_operators_mention_stays_live():
    n = notification("opened", incidents=hostile_group("opened"))
    text, blocks = render_message(n, mention="<!here>")
    assert text.startswith("<!here> ") and "&lt;!everyone&gt;" in text
    assert any(o["text"] == "<!here> critical incident" for o in texts(blocks))


def test_escape_keeps_the_text_readable():
    assert escape("a <!channel> & @everyone") == "a &lt;!channel&gt; &amp; @\u2060everyone"
    assert escape("see @herefordshire") == "see @herefordshire"  # not a mention word


async def test_a_node_named_channel_arrives_escaped_at_slack():
    async with serve_slack() as fake:
        config = SlackConfig(
            type="slack",
            name="s",
            token={"env": "T"},
            channel="#alerts",
            base_url=fake.base_url,
            timeout_s=2,
            min_interval_s=0,
        )
        receiver = SlackReceiver(config, allowed_hosts=["127.0.0.1"], environ={"T": TOKEN})
        try:
            receipt = await receiver.send(notification("opened", incidents=hostile_group("opened")), None)
            await receiver.send(notification("updated", sequence=2, incidents=hostile_group("updated")), receipt)
        finally:
            await receiver.close()
    assert len(fake.requests) == 3  # post, update, thread reply
    for req in fake.requests:
        assert not LIVE.search(req.body["text"]), req.body["text"]
        for obj in texts(req.body["blocks"]):
            if obj["type"] == "mrkdwn":
                assert not LIVE.search(re.sub(r"<https://github\.com[^>]*>", "", obj["text"])), obj["text"]
