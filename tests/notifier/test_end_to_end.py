"""The whole notification path with real receivers against local servers that speak the real APIs
(Slack Web API, PagerDuty Events v2, a signing webhook receiver). The pipeline runs on a fake clock, so
hours of receiver outage take a few seconds; assertions are on what arrives at the servers."""

from __future__ import annotations

import random

from tailhound.notifier.config import parse_config
from tailhound.notifier.deliver import Deliverer
from tailhound.notifier.pipeline import Notifier
from tailhound.notifier.receivers.registry import build_receiver

from .factories import T0, incident_event
from .pagerduty_server import Fault as PdFault
from .pagerduty_server import serve_pagerduty
from .slack_server import TOKEN, serve_slack
from .webhook_server import Fault as HookFault
from .webhook_server import serve_webhook

PD_KEY = "R0UT1NGK3Y0123456789abcdefSECRET"
HOOK_SECRET = "whsec-test-0123456789"
ENV = {"SLACK_TOKEN": TOKEN, "PD_KEY": PD_KEY, "HOOK_SECRET": HOOK_SECRET}


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def config(slack=None, pd=None, hook=None, extra: str = ""):
    receivers, routes = [], []
    if pd is not None:
        receivers.append(f"{{type: pagerduty, name: pd, routing_key: {{env: PD_KEY}}, url: '{pd.url}', timeout_s: 2}}")
        routes.append("{matchers: ['severity=\"critical\"'], receiver: pd, continue: true}")
    if hook is not None:
        receivers.append(
            f"{{type: webhook, name: hook, url: '{hook.url}', secret: {{env: HOOK_SECRET}}, timeout_s: 0.5}}"
        )
        routes.append("{matchers: ['root_cause=\"capacity\"'], receiver: hook, continue: true}")
    if slack is not None:
        receivers.append(
            f"{{type: slack, name: slack, token: {{env: SLACK_TOKEN}}, channel: '#alerts', "
            f"base_url: '{slack.base_url}', min_interval_s: 0, timeout_s: 2}}"
        )
        routes.append("{receiver: slack}")
    default = "slack" if slack is not None else ("pd" if pd is not None else "hook")
    text = (
        f"grouping: {{by: [root_cause, node], wait: 30s, interval: 5m}}\n"
        f"delivery: {{backoff: {{initial: 1s, max: 60s}}, breaker: {{failures: 3, cooldown: 30s}}}}\n"
        f"route: {{receiver: {default}, routes: [{', '.join(routes)}]}}\n"
        f"receivers: [{', '.join(receivers)}]\n" + extra
    )
    return parse_config(text)


class Harness:
    def __init__(self, cfg) -> None:
        self.clock = Clock()
        self.notifier = Notifier(cfg)
        self.receivers = {rc.name: build_receiver(rc, allowed_hosts=["127.0.0.1"], environ=ENV) for rc in cfg.receivers}
        self.dead: list = []

        async def on_outcome(_):
            return None

        async def on_dead(n, reason):
            self.dead.append((n.idempotency_key, reason))

        self.deliverer = Deliverer(
            self.notifier,
            self.receivers,
            cfg.delivery,
            clock=self.clock,
            on_outcome=on_outcome,
            on_dead_letter=on_dead,
            rng=random.Random(7),
        )

    def ingest(self, *events) -> None:
        self.notifier.ingest(list(events), self.clock.t)

    async def run(self, seconds: float, step: float = 1.0) -> None:
        end = self.clock.t + seconds
        while self.clock.t < end:
            self.notifier.flush(self.clock.t)
            await self.deliverer.run_once()
            self.clock.t += step

    async def close(self) -> None:
        for r in self.receivers.values():
            await r.close()


async def test_a_burst_of_50_related_firings_is_one_page_and_one_slack_message():
    async with serve_slack() as slack, serve_pagerduty() as pd:
        h = Harness(config(slack, pd))
        try:
            for i in range(50):
                h.ingest(incident_event(incident_id=f"inc-burst-{i:02d}", severity="critical", gpus=(str(i % 8),)))
                await h.run(0.2, step=0.1)
            await h.run(60)
        finally:
            await h.close()
        assert len(slack.calls("chat.postMessage")) == 1
        assert [e["event_action"] for e in pd.accepted] == ["trigger"]
        assert "(+49 related)" in pd.accepted[0]["payload"]["summary"]


async def test_pagerduty_500_then_429_with_retry_after_is_delivered_exactly_once():
    async with serve_pagerduty() as pd:
        pd.fail_next(PdFault(status=500), PdFault(status=429, retry_after="20"))
        h = Harness(config(pd=pd))
        try:
            h.ingest(incident_event(severity="critical"))
            await h.run(31)  # group_wait, then the 500
            await h.run(5)  # the retry after ~1 s gets the 429
            assert len(pd.requests) == 2 and pd.accepted == []
            await h.run(15)
            assert len(pd.requests) == 2  # Retry-After: 20 s not over
            await h.run(10)
        finally:
            await h.close()
        assert [e["event_action"] for e in pd.accepted] == ["trigger"]
        assert h.dead == []


async def test_slack_down_for_two_hours_then_back_gets_everything_once_in_order():
    async with serve_slack() as slack:
        h = Harness(config(slack))
        try:
            slack.fail_next(status=503, times=10_000)
            h.ingest(incident_event(incident_id="inc-outage-1"))
            await h.run(1800, step=10)
            h.ingest(incident_event(incident_id="inc-outage-1", event="resolved", sequence=2))
            await h.run(5400, step=30)
            attempts = len(slack.requests)
            slack.failures.clear()
            await h.run(600, step=5)
        finally:
            await h.close()
        assert attempts < 150  # backoff and the circuit breaker spare a dead Slack
        assert h.dead == []
        posts = [r for r in slack.requests[attempts:] if r.api in ("chat.postMessage", "chat.update")]
        assert [(r.api, "thread_ts" in r.body) for r in posts] == [
            ("chat.postMessage", False),  # the page
            ("chat.update", False),  # resolved: the message updated in place
            ("chat.postMessage", True),  # and a thread reply
        ]
        message = next(iter(slack.messages.values()))
        assert "RESOLVED" in message["text"].upper()


async def test_webhook_timeout_is_retried_and_acted_on_once():
    async with serve_webhook(HOOK_SECRET) as hook:
        hook.fail_next(HookFault(status=200, delay_s=1.5))  # answers after the client gave up
        h = Harness(config(hook=hook))
        try:
            h.ingest(incident_event(root_cause="capacity"))
            await h.run(40)
        finally:
            await h.close()
        assert len(hook.deliveries) == 2
        assert all(d.error is None for d in hook.deliveries)  # both signed correctly
        assert hook.deliveries[0].headers["Idempotency-Key"] == hook.deliveries[1].headers["Idempotency-Key"]
        assert hook.processed == ["inc-0000000000000001/hook/1"]
