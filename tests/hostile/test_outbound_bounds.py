"""A huge or hostile incident group still makes requests PagerDuty and a webhook endpoint accept."""

from __future__ import annotations

import json

from tailhound.incident import Evidence
from tailhound.notifier.receivers.bounds import cut_strings, fit, json_size
from tailhound.notifier.receivers.pagerduty import EVENT_LIMIT_BYTES, PagerDutyReceiver, build_event
from tailhound.notifier.receivers.webhook import MAX_BODY_BYTES, build_payload, encode_body
from tests.notifier.factories import incident_event, notification
from tests.notifier.pagerduty_server import serve_pagerduty
from tests.notifier.test_pagerduty import ENV, LOOPBACK, config

LONG = "x" * 20_000


def huge_group(n: int = 60) -> list:
    """`n` incidents with long names and summaries and 300 evidence lines each (a few MB as JSON)."""
    evidence = [
        Evidence(
            signal="gpu.temperature",
            value=90.0 + i % 5,
            op=">=",
            threshold=85.0,
            unit="C",
            labels={"gpu": str(i), "note": "n" * 500},
        )
        for i in range(300)
    ]
    return [
        incident_event(
            incident_id=f"inc-{i:016d}",
            node=f"node-{i}-" + "n" * 3000,
            summary=LONG,
            evidence=evidence,
            actions=["a" * 5000] * 40,
            labels={"team": "t" * 9000},
        )
        for i in range(n)
    ]


async def test_pagerduty_accepts_the_event_of_a_huge_group():
    n = notification("opened", incidents=huge_group())
    event = build_event(n, "k" * 32, config("http://127.0.0.1:1/v2/enqueue"))
    assert json_size(event) <= EVENT_LIMIT_BYTES
    payload = event["payload"]
    assert len(payload["summary"]) <= 1024 and len(payload["source"]) <= 1024
    assert len(payload["custom_details"]["evidence"]) <= 100
    assert payload["custom_details"]["root_cause"] == "gpu-thermal-throttle"  # what is paged on stays
    async with serve_pagerduty() as pd:
        receiver = PagerDutyReceiver(config(pd.url), allowed_hosts=LOOPBACK, environ=ENV)
        try:
            receipt = await receiver.send(n, None)  # the fake refuses what PagerDuty refuses (400)
        finally:
            await receiver.close()
    assert receipt["state"] == "triggered"


def test_webhook_body_of_a_huge_group_is_bounded_and_stable():
    n = notification("opened", incidents=huge_group())
    body = encode_body(build_payload(n))
    assert len(body) <= MAX_BODY_BYTES
    doc = json.loads(body)
    assert doc["incident"]["incident_id"] == n.lead.incident_id and doc["requested_action"]["type"] == "drain-node"
    assert doc["incidents_omitted"] >= 10 and "truncated" in doc
    assert encode_body(build_payload(n)) == body  # a redelivery sends the same bytes


def test_small_groups_are_sent_whole():
    n = notification("opened")
    doc = build_payload(n)
    assert "truncated" not in doc and "incidents_omitted" not in doc
    assert doc["incident"] == n.lead.model_dump(mode="json")
    assert (
        "truncated"
        not in build_event(n, "k" * 32, config("http://127.0.0.1:1/v2/enqueue"))["payload"]["custom_details"]
    )


def test_bounds_helpers():
    assert cut_strings({"a": ["x" * 10] * 5}, 4, 2) == {"a": ["xxx…", "xxx…"]}
    doc = {"keep": 1, "big": "y" * 1000, "bigger": ["z" * 1000]}
    small = fit(doc, 1500, ["bigger"])
    assert "bigger" not in small and small["big"] == doc["big"] and "bigger" in small["truncated"]
    assert json_size(fit(doc, 200, [])) <= 200 and fit(doc, 200, [])["keep"] == 1
    assert "truncated" in fit({"related": ["r" * 5000] * 200, "root_cause": "c"}, 4000, ["related"])
