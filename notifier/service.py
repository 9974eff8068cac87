"""The notifier service: the Kafka side of :class:`tailhound.notifier.pipeline.Notifier`.

Incident events come in through a consumer group (of several instances one is active, the others stand
by); every change of a group or silence goes to the compacted ``notifier-state`` topic before the incident
offsets are committed, so an instance that takes over rebuilds from it (no duplicate page, the resolve still
goes out) and picks up the silences the CLI writes there. Out: receivers, and dead letters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from tailhound.deadletter import DeadLetter
from tailhound.incident import IncidentEvent
from tailhound.kafka import make_consumer, make_producer
from tailhound.settings import Settings
from tailhound.streams_settings import STATIC_REBALANCE_TIMEOUT_S

from .config import NotifierConfig
from .deliver import Deliverer
from .history import mirror
from .limits import FLUSH_SLICE_S, MAX_SILENCES, STATE_RECORDS_PER_TICK
from .metrics import DisabledReceiversCollector, NotifierCollector
from .model import Notification
from .pipeline import Notifier, Outcome
from .receiver_set import reroute
from .receivers import Receiver
from .receivers.alertmanager import resume_receivers, stand_by_receivers
from .state import Silence
from .state_topic import read_state

log = logging.getLogger(__name__)

#: the longest a notifier waits on its state-topic reader in one tick (it never blocks the loop)
STATE_TAIL_WAIT_S = 0.5

FETCH_WAIT_MS = 100


class _Takeover(ConsumerRebalanceListener):
    def __init__(self, service: NotifierService) -> None:
        self.service = service

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            await self.service.stand_by()

    async def on_partitions_assigned(self, assigned: Any) -> None:
        # the main loop takes over before it handles the next batch (records of the new assignment
        # may come with the same poll, so nothing is dropped)
        self.service.active = False
        self.service._takeover_due = bool(assigned)


class NotifierService:
    def __init__(
        self,
        settings: Settings,
        config: NotifierConfig,
        receivers: dict[str, Receiver],
        *,
        clock: Callable[[], float] = time.time,
        group_id: str | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.settings = settings
        #: receivers disabled at start for a missing secret (build_receivers): their routes go to the fallback
        self.disabled: dict[str, str] = dict(getattr(receivers, "disabled", {}))
        fallback = getattr(receivers, "fallback", None)
        self.config = reroute(config, self.disabled, fallback) if self.disabled and fallback else config
        self.receivers = receivers
        self.clock = clock
        self.group_id = group_id or f"{settings.streams.app_id}-notifier"
        self.notifier = Notifier(
            self.config, runbook_url=settings.notifier.runbook_url, console_url=settings.notifier.console_link_base()
        )
        self.active = False
        self._takeover_due = False
        self._dirty: dict[str, Any] = {}
        self._producer = make_producer(settings, linger_ms=5)
        self._consumer: AIOKafkaConsumer | None = None
        self._state_tail: AIOKafkaConsumer | None = None
        self._deliverer = self._make_deliverer()
        self.ingested = 0
        self.created: list[Notification] = []
        self.api_port: int | None = None
        #: this service's metrics (tailhound.notifier.metrics); the worker passes its own registry
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(NotifierCollector(self))
        self.registry.register(DisabledReceiversCollector(self))

    def _make_deliverer(self) -> Deliverer:
        return Deliverer(
            self.notifier,
            self.receivers,
            self.config.delivery,
            clock=self.clock,
            on_outcome=self._record,
            on_dead_letter=self._dead_letter,
        )

    # --- state -----------------------------------------------------------------------------------
    async def _record(self, outcome: Outcome) -> None:
        self._dirty.update(outcome.dirty)
        for gid, what in outcome.decisions:
            log.info("notifier: %s: %s", gid, what)

    async def _persist(self) -> None:
        """Write the changed keys to the state topic and wait until the broker has them."""
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        futures = [
            await self._producer.send(
                self.settings.notifier_state_topic,
                key=k.encode(),
                value=json.dumps(v, separators=(",", ":")).encode() if v is not None else None,
            )
            for k, v in dirty.items()
        ]
        await asyncio.gather(*futures)

    async def stand_by(self) -> None:
        """Another instance gets the incidents: stop delivering and drop unsaved changes (the new owner
        rebuilds from the state topic; writing ours later could overwrite its newer state)."""
        self.active = False
        await self._deliverer.stop()
        await stand_by_receivers(self.receivers)  # receivers that re-post (alertmanager) stop
        self._dirty.clear()
        log.info("notifier: incidents partition revoked; standing by")

    async def take_over(self) -> None:
        """Rebuild the notifier from the state topic (this instance just got the incidents partition)."""
        assert self._state_tail is not None
        items, _ = await read_state(self.settings, self._state_tail)
        await self._deliverer.stop()
        self._dirty.clear()
        self.notifier = Notifier.restore(
            self.config,
            items,
            now=self.clock(),
            runbook_url=self.settings.notifier.runbook_url,
            console_url=self.settings.notifier.console_link_base(),
        )
        self._deliverer = self._make_deliverer()
        self.active = True
        await resume_receivers(self.receivers, self.notifier, self.clock())  # re-posting resumes (alertmanager)
        pending = sum(len(dl.pending) for g in self.notifier.groups.values() for dl in g.logs.values())
        log.info(
            "notifier: active with %d groups, %d silences, %d pending notifications, %d recent groups",
            len(self.notifier.groups),
            len(self.notifier.silences),
            pending,
            len(self.notifier.recent),
        )

    async def _tail_state(self, standby: bool = False) -> None:
        """Pick up silences written by the CLI (our own group writes come back too and are ignored); standing
        by, also the active instance's groups, so this instance's incident console shows what it does.

        A bounded number of records per tick (each is validated and its patterns compiled), so a flood
        on the state topic is taken in over several ticks instead of holding the event loop."""
        assert self._state_tail is not None
        if standby and not await self._state_tail_assigned():
            return
        try:  # never held up here: a standby must see its takeover on time
            batch = await asyncio.wait_for(
                self._state_tail.getmany(timeout_ms=0, max_records=STATE_RECORDS_PER_TICK), STATE_TAIL_WAIT_S
            )
        except TimeoutError:
            return
        for records in batch.values():
            for rec in records:
                key = rec.key.decode(errors="replace") if rec.key else ""
                if standby and mirror(self.notifier.groups, self.notifier.recent, key, rec.value):
                    continue
                if not key.startswith("silence:") or not rec.value:
                    continue
                try:
                    s = Silence.model_validate_json(rec.value)
                except ValidationError as exc:
                    log.warning("notifier: ignoring a bad silence record %s: %s", key[:80], exc.errors()[0]["msg"])
                    continue
                known = self.notifier.silences.get(s.id)
                if known is None and not self.notifier.accepts_silence(s, self.clock()):
                    log.warning(
                        "notifier: ignoring silence %s: already %d active or pending silences", s.id, MAX_SILENCES
                    )
                    continue
                if known is None or known.model_dump() != s.model_dump():
                    self.notifier.silences[s.id] = s
                    log.info("notifier: silence %s %s (%s)", s.id, s.state(self.clock()), s.comment[:200])

    async def _state_tail_assigned(self) -> bool:
        """The state-topic reader has its partitions (a takeover assigns them; an instance that has only stood
        by assigns them here, from the start of the topic); False while the broker does not name them yet."""
        assert self._state_tail is not None
        if self._state_tail.assignment():
            return True
        topic = self.settings.notifier_state_topic
        parts = self._state_tail.partitions_for_topic(topic)
        if not parts:
            with contextlib.suppress(Exception):  # the topic's metadata, for the next tick (bounded: one request)
                await asyncio.wait_for(self._state_tail.topics(), STATE_TAIL_WAIT_S)
            return False
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        self._state_tail.assign(tps)
        await self._state_tail.seek_to_beginning(*tps)
        return True

    async def write_silence(self, silence: Silence) -> None:
        """Store a silence on the state topic (the active instance, maybe this one, picks it up)."""
        await self._producer.send_and_wait(
            self.settings.notifier_state_topic,
            key=f"silence:{silence.id}".encode(),
            value=silence.model_dump_json().encode(),
        )
        self.notifier.silences[silence.id] = silence

    async def _dead_letter(self, n: Notification, reason: str) -> None:
        record = DeadLetter.from_bytes(
            n.model_dump_json().encode(),
            ts=time.time(),
            reason=reason,
            stage="deliver",
            topic=self.settings.incidents_topic,
            key=n.idempotency_key,
        )
        await self._producer.send_and_wait(
            self.settings.deadletter_topic, key=n.idempotency_key.encode(), value=record.model_dump_json().encode()
        )

    # --- loop ------------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        await self._producer.start()
        self._state_tail = make_consumer(self.settings, group_id=None)
        await self._state_tail.start()
        # a short fetch wait: a broker that holds an empty fetch for fetch_max_wait_ms (the bundled one
        # answers after about half of it) would otherwise add up to 250 ms to every page
        # a worker with a stable identity (streams.instance_id) is a static member of the notifier's group too:
        # its restart within the session timeout moves nothing, so the active notifier stays active
        instance = self.settings.streams.instance_id
        static = (
            {
                "group_instance_id": f"{instance}-notifier",
                "session_timeout_ms": int(self.settings.streams.session_timeout_s * 1000),
                "rebalance_timeout_ms": int(STATIC_REBALANCE_TIMEOUT_S * 1000),
            }
            if instance
            else {}
        )
        self._consumer = make_consumer(
            self.settings,
            group_id=self.group_id,
            **{
                "session_timeout_ms": 10_000,
                "heartbeat_interval_ms": 1_000,
                "max_poll_interval_ms": 300_000,
                "fetch_max_wait_ms": FETCH_WAIT_MS,
                **static,
            },
        )
        self._consumer.subscribe([self.settings.incidents_topic], listener=_Takeover(self))
        await self._consumer.start()
        api = None
        listen = self.settings.notifier.api_listen
        if listen:
            from .api import ApiAccess, serve

            try:
                api = await serve(
                    self,
                    listen,
                    ApiAccess.from_settings(self.settings.notifier),
                    console=self.settings.notifier.console,
                )
                log.info("notifier: API on %s (port %s)", listen, self.api_port)
            except OSError as exc:  # the port is taken: notify anyway, without the API
                log.error(
                    "notifier: cannot serve the API on %s: %s; notifying without it. Another worker on "
                    "this host? Give each its own notifier.api_listen (TAILHOUND_NOTIFIER__API_LISTEN; "
                    "port 0 takes any free port)",
                    listen,
                    exc,
                )
        try:
            while not stop.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=int(self.settings.notifier.tick_s * 1000), max_records=500
                )
                if self._takeover_due:
                    self._takeover_due = False
                    await self.take_over()
                if not self.active:
                    await self._tail_state(standby=True)  # the console of every instance shows the same
                    continue
                await self._tail_state()
                events = [ev for records in batch.values() for rec in records if (ev := self._decode(rec)) is not None]
                now = self.clock()
                if events:
                    self.ingested += len(events)
                    await self._record(self.notifier.ingest(events, now))
                while True:  # in time slices: many due groups never hold the event loop (stream processing)
                    flushed = self.notifier.flush(now, slice_s=FLUSH_SLICE_S)
                    self.created.extend(flushed.created)
                    await self._record(flushed)
                    if not flushed.more or stop.is_set() or not self.active:
                        break
                    # a timer, not sleep(0): behind every callback and timer already due (sleep(0) would
                    # run the next slice before them)
                    await asyncio.sleep(0.001)
                await self._persist()
                if batch:
                    await self._consumer.commit()
                self._deliverer.pump()
        finally:
            if api is not None:
                await api.cleanup()
            await self._deliverer.stop()
            with contextlib.suppress(Exception):
                await self._persist()
            await self._consumer.stop()
            await self._state_tail.stop()
            await self._producer.stop()
            for r in self.receivers.values():
                with contextlib.suppress(Exception):
                    await r.close()

    def _decode(self, rec: Any) -> IncidentEvent | None:
        try:
            return IncidentEvent.model_validate_json(rec.value)
        except ValidationError as exc:
            log.warning("notifier: skipping a bad incident event at offset %s: %s", rec.offset, exc.errors()[0]["msg"])
            return None
