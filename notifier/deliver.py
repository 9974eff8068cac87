"""Deliver: hand due notifications to their receivers, with retries that survive outages.

Per receiver, notifications go out one at a time, oldest first (a group's opened always reaches a
receiver before its resolved). A failure is retried with exponential backoff and jitter, never sooner
than the far side's ``Retry-After``; a receiver that keeps failing trips its circuit breaker and is
left alone for the cooldown, then probed with one notification. A non-retryable failure (400, bad
token) or the last attempt sends the notification to the dead-letter topic with the reason. Every
outcome is recorded in the durable delivery log (:class:`tailhound.notifier.pipeline.Notifier`), so a restart
neither resends what was delivered nor forgets what was not.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tailhound.errors import DeliveryError

from .config import Backoff, Breaker, Delivery
from .model import Notification
from .pipeline import Notifier, Outcome
from .receivers import Receiver

log = logging.getLogger(__name__)

#: an outer guard for a receiver call that hangs despite its own timeout
SEND_GUARD_S = 120.0


def backoff_s(attempt: int, policy: Backoff, rng: random.Random) -> float:
    """Wait before retry number `attempt` (1 = after the first failure): initial x multiplier^(n-1),
    capped at max, with +-jitter."""
    base = min(policy.initial * policy.multiplier ** max(attempt - 1, 0), policy.max)
    return max(base * (1 + rng.uniform(-policy.jitter, policy.jitter)), 0.0)


@dataclass
class CircuitBreaker:
    """Closed until `failures` consecutive failures, then open for `cooldown`, then one probe."""

    policy: Breaker
    consecutive: int = 0
    open_until: float = 0.0
    tripped: bool = False

    def allows(self, now: float) -> bool:
        return now >= self.open_until

    def success(self) -> None:
        self.consecutive, self.open_until, self.tripped = 0, 0.0, False

    def failure(self, now: float) -> bool:
        """Record a failure; True when this one opened the breaker (a failed probe re-opens it quietly)."""
        self.consecutive += 1
        if self.consecutive >= self.policy.failures:
            first = not self.tripped
            self.tripped = True
            self.open_until = now + self.policy.cooldown
            return first
        return False


LAGS_KEPT = 10_000


@dataclass
class DeliveryStats:
    sent: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    #: seconds from the notification's creation to its successful delivery (the last LAGS_KEPT)
    lags: deque[float] = field(default_factory=lambda: deque(maxlen=LAGS_KEPT))

    def bump(self, counter: dict[str, int], receiver: str) -> None:
        counter[receiver] = counter.get(receiver, 0) + 1


OnOutcome = Callable[[Outcome], Awaitable[None]]
OnDeadLetter = Callable[[Notification, str], Awaitable[None]]


class Deliverer:
    def __init__(
        self,
        notifier: Notifier,
        receivers: dict[str, Receiver],
        policy: Delivery,
        *,
        clock: Callable[[], float],
        on_outcome: OnOutcome,
        on_dead_letter: OnDeadLetter,
        rng: random.Random | None = None,
    ) -> None:
        self.notifier = notifier
        self.receivers = receivers
        self.policy = policy
        self.clock = clock
        self.on_outcome = on_outcome
        self.on_dead_letter = on_dead_letter
        self.rng = rng or random.Random()
        self.breakers = {name: CircuitBreaker(policy.breaker) for name in receivers}
        self.stats = DeliveryStats()
        self._running: dict[str, asyncio.Task[int]] = {}

    def _due(self) -> dict[str, list]:
        now = self.clock()
        by_receiver: dict[str, list] = {}
        for item in self.notifier.deliverable(now):
            if self.breakers.setdefault(item[1], CircuitBreaker(self.policy.breaker)).allows(now):
                by_receiver.setdefault(item[1], []).append(item)
        return by_receiver

    async def run_once(self) -> int:
        """Attempt every due notification (receivers in parallel) and wait. Returns how many were tried."""
        counts = await asyncio.gather(*(self._drain(name, items) for name, items in self._due().items()))
        return sum(counts)

    def pump(self) -> None:
        """Start a drain for every receiver with due notifications that is not busy already, without
        waiting: a slow or failing receiver never holds up the others."""
        for name, task in list(self._running.items()):
            if task.done():
                del self._running[name]
                if not task.cancelled() and task.exception() is not None:
                    log.error("delivery to %s crashed: %r", name, task.exception())
        for name, items in self._due().items():
            if name not in self._running:
                self._running[name] = asyncio.create_task(self._drain(name, items), name=f"deliver-{name}")

    async def stop(self) -> None:
        for task in self._running.values():
            task.cancel()
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        self._running.clear()

    async def _drain(self, name: str, items: list) -> int:
        """Deliver `items` to receiver `name` in order, then whatever became due for it meanwhile."""
        attempted = 0
        while items:
            done, ok = await self._drain_once(name, items)
            attempted += done
            if not ok or not self.breakers[name].allows(self.clock()):
                break
            items = self._due().get(name, [])
        return attempted

    async def _drain_once(self, name: str, items: list) -> tuple[int, bool]:
        receiver = self.receivers.get(name)
        attempted = 0
        for group_id, _, notification, receipt in items:
            attempted += 1
            try:
                if receiver is None:
                    raise DeliveryError(f"receiver {name!r} is not configured any more", retryable=False)
                new_receipt = await asyncio.wait_for(receiver.send(notification, receipt or None), SEND_GUARD_S)
            except DeliveryError as exc:
                await self._failed(name, group_id, notification, exc)
                return attempted, False  # the receiver is in trouble: the rest waits for the next round
            except Exception as exc:  # a receiver bug or an unexpected transport error
                err = DeliveryError(f"{type(exc).__name__}: {exc}"[:500], retryable=True)
                await self._failed(name, group_id, notification, err)
                return attempted, False
            now = self.clock()
            self.breakers[name].success()
            self.stats.bump(self.stats.sent, name)
            self.stats.lags.append(max(now - notification.ts, 0.0))
            log.info("delivered %s %s to %s", notification.kind, notification.idempotency_key, name)
            await self.on_outcome(
                self.notifier.delivered(group_id, name, notification.sequence, new_receipt or {}, now)
            )
        return attempted, True

    async def _failed(self, name: str, group_id: str, n: Notification, exc: DeliveryError) -> None:
        now = self.clock()
        self.stats.bump(self.stats.failed, name)
        if self.breakers[name].failure(now):
            log.warning(
                "receiver %s: circuit open for %.0fs after %d failures",
                name,
                self.policy.breaker.cooldown,
                self.breakers[name].consecutive,
            )
        attempts = (self.notifier.groups[group_id].logs[name].attempts + 1) if group_id in self.notifier.groups else 1
        wait = max(exc.retry_after or 0.0, backoff_s(attempts, self.policy.backoff, self.rng))
        outcome, dead = self.notifier.failed(group_id, name, n.sequence, exc, now, wait)
        await self.on_outcome(outcome)
        if dead is not None:
            why = "not retryable" if not exc.retryable else f"gave up after {attempts} attempts in {now - n.ts:.0f}s"
            reason = f"{why}: {exc.reason}"
            self.stats.bump(self.stats.dead, name)
            log.error("dead-letter %s to %s: %s", dead.idempotency_key, name, reason)
            await self.on_dead_letter(dead, reason)
        else:
            log.warning(
                "delivery of %s to %s failed (attempt %d, next in %.1fs): %s",
                n.idempotency_key,
                name,
                attempts,
                wait,
                exc.reason,
            )
