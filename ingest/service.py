"""``tailhound ingest``: Prometheus' samples in (remote write, federation), snapshots out to the telemetry topic.

One :class:`IngestService` runs

- the HTTP server (:mod:`tailhound.ingest.server`) whose ``POST /api/v1/write`` hands each body to the
  :class:`~tailhound.ingest.receiver.RemoteWriteIngest` on one worker thread (the receiver is not thread-safe,
  and decoding a large request must not hold up the event loop: inside ``tailhound worker`` that loop is
  Faust's);
- a timer every ``poll_s`` that publishes the scrapes that settled;
- the federation pull (:mod:`tailhound.ingest.federation`) every ``federation.interval_s``, when configured;
- the publisher: the agent's :class:`~tailhound.agents.sender.SnapshotSender` and outbox (one message per
  snapshot, key = node, lz4, resent in order after a broker outage), whose backlog is the receiver's
  back-pressure (503 + Retry-After: Prometheus keeps the samples in its WAL and resends them);
- the dead-letter queue (:mod:`tailhound.ingest.dead_letters`).

Stopping (SIGTERM) closes the server first (Prometheus' next attempt fails and is retried against the
restarted service), hands out every open scrape, and flushes the outbox (what the broker does not take
within the flush time goes to ``publish.buffer.spill_file`` when set). What Prometheus was answered 204 for
is published unless the process is killed (SIGKILL) before the scrape settled (``settle_s``).

SIGHUP reloads ingest.yaml (:meth:`IngestService.reconfigure`): the receiver (grouping, auth, limits, HA) and
the federation pull are swapped, their open scrapes handed out first and the outbox kept; ``listen``, ``path``,
``publish`` and ``max_concurrent_requests`` keep their started values until a restart. An invalid file is
logged and the running config stays.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from concurrent.futures import ThreadPoolExecutor

from tailhound.agents.buffer import Outbox
from tailhound.agents.sender import SnapshotSender
from tailhound.catalog import Catalog, default_catalog
from tailhound.config_reload import restart_only_changes
from tailhound.ingest.config import IngestServiceConfig
from tailhound.ingest.dead_letters import DeadLetterQueue
from tailhound.ingest.federation import FederationPuller
from tailhound.ingest.ha_dedup import HaTracker
from tailhound.ingest.metrics import IngestMetrics
from tailhound.ingest.receiver import Emitted, IngestResult, Reject, RemoteWriteIngest
from tailhound.ingest.server import IngestServer, make_app
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings

log = logging.getLogger("tailhound.ingest")

#: ingest.yaml keys a reload cannot change in a running service (its server and its publisher)
RESTART_ONLY = ("listen", "path", "publish", "max_concurrent_requests")

#: the dead letters' `topic` field: where the rejected input came from
ORIGIN_REMOTE_WRITE = "prometheus-remote-write"
ORIGIN_FEDERATION = "prometheus-federation"


class IngestService:
    def __init__(
        self,
        settings: Settings,
        config: IngestServiceConfig,
        *,
        catalog: Catalog | None = None,
        sender: SnapshotSender | None = None,
        dead_letters: DeadLetterQueue | None = None,
    ) -> None:
        self.settings, self.config = settings, config
        self.catalog = catalog or default_catalog()
        self.metrics = IngestMetrics()
        self._sender = sender
        self.dead_letters = dead_letters or DeadLetterQueue(settings, self.metrics)
        self.ha = HaTracker(config.ha) if config.ha is not None else None
        self.receiver = RemoteWriteIngest(
            config.receiver_config(), catalog=self.catalog, backlog=self.backlog, ha=self.ha
        )
        self.puller = FederationPuller(config.federation, catalog=self.catalog) if config.federation else None
        rw = self.receiver.config
        self.server = IngestServer(
            self.metrics,
            max_body_bytes=rw.limits.max_body_bytes,
            max_in_flight=config.max_concurrent_requests,
            retry_after_s=rw.retry_after_s,
            readiness=self.readiness,
            limits=config.http,
        )
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ingest")
        self._tasks: list[asyncio.Task] = []
        self.metrics.watch(self.stats, self.gauges)

    # -- state ---------------------------------------------------------------------------------------------

    @property
    def sender(self) -> SnapshotSender:
        if self._sender is None:
            p = self.config.publish
            outbox = Outbox(
                max_messages=p.buffer.max_messages,
                max_bytes=p.buffer.max_bytes,
                spill_file=p.buffer.spill_file,
                spill_max_bytes=p.buffer.spill_max_bytes,
            )
            self._sender = SnapshotSender(
                self.settings,
                outbox,
                self.metrics,
                batch_max=p.batch_max,
                linger_ms=p.linger_ms,
                compression=None if p.compression == "none" else p.compression,
                request_timeout_s=p.request_timeout_s,
                bundle=p.bundles,
                wire=p.wire,
                layout_every_s=p.layout_every_s,
            )
        return self._sender

    def backlog(self) -> int:
        return len(self.sender.outbox)

    @property
    def port(self) -> int | None:
        """The port the server bound (None before start, or without a server)."""
        return self.server.port

    def stats(self) -> dict[str, int]:
        out = dict(self.receiver.stats)
        parts = [self.receiver.grouper.stats, self.ha.stats if self.ha else {}]
        if self.puller is not None:
            parts += [self.puller.stats, self.puller.grouper.stats]
        for part in parts:
            for k, v in part.items():
                out[k] = out.get(k, 0) + v
        return out

    def gauges(self) -> dict[str, float]:
        g = self.receiver.grouper
        return {
            "pending_samples": g.pending_samples,
            "open_scrapes": g.open_scrapes,
            "sources": g.source_count,
            "dead_letter_queue": len(self.dead_letters),
        }

    def readiness(self) -> tuple[bool, str]:
        if self.server.stopping:
            return False, "stopping"
        backlog, limit = self.backlog(), self.receiver.config.max_backlog
        if backlog >= limit:
            return False, f"publisher behind: {backlog} snapshots wait for the broker (limit {limit})"
        return True, "ready"

    # -- flow ----------------------------------------------------------------------------------------------

    def _publish(self, out: IngestResult | Emitted, origin: str) -> None:
        for snap in out.snapshots:
            self.sender.enqueue(snap)
        for reject in out.rejects:
            self._dead_letter(reject, origin)

    def _dead_letter(self, reject: Reject, origin: str) -> None:
        self.dead_letters.put(reject.dead_letter(origin))

    async def accept(self, body: bytes, headers: dict[str, str]) -> IngestResult:
        """One remote-write request, decoded on the ingest thread; its snapshots and rejects published."""
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._thread, self.receiver.accept, body, headers)
        self._publish(result, ORIGIN_REMOTE_WRITE)
        return result

    async def poll(self) -> None:
        loop = asyncio.get_running_loop()
        self._publish(await loop.run_in_executor(self._thread, self.receiver.poll), ORIGIN_REMOTE_WRITE)

    async def _poll_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.poll_s)
            try:
                await self.poll()
            except Exception:  # the timer must survive one bad round (Faust timers do not)
                log.exception("publishing settled scrapes failed")

    async def _federation_loop(self) -> None:
        assert self.puller is not None and self.config.federation is not None
        interval = self.config.federation.interval_s
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                self._publish(await self.puller.pull_once(), ORIGIN_FEDERATION)
            except Exception:
                log.exception("federation pull failed")
            next_at += interval
            now = loop.time()
            if next_at < now:  # a pull that took longer than the interval: skip, do not bunch up
                next_at = now + interval
            await asyncio.sleep(next_at - now)

    async def start(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ensure_topics(self.settings), timeout=10)  # a broker down now: buffer
        await self.sender.start()
        await self.dead_letters.start()
        if self.config.listen:
            port = await self.server.start(make_app(self.config.path, self.accept, self.server), self.config.listen)
            log.info(
                "remote write on http://%s:%d%s -> %s",
                self.config.listen.rpartition(":")[0] or "127.0.0.1",
                port,
                self.config.path,
                self.settings.telemetry_topic,
            )
        self._tasks.append(asyncio.create_task(self._poll_loop(), name="ingest-poll"))
        if self.puller is not None:
            self._tasks.append(asyncio.create_task(self._federation_loop(), name="ingest-federation"))
            log.info(
                "federation: pulling %s every %.0f s", self.config.federation.url, self.config.federation.interval_s
            )

    async def reconfigure(self, new: IngestServiceConfig) -> None:
        """Swap in a reloaded config: receiver and federation anew (their counters carried over), the
        server and the outbox as they are."""
        stays = restart_only_changes(self.config, new, RESTART_ONLY)
        if stays:
            log.warning("ingest.yaml: %s changed: kept as started until the service restarts", ", ".join(stays))
            new = new.model_copy(update={f: getattr(self.config, f) for f in stays})
        receiver_config = new.receiver_config()  # reads the token files: a missing one fails the reload here
        loop = asyncio.get_running_loop()
        old = self.receiver
        self._publish(await loop.run_in_executor(self._thread, old.close), ORIGIN_REMOTE_WRITE)
        self.ha = HaTracker(new.ha) if new.ha is not None else None
        receiver = RemoteWriteIngest(receiver_config, builder=old.builder, backlog=self.backlog, ha=self.ha)
        receiver.stats, receiver.grouper.stats = old.stats, old.grouper.stats
        self.receiver = receiver
        self.server.max_body_bytes = receiver_config.limits.max_body_bytes
        self.server.retry_after_s = receiver_config.retry_after_s
        for task in [t for t in self._tasks if t.get_name() == "ingest-federation"]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            self._tasks.remove(task)
        if self.puller is not None:
            with contextlib.suppress(Exception):
                await self.puller.close()
        self.config = new
        self.puller = FederationPuller(new.federation, catalog=self.catalog) if new.federation else None
        if self.puller is not None:
            self._tasks.append(asyncio.create_task(self._federation_loop(), name="ingest-federation"))

    async def stop(self, flush_timeout_s: float = 5.0) -> None:
        """Stop taking requests, publish every open scrape, flush (bounded: a few seconds with the broker gone)."""
        await self.server.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        loop = asyncio.get_running_loop()
        self._publish(await loop.run_in_executor(self._thread, self.receiver.close), ORIGIN_REMOTE_WRITE)
        if self.puller is not None:
            with contextlib.suppress(Exception):
                await self.puller.close()
        await self.sender.stop(flush_timeout_s=flush_timeout_s)
        await self.dead_letters.stop()
        self._thread.shutdown(wait=False)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set (the CLI sets it on SIGINT/SIGTERM)."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
