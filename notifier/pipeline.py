"""The notifier's pure core: incident events and time in, notifications for receivers out.

The pipeline, assembled here and nowhere else::

    intake:  dedup -> group                      (as incident events arrive)
    notify:  select -> inhibit -> silence -> flap -> route -> enqueue
             (for groups whose flush time has come; enqueue appends one Notification per receiver to
             the group's durable delivery log)
    deliver: tailhound.notifier.deliver (retries, backoff, Retry-After, circuit breaker, dead letters)

:class:`Notifier` holds the state in memory and reports which table keys changed (``dirty``), so the
Faust wiring only persists and the tests drive it with a fake clock, no broker needed. Groups it is done
with are kept as read-only history for the incident console (``recent``, :mod:`tailhound.notifier.history`);
no stage reads them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from tailhound.errors import DeliveryError
from tailhound.incident import IncidentEvent

from . import history
from .config import NotifierConfig
from .limits import MAX_EXPIRED_SILENCES, MAX_SILENCES
from .model import Notification
from .stages import Context
from .stages.dedup import dedup
from .stages.enqueue import enqueue
from .stages.flap import flap
from .stages.group import group
from .stages.inhibit import inhibit
from .stages.route import route
from .stages.select import RECHECK_S, reschedule, select
from .stages.silence import silence
from .state import DeliveryLog, GroupState, Silence

INTAKE = (dedup, group)
NOTIFY = (select, inhibit, silence, flap, route, enqueue)

__all__ = ["DEFAULT_RUNBOOK", "INTAKE", "NOTIFY", "RECHECK_S", "Notifier", "Outcome"]

DEFAULT_RUNBOOK = "https://github.com/tailhound/tailhound/blob/main/docs/root-causes.md"
#: expired silences stay listed this long
SILENCE_RETENTION_S = 7 * 86400.0

logger = logging.getLogger(__name__)


@dataclass
class Outcome:
    """What one call changed: table keys to write (value None = delete) and notifications created."""

    dirty: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    created: list[Notification] = field(default_factory=list)
    decisions: list[tuple[str, str]] = field(default_factory=list)
    #: flush stopped at its time slice: groups that are due remain (call flush again)
    more: bool = False


class Notifier:
    def __init__(
        self, config: NotifierConfig, *, runbook_url: str = DEFAULT_RUNBOOK, console_url: str | None = None
    ) -> None:
        self.config = config
        self.runbook_url = runbook_url
        #: the incident console's external base URL: notifications link to ``<console_url>/incidents/<lead>``
        self.console_url = console_url.rstrip("/") if console_url else None
        self.groups: dict[str, GroupState] = {}
        #: groups the pipeline is done with, kept for the console (never read by the stages)
        self.recent: dict[str, GroupState] = {}
        self.open_groups: dict[str, str] = {}
        self.incident_group: dict[str, str] = {}
        self.seen: dict[str, int] = {}
        self.silences: dict[str, Silence] = {}
        for i, window in enumerate(config.maintenance):
            s = Silence(
                id=f"maintenance-{i + 1}",
                matchers=window.matchers,
                starts_at=window.starts_at.timestamp(),
                ends_at=window.ends_at.timestamp(),
                author=window.author,
                comment=window.comment,
                created_at=window.starts_at.timestamp(),
                source="config",
            )
            self.silences[s.id] = s

    # --- state ---------------------------------------------------------------------------------
    @classmethod
    def restore(cls, config: NotifierConfig, items: dict[str, Any], *, now: float | None = None, **kw: Any) -> Notifier:
        """Rebuild from the table's items (``group:<id>``, ``silence:<id>``, ``recent:<id>``). A silence record
        that breaks the limits (:mod:`tailhound.notifier.limits`) is skipped with a warning, and so is every
        live one past MAX_SILENCES (`now`, default the wall clock, says which are live)."""
        self = cls(config, **kw)
        now = time.time() if now is None else now
        live = 0
        for key, value in items.items():
            if value is None:
                continue
            if key.startswith("group:"):
                grp = GroupState.model_validate(value)
                self.groups[grp.group_id] = grp
                self.open_groups[grp.group_key] = grp.group_id
                for iid, ev in grp.incidents.items():
                    self.incident_group[iid] = grp.group_id
                    self.seen[iid] = ev.sequence
            elif key.startswith(history.RECENT_PREFIX):
                history.restore_recent(self.recent, key, value)
            elif key.startswith("silence:"):
                try:
                    s = Silence.model_validate(value)
                except ValidationError as exc:  # e.g. over the limits, or written by hand
                    logger.warning("notifier: skipping silence record %s: %s", key, _first_error(exc))
                    continue
                if s.source == "cli" and s.state(now) != "expired":
                    if live >= MAX_SILENCES:
                        logger.warning(
                            "notifier: skipping silence %s: already %d active or pending silences", s.id, MAX_SILENCES
                        )
                        continue
                    live += 1
                self.silences[s.id] = s
        return self

    def live_silences(self, now: float) -> int:
        """Silences made with the CLI or the API that are active or pending (what MAX_SILENCES bounds)."""
        return sum(1 for s in self.silences.values() if s.source == "cli" and s.state(now) != "expired")

    def accepts_silence(self, s: Silence, now: float) -> bool:
        """Whether `s` may be added: an expired one always (it is forgotten in time), a live one while
        fewer than MAX_SILENCES are live."""
        return s.state(now) == "expired" or self.live_silences(now) < MAX_SILENCES

    def _context(self, now: float) -> Context:
        return Context(
            now=now,
            config=self.config,
            groups=self.groups,
            open_groups=self.open_groups,
            incident_group=self.incident_group,
            seen=self.seen,
            silences=self.silences,
            runbook_url=self.runbook_url,
            console_url=self.console_url,
        )

    def _outcome(self, ctx: Context, created: list[Notification] | None = None) -> Outcome:
        dirty: dict[str, dict[str, Any] | None] = {}
        stores: dict[str, dict[str, Any]] = {"group": self.groups, "silence": self.silences, "recent": self.recent}
        for key in ctx.dirty:
            kind, _, ident = key.partition(":")
            obj = stores[kind].get(ident)
            dirty[key] = obj.model_dump(mode="json") if obj is not None else None
        return Outcome(dirty=dirty, created=created or [], decisions=ctx.decisions)

    # --- intake --------------------------------------------------------------------------------
    def ingest(self, events: list[IncidentEvent], now: float) -> Outcome:
        ctx = self._context(now)
        batch: list[Any] = list(events)
        for stage in INTAKE:
            batch = stage(batch, ctx)
        history.record_intake(self.groups, self.incident_group, batch)
        return self._outcome(ctx)

    def add_silence(self, s: Silence) -> Outcome:
        ctx = self._context(s.created_at)
        self.silences[s.id] = s
        ctx.dirty.add(f"silence:{s.id}")
        return self._outcome(ctx)

    def expire_silence(self, silence_id: str, now: float) -> Outcome:
        ctx = self._context(now)
        s = self.silences.get(silence_id)
        if s is not None and s.source == "cli" and s.expired_at is None:
            s.expired_at = now
            ctx.dirty.add(f"silence:{s.id}")
        return self._outcome(ctx)

    # --- notify --------------------------------------------------------------------------------
    def next_flush(self) -> float | None:
        times = [g.next_flush_at for g in self.groups.values() if g.next_flush_at is not None]
        return min(times) if times else None

    def flush(self, now: float, *, slice_s: float | None = None) -> Outcome:
        """Run the notify stages for every due group and queue the resulting notifications.

        With `slice_s`, stop taking groups once that much (CPU) time has gone: the groups left are still
        due, ``Outcome.more`` says so, and the caller lets other work run before it calls again. Groups
        are independent here, so one call or several give the same notifications."""
        ctx = self._context(now)
        due = [g for g in self.groups.values() if g.next_flush_at is not None and g.next_flush_at <= now]
        created: list[Notification] = []
        started = time.perf_counter()
        done = 0
        for grp in due:
            if slice_s is not None and done and time.perf_counter() - started >= slice_s:
                break
            done += 1
            batch: list[Any] = [grp]
            for stage in NOTIFY:
                batch = stage(batch, ctx)
            created.extend(batch)
            reschedule(grp, ctx)
        self._collect(ctx)
        out = self._outcome(ctx, created)
        out.more = done < len(due)
        return out

    def _collect(self, ctx: Context) -> None:
        """Forget groups that resolved more than a flap window ago and have nothing left to deliver (kept as
        history for the console, :mod:`tailhound.notifier.history`), and silences long expired."""
        window = self.config.flap.window
        for gid, grp in list(self.groups.items()):
            if (
                grp.status == "resolved"
                and grp.notified_status != "firing"
                and grp.idle()
                and ctx.now - grp.status_since > window
                and grp.next_flush_at is None
            ):
                del self.groups[gid]
                if self.open_groups.get(grp.group_key) == gid:
                    del self.open_groups[grp.group_key]
                for iid in grp.incidents:
                    self.incident_group.pop(iid, None)
                    self.seen.pop(iid, None)
                ctx.dirty.add(f"group:{gid}")
                history.retire(self.recent, grp, ctx.dirty)
        history.evict(self.recent, ctx.now, ctx.dirty)
        expired: list[tuple[float, str]] = []
        for sid, s in list(self.silences.items()):
            if s.source != "cli" or s.state(ctx.now) != "expired":
                continue
            ended = min(s.ends_at, s.expired_at or s.ends_at)
            if ctx.now - ended > SILENCE_RETENTION_S:
                del self.silences[sid]
                ctx.dirty.add(f"silence:{sid}")
            else:
                expired.append((ended, sid))
        if len(expired) > MAX_EXPIRED_SILENCES:  # keep the newest: listing history, not state
            for _, sid in sorted(expired)[: len(expired) - MAX_EXPIRED_SILENCES]:
                del self.silences[sid]
                ctx.dirty.add(f"silence:{sid}")

    # --- deliver bookkeeping -------------------------------------------------------------------
    def deliverable(self, now: float) -> list[tuple[str, str, Notification, dict[str, str]]]:
        """(group_id, receiver, notification, receipt) of every log whose oldest pending one is due."""
        out = []
        for grp in self.groups.values():
            for name, log in grp.logs.items():
                if log.pending and log.next_attempt_at <= now:
                    out.append((grp.group_id, name, log.pending[0], dict(log.receipt)))
        out.sort(key=lambda item: (item[2].ts, item[0]))
        return out

    def delivered(self, group_id: str, receiver: str, sequence: int, receipt: dict[str, str], now: float) -> Outcome:
        ctx = self._context(now)
        log = self._log(group_id, receiver)
        if log is not None and log.pending and log.pending[0].sequence == sequence:
            n = log.pending.pop(0)
            log.delivered = sequence
            if not n.flapping:
                log.last_kind = n.kind
            log.note_outcome(sequence, "delivered", at=now, attempts=log.attempts)
            log.receipt.update(receipt)
            log.attempts, log.next_attempt_at, log.last_error = 0, 0.0, None
            ctx.touch(self.groups[group_id])
        return self._outcome(ctx)

    def failed(
        self, group_id: str, receiver: str, sequence: int, error: DeliveryError, now: float, wait_s: float
    ) -> tuple[Outcome, Notification | None]:
        """Record a failed attempt. Returns the notification when it is given up on (dead letter)."""
        ctx = self._context(now)
        log = self._log(group_id, receiver)
        if log is None or not log.pending or log.pending[0].sequence != sequence:
            return self._outcome(ctx), None
        ctx.touch(self.groups[group_id])
        log.attempts += 1
        log.last_error = error.reason
        policy = self.config.delivery
        if (
            not error.retryable
            or (policy.max_attempts is not None and log.attempts >= policy.max_attempts)
            or now - log.pending[0].ts >= policy.give_up_after
        ):
            n = log.pending.pop(0)
            log.delivered = sequence
            if not n.flapping:
                log.last_kind = n.kind
            log.note_outcome(sequence, "gave-up", at=now, attempts=log.attempts, error=error.reason)
            log.attempts, log.next_attempt_at = 0, 0.0
            return self._outcome(ctx), n
        log.note_outcome(sequence, "retrying", attempts=log.attempts, error=error.reason)
        log.next_attempt_at = now + wait_s
        return self._outcome(ctx), None

    def _log(self, group_id: str, receiver: str) -> DeliveryLog | None:
        grp = self.groups.get(group_id)
        return grp.logs.get(receiver) if grp is not None else None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc'])) or 'record'}: {err['msg']}"
