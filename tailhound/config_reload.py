"""SIGHUP reload of a process's config file (the agent's agent.yaml, the ingest's ingest.yaml).

As the worker reloads its rules (:mod:`tailhound.streams.reload`) and Prometheus its config: the file is read
and validated again; a valid config is handed to `apply` (which swaps in what changed, keeping buffered
data); an invalid one is logged with the loader's message (file and line) and counted, and the running
config stays. The outcome is exported next to the process's other metrics:

- ``<prefix>_config_reloads_total{result="success|failure"}``;
- ``<prefix>_config_last_reload_successful`` (0/1) and ``<prefix>_config_last_reload_success_timestamp_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from tailhound.errors import TailhoundError

C = TypeVar("C")
log = logging.getLogger("tailhound.reload")


class ConfigReloader(Generic[C]):
    """Reads `path` with `load` and hands a valid result to `apply` (awaited); never raises."""

    def __init__(
        self,
        path: Path,
        load: Callable[[Path], C],
        apply: Callable[[C], Awaitable[None]],
        *,
        prefix: str,
        registry: CollectorRegistry | None = None,
        what: str = "config",
    ) -> None:
        self.path, self.load, self.apply, self.what = path, load, apply, what
        r = registry or CollectorRegistry()
        self.reloads = Counter(
            f"{prefix}_config_reloads", f"Reloads of the {what} file, by result.", ["result"], registry=r
        )
        self.last_ok = Gauge(
            f"{prefix}_config_last_reload_successful", "1 when the last reload was applied.", registry=r
        )
        self.last_ok_ts = Gauge(
            f"{prefix}_config_last_reload_success_timestamp_seconds",
            "When the config was last loaded successfully.",
            registry=r,
        )
        self.last_ok.set(1)
        self.last_ok_ts.set(time.time())
        self._lock = asyncio.Lock()

    async def reload(self, why: str = "SIGHUP") -> bool:
        """One reload; True when the new config was applied."""
        async with self._lock:  # two SIGHUPs in a row: the second waits for the first swap
            try:
                config = self.load(self.path)
            except (TailhoundError, OSError, ValueError) as exc:
                return self._failed(why, str(exc))
            try:
                await self.apply(config)
            except Exception as exc:  # a swap that fails keeps the process up, reported
                log.exception("%s reload (%s): applying %s failed", self.what, why, self.path)
                return self._failed(why, f"applying it failed: {exc}")
            self.reloads.labels("success").inc()
            self.last_ok.set(1)
            self.last_ok_ts.set(time.time())
            log.info("%s reloaded (%s) from %s", self.what, why, self.path)
            return True

    def _failed(self, why: str, message: str) -> bool:
        self.reloads.labels("failure").inc()
        self.last_ok.set(0)
        log.error("%s reload (%s) rejected, the running config stays: %s", self.what, why, message)
        return False

    def on_sighup(self) -> None:
        """Install SIGHUP -> reload on the running loop (a no-op off the main thread or on Windows)."""
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()

        def fire() -> None:
            task = loop.create_task(self.reload("SIGHUP"))
            tasks.add(task)  # keep a reference until done
            task.add_done_callback(tasks.discard)

        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGHUP, fire)

    def off_sighup(self) -> None:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


def restart_only_changes(old: object, new: object, fields: tuple[str, ...]) -> list[str]:
    """The `fields` whose value differs between two configs (pydantic models): they take a restart."""
    return [f for f in fields if getattr(old, f) != getattr(new, f)]
