"""Delivery: retries with backoff and Retry-After, the circuit breaker, dead letters, long outages.
A fake clock drives hours of outage in milliseconds; receivers are in-memory stubs."""

from __future__ import annotations

import random

from tailhound.errors import DeliveryError
from tailhound.notifier.config import Backoff, Breaker, parse_config
from tailhound.notifier.deliver import CircuitBreaker, Deliverer, backoff_s
from tailhound.notifier.pipeline import Notifier

from .factories import T0, incident_event


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class StubReceiver:
    """Fails while `down` (with `error`), else records what arrives."""

    def __init__(self, name: str = "r") -> None:
        self.name = name
        self.down = False
        self.error = DeliveryError("HTTP 503", retryable=True, status=503)
        self.received: list = []
        self.attempts = 0

    async def send(self, notification, receipt):
        self.attempts += 1
        if self.down:
            raise self.error
        self.received.append((notification.kind, notification.idempotency_key, dict(receipt or {})))
        return {"ts": f"{len(self.received)}.0"}

    async def close(self):
        return None


def setup(extra: str = ""):
    config = parse_config(
        "grouping: {by: [incident], wait: 0s, interval: 0s}\nroute: {receiver: r}\n"
        "receivers: [{type: console, name: r}]\n" + extra
    )
    clock = Clock()
    nf = Notifier(config)
    rcv = StubReceiver()
    dead: list = []
    outcomes: list = []

    async def on_outcome(o):
        outcomes.append(o)

    async def on_dead(n, reason):
        dead.append((n.idempotency_key, reason))

    d = Deliverer(
        nf,
        {"r": rcv},
        config.delivery,
        clock=clock,
        on_outcome=on_outcome,
        on_dead_letter=on_dead,
        rng=random.Random(1),
    )
    return nf, d, rcv, clock, dead


async def run_for(nf, d, clock, seconds: float, step: float = 1.0) -> None:
    end = clock.t + seconds
    while clock.t < end:
        nf.flush(clock.t)
        await d.run_once()
        clock.t += step


def test_backoff_grows_caps_and_jitters():
    policy = Backoff(initial=1, max=60, multiplier=2, jitter=0.2)
    rng = random.Random(0)
    waits = [backoff_s(n, policy, rng) for n in range(1, 10)]
    assert 0.8 <= waits[0] <= 1.2 and 1.6 <= waits[1] <= 2.4
    assert all(w <= 72 for w in waits) and waits[-1] >= 48


def test_breaker_opens_after_consecutive_failures_and_probes_after_cooldown():
    b = CircuitBreaker(Breaker(failures=3, cooldown=60))
    assert not b.failure(0) and not b.failure(1)
    assert b.failure(2) and not b.allows(30) and b.allows(62)
    assert not b.failure(62) and not b.allows(100)  # a failed probe re-opens it
    b.success()
    assert b.allows(63) and b.consecutive == 0


async def test_server_error_is_retried_and_delivered_once():
    nf, d, rcv, clock, dead = setup()
    nf.ingest([incident_event()], clock.t)
    rcv.down = True
    await run_for(nf, d, clock, 3)
    rcv.down = False
    await run_for(nf, d, clock, 30)
    assert [k for k, _, _ in rcv.received] == ["opened"]
    assert dead == []


async def test_retry_after_is_honoured():
    nf, d, rcv, clock, dead = setup()
    nf.ingest([incident_event()], clock.t)
    rcv.down = True
    rcv.error = DeliveryError("HTTP 429", retryable=True, retry_after=30, status=429)
    await run_for(nf, d, clock, 1)
    assert rcv.attempts == 1
    rcv.down = False
    await run_for(nf, d, clock, 28)
    assert rcv.received == []  # not before Retry-After
    await run_for(nf, d, clock, 5)
    assert len(rcv.received) == 1


async def test_non_retryable_failure_goes_to_dead_letter_with_reason():
    nf, d, rcv, clock, dead = setup()
    nf.ingest([incident_event()], clock.t)
    rcv.down = True
    rcv.error = DeliveryError("HTTP 400: Event object is invalid", retryable=False, status=400)
    await run_for(nf, d, clock, 10)
    assert rcv.attempts == 1
    assert dead == [("inc-0000000000000001/r/1", "not retryable: HTTP 400: Event object is invalid")]
    assert nf.deliverable(clock.t) == []


async def test_last_attempt_goes_to_dead_letter():
    nf, d, rcv, clock, dead = setup("delivery: {max_attempts: 3, backoff: {initial: 1s, max: 2s}}\n")
    nf.ingest([incident_event()], clock.t)
    rcv.down = True
    await run_for(nf, d, clock, 60)
    assert rcv.attempts == 3
    assert dead and dead[0][1].startswith("gave up after 3 attempts in ") and dead[0][1].endswith(": HTTP 503")


async def test_receiver_down_for_hours_then_back_gets_every_notification_once_in_order():
    nf, d, rcv, clock, dead = setup()
    rcv.down = True
    nf.ingest([incident_event(incident_id="inc-a")], clock.t)
    await run_for(nf, d, clock, 600, step=5)
    nf.ingest([incident_event(incident_id="inc-b", node="gpu-node-4")], clock.t)
    await run_for(nf, d, clock, 600, step=5)
    nf.ingest([incident_event(incident_id="inc-a", event="resolved", sequence=2)], clock.t)
    await run_for(nf, d, clock, 2 * 3600, step=30)  # two more hours down
    during = rcv.attempts
    assert during < 200  # backoff and the breaker keep a dead receiver from being hammered
    rcv.down = False
    await run_for(nf, d, clock, 900, step=5)
    assert sorted(key for _, key, _ in rcv.received) == ["inc-a/r/1", "inc-a/r/2", "inc-b/r/1"]
    a = [(kind, receipt) for kind, key, receipt in rcv.received if key.startswith("inc-a")]
    assert [kind for kind, _ in a] == ["opened", "resolved"]
    assert a[1][1] != {}  # the resolve got the receipt of the page
    assert dead == []
