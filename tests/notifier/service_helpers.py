"""Helpers for tests and fault drills that run the real notifier service on the bundled broker: the service
as a task of the test's event loop (as it runs inside the worker's), an event-loop lag probe, RSS."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

from pydantic import SecretStr

from tailhound.kafka import ensure_topics
from tailhound.notifier.config import parse_config
from tailhound.notifier.service import NotifierService
from tailhound.settings import Settings


async def wait_for(
    cond: Callable[[], bool], timeout: float = 30.0, what: str = "condition", step: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(step)


def with_notifier(settings: Settings, **update: Any) -> Settings:
    """`settings` with notifier settings changed (``api_token="..."`` becomes a SecretStr)."""
    if isinstance(update.get("api_token"), str):
        update["api_token"] = SecretStr(update["api_token"])
    return settings.model_copy(update={"notifier": settings.notifier.model_copy(update=update)})


@asynccontextmanager
async def running_service(settings: Settings, config: str, receivers: dict[str, Any]) -> AsyncIterator[NotifierService]:
    """A NotifierService task on `settings`' broker; yields once it is the active notifier with its API up."""
    await ensure_topics(settings)
    service = NotifierService(settings, parse_config(config), receivers)
    stop = asyncio.Event()
    task = asyncio.create_task(service.run(stop))
    try:
        await wait_for(
            lambda: (
                service.active and (service.api_port is not None or not settings.notifier.api_listen) or task.done()
            ),
            timeout=60,
            what="the notifier to become active",
        )
        if task.done():
            task.result()
        yield service
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


class LoopLag:
    """Measures how late the event loop wakes a task that sleeps `interval` (what any other task, a health
    check or stream processing, waits for the loop)."""

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(self.interval)
            self.lags.append(max(time.perf_counter() - t - self.interval, 0.0))

    def start(self) -> LoopLag:
        self.lags.clear()
        self._task = asyncio.create_task(self._run())
        return self

    async def stop(self) -> dict[str, float]:
        assert self._task is not None
        self._task.cancel()
        with suppress(asyncio.CancelledError):
            await self._task
        return self.summary()

    def summary(self) -> dict[str, float]:
        lags = sorted(self.lags) or [0.0]
        return {
            "max_ms": round(lags[-1] * 1000, 1),
            "p99_ms": round(lags[int(0.99 * (len(lags) - 1))] * 1000, 1),
            "p50_ms": round(lags[len(lags) // 2] * 1000, 2),
            "samples": len(self.lags),
        }


def rss_mb() -> float:
    """Resident memory of this process, MB (Linux)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
