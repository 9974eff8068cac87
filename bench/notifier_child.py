"""The notifier side of the lag benchmark: the real notifier service in a process of its own, observed.

``python -m bench.notifier_child SETTINGS_JSON CONFIG READY RESULT [FETCH_MAX_WAIT_MS]`` runs
:class:`tailhound.notifier.service.NotifierService` with the receivers its config builds, wrapped to note
when each notification is handed over; the state writes and the incidents consumer's offset commits are
timed. Nothing else changes (``FETCH_MAX_WAIT_MS`` only for the what-if variant); the timings go to RESULT.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tailhound.settings import Settings

SECRET_ENV, TOKEN_ENV = "BENCH_WEBHOOK_SECRET", "BENCH_SLACK_TOKEN"
WEBHOOK_SECRET = "bench-webhook-signing-secret-0123456789"


def config_yaml(receiver: str, url: str) -> str:
    """The notifier config: defaults, except the two holds this benchmark leaves out."""
    head = "grouping: {by: [incident], wait: 0s}\nflap: {min_flip_interval: 0s}\n"
    if receiver == "webhook":
        rc = f"{{type: webhook, name: webhook, url: '{url}', secret: {{env: {SECRET_ENV}}}}}"
    else:
        rc = (
            f"{{type: slack, name: slack, token: {{env: {TOKEN_ENV}}}, channel: '#alerts', base_url: '{url}', "
            "min_interval_s: 0}"
        )
    return head + f"route: {{receiver: {receiver}}}\nreceivers: [{rc}]\n"


class TimedReceiver:
    """Delegates to the real receiver; notes when each notification is handed over and when send returns."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.sends: list[list[Any]] = []

    async def send(self, notification: Any, receipt: Any) -> Any:
        t0 = time.time()
        try:
            return await self.inner.send(notification, receipt)
        finally:
            self.sends.append([notification.group_id, notification.kind, t0, time.time()])

    async def close(self) -> None:
        await self.inner.close()


async def child_main(
    settings_json: str, config_path: str, ready_path: str, result_path: str, fetch_max_wait_ms: str = ""
) -> None:
    import tailhound.notifier.service
    from tailhound.notifier.config import load_config
    from tailhound.notifier.receiver_set import build_receivers
    from tailhound.notifier.service import NotifierService

    commits: list[float] = []
    shipped_make_consumer = tailhound.notifier.service.make_consumer

    def observed_consumer(settings: Settings, *topics: str, **kwargs: Any) -> Any:
        """The service's consumers as shipped; the group consumer's commit is timed (and, for the
        what-if variant only, its fetch_max_wait_ms set)."""
        if kwargs.get("group_id") is not None and fetch_max_wait_ms:
            kwargs["fetch_max_wait_ms"] = int(fetch_max_wait_ms)
        consumer = shipped_make_consumer(settings, *topics, **kwargs)
        if kwargs.get("group_id") is not None:
            commit = consumer.commit

            async def timed_commit(*args: Any, **kw: Any) -> None:
                t0 = time.perf_counter()
                await commit(*args, **kw)
                commits.append(time.perf_counter() - t0)

            consumer.commit = timed_commit
        return consumer

    tailhound.notifier.service.make_consumer = observed_consumer  # type: ignore[assignment]

    settings = Settings(**json.loads(settings_json))
    logging.basicConfig(
        level=settings.streams.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    config = load_config(config_path)
    receivers = {name: TimedReceiver(r) for name, r in build_receivers(settings, config).items()}
    service = NotifierService(settings, config, receivers)  # type: ignore[arg-type]
    persists: list[float] = []
    persist = service._persist

    async def timed_persist() -> None:
        t0 = time.perf_counter()
        await persist()
        persists.append(time.perf_counter() - t0)

    service._persist = timed_persist  # type: ignore[method-assign]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(service.run(stop))
    while not service.active and not task.done():
        await asyncio.sleep(0.02)
    Path(ready_path).write_text("ready")
    await task
    result = {
        "created": [[n.group_id, n.kind, n.ts] for n in service.created],
        "sends": [s for r in receivers.values() for s in r.sends],
        "persist_s": persists,
        "commit_s": commits,
        "ingested": service.ingested,
        "tick_s": settings.notifier.tick_s,
    }
    tmp = Path(result_path).with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.rename(result_path)


if __name__ == "__main__":
    asyncio.run(child_main(*sys.argv[1:6]))
