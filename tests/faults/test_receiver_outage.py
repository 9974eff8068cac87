"""Fault drill: every receiver down at once, then back (hardening issue, delivery under outage).

The real notifier service on the bundled broker delivers to three local servers that speak the real APIs
(Slack Web API, PagerDuty Events v2, a signature-checking remediation webhook), allowed by the settings'
allow-list (``127.0.0.1``) like any other host. While the outage lasts every request is answered 429 with
``Retry-After`` or 5xx, alternately; incidents open during it and half of them resolve during it. Then
the servers answer normally again.

Figures: notifications expected and delivered per receiver, lost (never delivered, or dead-lettered),
duplicated (a page or resolve that reached the far side twice: Slack top-level posts per group, PagerDuty
events per key and action, webhook requests per ``Idempotency-Key`` after recovery), attempts during the
outage, and the time from the receivers' return until the last notification was delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter

import pytest

from tailhound.notifier.config import parse_config
from tailhound.notifier.receiver_set import build_receivers
from tests.faults.conftest import scale
from tests.kafka_helpers import publish_incidents
from tests.notifier.factories import incident_event
from tests.notifier.pagerduty_server import Fault as PdFault
from tests.notifier.pagerduty_server import serve_pagerduty
from tests.notifier.service_helpers import running_service, wait_for, with_notifier
from tests.notifier.slack_server import TOKEN, serve_slack
from tests.notifier.webhook_server import Fault as HookFault
from tests.notifier.webhook_server import serve_webhook

pytestmark = pytest.mark.broker

PD_KEY = "R0UT1NGK3Y0123456789abcdefSECRET"
HOOK_SECRET = "whsec-drill-0123456789"
RETRY_AFTER_S = 1


NODE = re.compile(r"gpu-node-\d+")


def group_of(message: dict) -> str:
    """The incident a Slack message is about (each incident is on its own node)."""
    found = NODE.search(str(message.get("text")))
    return found.group(0) if found else "?"


def config(slack_url: str, pd_url: str, hook_url: str) -> str:
    return (
        "grouping: {by: [incident], wait: 0s, interval: 1s}\nflap: {min_flip_interval: 0s}\n"
        "delivery: {backoff: {initial: 0.2s, max: 1s}, breaker: {failures: 3, cooldown: 1s}}\n"
        "route: {receiver: slack, routes: [{receiver: pd, continue: true}, {receiver: hook, continue: true}, "
        "{receiver: slack}]}\n"
        "receivers:\n"
        f"  - {{type: slack, name: slack, token: {{env: DRILL_SLACK_TOKEN}}, channel: '#alerts', "
        f"base_url: '{slack_url}', min_interval_s: 0, timeout_s: 2}}\n"
        f"  - {{type: pagerduty, name: pd, routing_key: {{env: DRILL_PD_KEY}}, url: '{pd_url}', timeout_s: 2}}\n"
        f"  - {{type: webhook, name: hook, url: '{hook_url}', secret: {{env: DRILL_HOOK_SECRET}}, timeout_s: 2}}\n"
    )


async def test_receivers_down_with_429_and_5xx_then_back_lose_nothing_and_page_once(
    settings, drill_report, monkeypatch
):
    n, outage_s = scale(6, 60), scale(4, 120)
    resolved = n // 2
    settings = with_notifier(settings, webhook_allowed_hosts=["127.0.0.1"])
    for name, value in (("DRILL_SLACK_TOKEN", TOKEN), ("DRILL_PD_KEY", PD_KEY), ("DRILL_HOOK_SECRET", HOOK_SECRET)):
        monkeypatch.setenv(name, value)
    async with serve_slack() as slack, serve_pagerduty() as pd, serve_webhook(HOOK_SECRET) as hook:

        def slack_pages() -> dict[str, str]:
            """ts -> group of every top-level message (the page)."""
            return {ts: group_of(m) for ts, m in slack.messages.items() if not m["thread_ts"]}

        def slack_resolves() -> set[str]:
            """Groups with a thread reply saying they resolved."""
            return {
                group_of(slack.messages[str(m["thread_ts"])])
                for m in slack.messages.values()
                if m["thread_ts"] and str(m["thread_ts"]) in slack.messages
            }

        cfg_text = config(slack.base_url, pd.url, hook.url)
        receivers = build_receivers(settings, parse_config(cfg_text))
        # the outage: 429 with Retry-After and 5xx, alternately, for as long as it lasts
        for _ in range(5000):
            slack.fail_next(status=429, retry_after=RETRY_AFTER_S)
            slack.fail_next(status=503)
            pd.fail_next(PdFault(status=429, retry_after=str(RETRY_AFTER_S)), PdFault(status=502))
            hook.fail_next(HookFault(status=429, retry_after=str(RETRY_AFTER_S)), HookFault(status=503))
        async with running_service(settings, cfg_text, receivers) as service:
            t0 = time.monotonic()
            await publish_incidents(
                settings,
                *(
                    incident_event(incident_id=f"inc-out-{i:04d}", node=f"gpu-node-{i}", severity="critical")
                    for i in range(n)
                ),
            )
            await asyncio.sleep(outage_s / 2)
            await publish_incidents(
                settings,
                *(
                    incident_event(
                        incident_id=f"inc-out-{i:04d}",
                        node=f"gpu-node-{i}",
                        severity="critical",
                        event="resolved",
                        sequence=2,
                    )
                    for i in range(resolved)
                ),
            )
            await asyncio.sleep(max(t0 + outage_s - time.monotonic(), 0))
            attempts = {"slack": len(slack.requests), "pd": len(pd.requests), "hook": len(hook.deliveries)}
            slack.failures.clear()
            pd.script.clear()
            hook.script.clear()
            back = time.monotonic()
            hook_from = len(hook.deliveries)

            def delivered() -> dict[str, int]:
                return {
                    "slack": len(slack_pages()) + len(slack_resolves()),
                    "pd": len({(e["dedup_key"], e["event_action"]) for e in pd.accepted}),
                    "hook": len(set(hook.processed)),
                }

            expected = {"slack": n + resolved, "pd": n + resolved, "hook": n + resolved}
            with contextlib.suppress(AssertionError):  # what is missing is reported, then asserted on
                await wait_for(lambda: delivered() == expected, timeout=60 + outage_s, what="everything delivered")
            recovered_s = time.monotonic() - back
            await asyncio.sleep(1.0)  # anything sent twice would arrive now
            dead = dict(service._deliverer.stats.dead)
    got = delivered()
    pages = Counter(slack_pages().values())  # top-level messages per group
    pd_events = Counter((e["dedup_key"], e["event_action"]) for e in pd.accepted)
    hook_after = [d.headers.get("Idempotency-Key") for d in hook.deliveries[hook_from:]]
    duplicated = {
        "slack": sum(c - 1 for c in pages.values()),
        "pd": sum(c - 1 for c in pd_events.values()),
        "hook": len(hook_after) - len(set(hook_after)),
    }
    lost = {k: expected[k] - min(got[k], expected[k]) for k in expected}
    drill_report(
        incidents=n,
        resolved_during_outage=resolved,
        outage_s=outage_s,
        expected=expected,
        delivered=got,
        lost=lost,
        duplicated=duplicated,
        dead_lettered=dead,
        attempts_during_outage=attempts,
        recovered_after_s=round(recovered_s, 2),
        retry_after_s=RETRY_AFTER_S,
        slack_messages_resolved=sum(
            1 for m in slack.messages.values() if not m["thread_ts"] and "RESOLVED" in str(m["text"]).upper()
        ),
        pd_alerts_resolved=sum(1 for a in pd.alerts.values() if a.status == "resolved"),
    )
    assert lost == {"slack": 0, "pd": 0, "hook": 0} and dead == {}
    assert duplicated == {"slack": 0, "pd": 0, "hook": 0}
    assert recovered_s < 10
