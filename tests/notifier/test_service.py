"""The notifier service on the real broker: incidents topic in, receivers out, state on the compacted
state topic. Restarts (graceful and SIGKILL) must neither re-page nor lose the resolve."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from pydantic import SecretStr

from tailhound.kafka import ensure_topics
from tailhound.notifier.cli.common import write_state
from tailhound.notifier.config import parse_config
from tailhound.notifier.matchers import Matcher
from tailhound.notifier.service import NotifierService
from tailhound.notifier.state import Silence
from tailhound.notifier.state_topic import read_state
from tests.kafka_helpers import publish_incidents as publish

from .factories import incident_event
from .pagerduty_server import serve_pagerduty
from .test_deliver import StubReceiver

pytestmark = pytest.mark.broker

CONFIG = (
    "grouping: {by: [incident], wait: 0.5s, interval: 1s}\nflap: {min_flip_interval: 0.5s}\n"
    "route: {receiver: r}\nreceivers: [{type: console, name: r}]\n"
)


async def wait_for(cond, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


class Running:
    """A NotifierService task with a stub receiver."""

    def __init__(self, settings, receiver: StubReceiver) -> None:
        self.service = NotifierService(settings, parse_config(CONFIG), {"r": receiver})
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.service.run(self.stop))

    async def close(self) -> None:
        self.stop.set()
        await asyncio.wait_for(self.task, 30)


async def test_pages_once_resolves_and_survives_a_restart(settings):
    await ensure_topics(settings)
    rcv = StubReceiver()
    run = Running(settings, rcv)
    opened = incident_event(incident_id="inc-svc-1")
    await publish(settings, opened)
    await wait_for(lambda: len(rcv.received) == 1, what="the page")
    assert rcv.received[0][:2] == ("opened", "inc-svc-1/r/1")
    await run.close()

    rcv2 = StubReceiver()
    run = Running(settings, rcv2)
    await publish(settings, opened, incident_event(incident_id="inc-svc-1", event="resolved", sequence=2))
    await wait_for(lambda: len(rcv2.received) == 1, what="the resolve")
    await asyncio.sleep(1.5)
    await run.close()
    assert [r[:2] for r in rcv2.received] == [("resolved", "inc-svc-1/r/2")]
    assert rcv2.received[0][2] == {"ts": "1.0"}  # the receipt of the page came back from the state topic
    items, _ = await read_state(settings)
    assert items["group:inc-svc-1"]["logs"]["r"]["delivered"] == 2


async def test_silence_written_by_the_cli_suppresses_and_expiry_releases(settings):
    await ensure_topics(settings)
    now = time.time()
    silence = Silence(
        matchers=[Matcher.parse('node="gpu-node-9"')],
        starts_at=now - 1,
        ends_at=now + 3600,
        author="ana",
        comment="maintenance",
        created_at=now,
    )
    await write_state(settings, f"silence:{silence.id}", silence.model_dump(mode="json"))
    rcv = StubReceiver()
    run = Running(settings, rcv)
    try:
        await publish(
            settings,
            incident_event(incident_id="inc-svc-2", node="gpu-node-9"),
            incident_event(incident_id="inc-svc-3", node="gpu-node-1"),
        )
        await wait_for(lambda: len(rcv.received) == 1, what="the unsilenced page")
        await asyncio.sleep(1.5)
        assert [r[1] for r in rcv.received] == ["inc-svc-3/r/1"]
        silence.expired_at = time.time()
        await write_state(settings, f"silence:{silence.id}", silence.model_dump(mode="json"))
        await wait_for(lambda: len(rcv.received) == 2, timeout=40, what="the page after the silence expired")
        assert rcv.received[1][1] == "inc-svc-2/r/1"
    finally:
        await run.close()


@pytest.mark.slow
async def test_sigkill_mid_incident_gives_one_page_and_one_resolve(settings, tmp_path):
    await ensure_topics(settings)
    async with serve_pagerduty() as pd:
        cfg = tmp_path / "notifier.yaml"
        cfg.write_text(
            "grouping: {by: [incident], wait: 0.5s, interval: 1s}\nflap: {min_flip_interval: 0.5s}\n"
            "route: {receiver: pd}\n"
            f"receivers: [{{type: pagerduty, name: pd, routing_key: {{env: PD_KEY}}, url: '{pd.url}'}}]\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
        env.update(
            TAILHOUND_BROKER=settings.broker,
            TAILHOUND_TOPIC_PREFIX=settings.topic_prefix,
            TAILHOUND_STREAMS__APP_ID=settings.streams.app_id,
            TAILHOUND_NOTIFIER__CONFIG=str(cfg),
            TAILHOUND_STREAMS__LOG_LEVEL="info",
            PD_KEY="R0UT1NGK3Y0123456789abcdefSECRET",
            TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS='["127.0.0.1"]',
        )  # the local PagerDuty
        log = open(tmp_path / "notifier.log", "wb")  # noqa: SIM115 - closed below

        def start() -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, "-m", "tailhound", "notifier", "run"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

        proc = start()
        try:
            await publish(settings, incident_event(incident_id="inc-kill-1", severity="critical"))
            await wait_for(lambda: len(pd.accepted) == 1, timeout=60, what="the PagerDuty trigger")
            await asyncio.sleep(0.5)  # let it persist the delivery
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            await publish(
                settings, incident_event(incident_id="inc-kill-1", event="resolved", sequence=2, severity="critical")
            )
            proc = start()
            await wait_for(lambda: len(pd.accepted) == 2, timeout=90, what="the PagerDuty resolve after restart")
            await asyncio.sleep(2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(20)
            log.close()
        actions = [(e["event_action"], e["dedup_key"]) for e in pd.accepted]
        assert actions == [("trigger", "inc-kill-1"), ("resolve", "inc-kill-1")], (
            tmp_path / "notifier.log"
        ).read_text()[-3000:]


async def test_http_api_silences_and_groups(settings):
    import aiohttp

    await ensure_topics(settings)
    token = "api-token-for-this-test-0123456789"
    settings = settings.model_copy(
        update={"notifier": settings.notifier.model_copy(update={"api_token": SecretStr(token)})}
    )
    rcv = StubReceiver()
    run = Running(settings, rcv)
    try:
        await wait_for(lambda: run.service.api_port is not None and run.service.active, what="the API")
        base = f"http://127.0.0.1:{run.service.api_port}"
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {token}"}) as http:
            async with http.get(f"{base}/-/ready") as r:
                assert r.status == 200
            body = {"matchers": ['node="gpu-node-8"'], "author": "ana", "comment": "CHG-1", "duration": "1h"}
            async with aiohttp.ClientSession() as anonymous, anonymous.post(f"{base}/api/v1/silences", json=body) as r:
                assert r.status == 401  # writes need the token
            async with http.post(f"{base}/api/v1/silences", json=body) as r:
                assert r.status == 201
                sid = (await r.json())["id"]
            async with http.post(f"{base}/api/v1/silences", json={"matchers": ["x~y"], "author": "a"}) as r:
                assert r.status == 400 and "matchers.0" in (await r.json())["error"]
            await publish(
                settings,
                incident_event(incident_id="inc-api-1", node="gpu-node-8"),
                incident_event(incident_id="inc-api-2", node="gpu-node-1"),
            )
            await wait_for(lambda: len(rcv.received) == 1, what="the unsilenced page")
            async with http.get(f"{base}/api/v1/groups") as r:
                groups = {g["group_id"]: g for g in await r.json()}
            assert groups["inc-api-1"]["suppressed"].startswith(f"silenced by {sid}")
            async with http.get(f"{base}/api/v1/silences") as r:
                assert [s["id"] for s in await r.json()] == [sid]
            async with http.delete(f"{base}/api/v1/silences/{sid}") as r:
                assert r.status == 200 and (await r.json())["expired_at"]
            await wait_for(lambda: len(rcv.received) == 2, timeout=40, what="the page after the expiry")
            async with http.get(f"{base}/api/v1/silences") as r:
                assert await r.json() == []
    finally:
        await run.close()
