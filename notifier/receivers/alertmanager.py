"""Alertmanager: incidents forwarded as alerts to Alertmanager's ``POST /api/v2/alerts``, for teams that
already route, group, inhibit and silence there.

Every incident of a notification is one alert (Alertmanager's *postable alert*): labels ``alertname``
(``TailhoundIncident`` or a name built from the root cause), ``root_cause``, ``severity``,
``incident_id``, ``rule``, the scope (``node``, ``gpus``, ``model``, ``engine``, ``endpoint``,
``nodes``), the rule's labels and the receiver's static ``labels``; annotations ``summary``,
``description``, ``evidence``, ``actions`` (numbered lines), ``runbook_url`` and the notification's
other links; ``startsAt`` the time the incident opened; ``generatorURL`` the console link when one is
configured.

- **One alert per incident, kept stable.** Alertmanager identifies an alert by its label set, so the
  labels an incident got on its first post here are reused for every later post (updates, re-posts,
  the resolve), even when its severity, scope or rule labels change meanwhile (the annotations show the
  current values). They travel in the receipt, which the notifier stores durably with the group, so a
  restart keeps them too.
- **Firing alerts expire unless re-posted**, as Prometheus does it: a firing alert's ``endsAt`` is
  ``3 x repost_interval`` ahead and the receiver re-posts every open alert each ``repost_interval``, so
  Alertmanager keeps it active while the incident is open and resolves it by itself within three
  intervals when nothing re-posts it any more. A resolve posts ``endsAt`` = the incident's
  ``resolved_at`` (and is re-posted until the last firing ``endsAt`` has passed, so an Alertmanager that
  missed it resolves it early rather than by expiry).
- **Several Alertmanagers** (an HA pair does not share alerts, only silences and the notification log):
  each URL gets every post. A notification counts as delivered when at least one accepted it (like
  Prometheus); one that failed everywhere raises a :class:`~tailhound.errors.DeliveryError`, retryable
  unless every Alertmanager refused it (a 4xx other than 408/429), and the deliver stage retries it.
- **Credentials**: optional basic auth (``username`` + ``password`` secret) or a bearer token, from env or
  a file (:mod:`tailhound.notifier.secrets`), never in the YAML; never shown in errors or logs.
- **Where it may send**: every URL's host must be on ``notifier.webhook_allowed_hosts``, checked when the
  receiver is built (worker start, ``notifier check --secrets``) and again on every request.

The re-post loop lives in the receiver and re-posts what this process sent. :func:`resume_receivers`
(for a takeover, once the state is rebuilt) hands it the groups it was last told are firing, with their
receipts, and :func:`stand_by_receivers` (this instance lost the incidents partition) stops it, so that
only the active notifier re-posts and a restart resumes at once. They are hooks for
:class:`tailhound.notifier.service.NotifierService`, which calls them on takeover and stand-by.
The config and the alert payload (pure) are in :mod:`tailhound.notifier.receivers.alertmanager_alerts`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from tailhound.errors import DeliveryError
from tailhound.notifier.model import Notification, Receipt
from tailhound.notifier.receivers.outbound import OutboundGuard, check_outbound
from tailhound.notifier.receivers.webhook import (
    RETRYABLE_STATUS,
    USER_AGENT,
    retry_after_seconds,
    scrub,
    transport_failure,
)
from tailhound.notifier.secrets import Secret
from tailhound.notifier.state import GroupState

from .alertmanager_alerts import (  # noqa: F401 - re-exported: the receiver's config and payload
    ALERTS_PATH,
    ANNOTATION_LIMIT,
    BATCH_SIZE,
    CORE_LABELS,
    DEFAULT_ALERTNAME,
    ENDS_AFTER_INTERVALS,
    MAX_ALERTS_PER_NOTIFICATION,
    MAX_URLS,
    VOLATILE_LABELS,
    AlertmanagerConfig,
    BasicAuth,
    alert_annotations,
    alert_labels,
    alerts_endpoint,
    build_alerts,
    frozen_from_receipt,
    generator_url,
    incident_firing,
    iso,
    label_name,
)

log = logging.getLogger(__name__)
#: characters of the far side's error body kept in a failure reason
_DETAIL_IN_REASON = 300


@dataclass
class _Tracked:
    """A group this receiver posted: re-posted while firing, and its resolve until `until`."""

    notification: Notification
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    firing: bool = True
    until: float = 0.0


class AlertmanagerReceiver:
    """Posts each notification's incidents as alerts to every configured Alertmanager and re-posts open ones."""

    def __init__(
        self,
        config: AlertmanagerConfig,
        environ: dict[str, str] | None = None,
        *,
        allowed_hosts: list[str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """`allowed_hosts`: ``notifier.webhook_allowed_hosts``; every url's host must be on it (ConfigError
        now, and every request is checked again before it leaves). Secrets are resolved now."""
        allowed = list(allowed_hosts or [])
        for url in config.urls:
            check_outbound("alertmanager", config.name, url, allowed)
        self.config = config
        self.name = config.name
        self.clock = clock
        self._endpoints = [alerts_endpoint(u) for u in config.urls]
        self._hosts = {ep: httpx.URL(ep).netloc.decode() for ep in self._endpoints}
        self._secret: Secret | None = None
        self._authorization: Secret | None = None
        if config.basic_auth is not None:
            self._secret = config.basic_auth.password.resolve(environ)
            pair = f"{config.basic_auth.username}:{self._secret.reveal()}".encode()
            self._authorization = Secret("Basic " + base64.b64encode(pair).decode(), "basic_auth")
        elif config.bearer_token is not None:
            self._secret = config.bearer_token.resolve(environ)
            self._authorization = Secret("Bearer " + self._secret.reveal(), config.bearer_token.describe())
        guard = OutboundGuard("alertmanager", config.name, allowed)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            event_hooks={"request": [guard.httpx_hook]},
        )
        self._tracked: dict[str, _Tracked] = {}
        self._lock = asyncio.Lock()
        self._loop_task: asyncio.Task[None] | None = None
        #: re-post cycles run and alerts re-posted (tests, logs)
        self.reposts = 0
        self.reposted_alerts = 0

    def __repr__(self) -> str:
        return f"AlertmanagerReceiver(name={self.name!r}, urls={self.config.urls!r})"

    # --- sending ---------------------------------------------------------------------------------------------
    async def send(self, notification: Notification, receipt: Receipt | None = None) -> Receipt:
        """Post the notification's alerts to every Alertmanager; returns ``{"state": firing|resolved,
        "labels": <the label set of each incident, JSON>}``.

        A flapping notice about a group this receiver already resolved is not sent (it would fire again
        in Alertmanager and page there)."""
        gid = notification.group_id
        tracked = self._tracked.get(gid)
        before = ("firing" if tracked.firing else "resolved") if tracked else (receipt or {}).get("state")
        if notification.flapping and notification.kind == "updated" and before == "resolved":
            log.info("alertmanager %r: flapping notice for resolved %s not sent (no re-page)", self.name, gid)
            return dict(receipt or {})
        frozen = {**frozen_from_receipt(receipt), **(tracked.labels if tracked else {})}
        if len(notification.incidents) > MAX_ALERTS_PER_NOTIFICATION:
            log.warning(
                "alertmanager %r: group %s has %d incidents; posting the first %d",
                self.name,
                gid,
                len(notification.incidents),
                MAX_ALERTS_PER_NOTIFICATION,
            )
        async with self._lock:
            now = self.clock()
            alerts = build_alerts(notification, self.config, now, frozen)
            what = f"alertmanager {self.name!r} {notification.kind} {notification.idempotency_key}"
            errors = await self._post_everywhere(alerts)
            if len(errors) == len(self._endpoints):
                raise self._failure(what, list(errors.values()))
            for error in errors.values():
                log.warning("%s: %s (the others accepted it; the next re-post retries)", what, error.reason)
            posted = notification.incidents[:MAX_ALERTS_PER_NOTIFICATION]
            labels = {i.incident_id: a["labels"] for i, a in zip(posted, alerts, strict=True)}
            firing = any(incident_firing(i, notification) for i in posted)
            self._tracked[gid] = _Tracked(
                notification, labels, firing=firing, until=0.0 if firing else now + self.config.hold_s
            )
        log.info(
            "%s: %d alert(s) accepted by %d of %d Alertmanager(s)",
            what,
            len(alerts),
            len(self._endpoints) - len(errors),
            len(self._endpoints),
        )
        self._ensure_loop()
        return {
            "state": "firing" if firing else "resolved",
            "labels": json.dumps(labels, separators=(",", ":"), sort_keys=True, ensure_ascii=False),
        }

    async def _post_everywhere(self, alerts: list[dict[str, Any]]) -> dict[str, DeliveryError]:
        """POST `alerts` (in batches) to every endpoint at once; the endpoints that failed, with why."""
        results = await asyncio.gather(*(self._post(ep, alerts) for ep in self._endpoints))
        return {ep: err for ep, err in zip(self._endpoints, results, strict=True) if err is not None}

    async def _post(self, endpoint: str, alerts: list[dict[str, Any]]) -> DeliveryError | None:
        what = f"Alertmanager {self._hosts[endpoint]}"
        headers = {"Content-Type": "application/json"}
        if self._authorization is not None:
            headers["Authorization"] = self._authorization.reveal()
        for start in range(0, len(alerts), BATCH_SIZE):
            body = json.dumps(alerts[start : start + BATCH_SIZE], separators=(",", ":"), ensure_ascii=False).encode()
            try:
                async with asyncio.timeout(self.config.timeout_s):
                    response = await self._client.post(endpoint, content=body, headers=headers)
            except DeliveryError as exc:  # the send-time allow-list check
                return exc
            except (httpx.RequestError, TimeoutError) as exc:
                return transport_failure(what, exc, self._secret, self._authorization)
            error = self._outcome(what, response)
            if error is not None:
                return error
        return None

    def _outcome(self, what: str, response: httpx.Response) -> DeliveryError | None:
        status = response.status_code
        if 200 <= status < 300:
            return None
        try:
            detail = response.json()
            detail = detail if isinstance(detail, str) else json.dumps(detail)
        except ValueError:
            detail = response.text
        detail = scrub(detail, self._secret, self._authorization)[:_DETAIL_IN_REASON].strip()
        reason = f"{what}: HTTP {status}" + (f": {detail}" if detail else "")
        if status in RETRYABLE_STATUS or status >= 500:
            retry_after = retry_after_seconds(response.headers.get("Retry-After")) if status in (429, 503) else None
            return DeliveryError(reason, retryable=True, retry_after=retry_after, status=status)
        if 300 <= status < 400:
            reason += " (redirects are not followed; point the url at Alertmanager itself)"
        return DeliveryError(reason, retryable=False, status=status)

    def _failure(self, what: str, errors: list[DeliveryError]) -> DeliveryError:
        retryable = any(e.retryable for e in errors)
        waits = [e.retry_after for e in errors if e.retry_after is not None]
        reason = f"{what}: every Alertmanager failed: " + "; ".join(e.reason for e in errors)
        log.warning("%s (%s)", reason, "retryable" if retryable else "not retryable")
        return DeliveryError(
            reason, retryable=retryable, retry_after=max(waits) if waits else None, status=errors[0].status
        )

    # --- re-posting ------------------------------------------------------------------------------------------
    @property
    def open_groups(self) -> list[str]:
        """The groups whose alerts are firing here (re-posted every interval)."""
        return [gid for gid, t in self._tracked.items() if t.firing]

    async def repost(self) -> int:
        """Post every tracked group's alerts again now: the firing ones with endsAt moved ahead, the resolves
        still within their window. Failures are logged (the next cycle tries again). Returns the alerts sent."""
        async with self._lock:
            now = self.clock()
            alerts: list[dict[str, Any]] = []
            for gid, t in list(self._tracked.items()):
                if not t.firing and t.until <= now:
                    del self._tracked[gid]
                    continue
                alerts.extend(build_alerts(t.notification, self.config, now, t.labels))
            if not alerts:
                return 0
            errors = await self._post_everywhere(alerts)
        self.reposts += 1
        self.reposted_alerts += len(alerts)
        for error in errors.values():
            log.warning("alertmanager %r: re-posting %d alert(s) failed: %s", self.name, len(alerts), error.reason)
        return len(alerts)

    def _ensure_loop(self) -> None:
        if self._tracked and (self._loop_task is None or self._loop_task.done()):
            self._loop_task = asyncio.get_running_loop().create_task(
                self._repost_loop(), name=f"alertmanager-repost-{self.name}"
            )

    async def _repost_loop(self) -> None:
        while self._tracked:
            await asyncio.sleep(self.config.repost_interval)
            try:
                await self.repost()
            except Exception:  # keep re-posting; one bad cycle must not let alerts expire
                log.exception("alertmanager %r: re-post cycle failed", self.name)

    async def resume(self, items: Iterable[tuple[Notification, Receipt]]) -> None:
        """Take over re-posting (this instance became the active notifier): `items` are the groups this
        receiver was last told are firing, with their receipts (the labels their alerts have). Posts them at
        once (Alertmanager may have lost them meanwhile), then every interval."""
        for notification, receipt in items:
            self._tracked[notification.group_id] = _Tracked(notification, frozen_from_receipt(receipt))
        if self._tracked:
            log.info("alertmanager %r: re-posting %d open group(s)", self.name, len(self._tracked))
            await self.repost()
        self._ensure_loop()

    async def stand_by(self) -> None:
        """Stop re-posting and forget the groups (another notifier instance is active now)."""
        await self._stop_loop()
        self._tracked.clear()

    async def _stop_loop(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def close(self) -> None:
        await self._stop_loop()
        await self._client.aclose()


# --- the service's side: takeover and stand-by ---------------------------------------------------------------------
class _NotifierState(Protocol):
    """What :func:`resume_receivers` reads of :class:`tailhound.notifier.pipeline.Notifier`."""

    groups: dict[str, GroupState]
    runbook_url: str

    @property
    def config(self) -> Any: ...


def open_notifications(notifier: _NotifierState, receiver: str, now: float) -> list[tuple[Notification, Receipt]]:
    """Every group whose last notification delivered to `receiver` said firing, as a notification of its
    current incidents (links as the pipeline makes them) with the receiver's receipt."""
    out = []
    for grp in notifier.groups.values():
        log_ = grp.logs.get(receiver)
        if log_ is None or log_.last_kind not in ("opened", "updated") or not grp.incidents:
            continue
        links = dict(notifier.config.links)
        links.setdefault("runbook", f"{notifier.runbook_url}#{grp.lead.root_cause}")
        n = Notification(
            group_id=grp.group_id,
            receiver=receiver,
            sequence=max(log_.delivered, 1),
            kind="updated",
            ts=now,
            incidents=grp.ordered(),
            group_labels=grp.labels,
            links=links,
        )
        out.append((n, dict(log_.receipt)))
    return out


async def resume_receivers(receivers: Mapping[str, object], notifier: _NotifierState, now: float) -> None:
    """After a takeover rebuilt `notifier` from the state topic: every receiver that re-posts (has
    ``resume``) takes over the groups it was last told are firing."""
    for name, receiver in receivers.items():
        resume = getattr(receiver, "resume", None)
        if resume is not None:
            await resume(open_notifications(notifier, name, now))


async def stand_by_receivers(receivers: Mapping[str, object]) -> None:
    """This instance lost the incidents partition: every receiver that re-posts stops."""
    for receiver in receivers.values():
        stand_by = getattr(receiver, "stand_by", None)
        if stand_by is not None:
            await stand_by()
