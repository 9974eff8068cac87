"""PagerDuty: one alert per incident group through the Events API v2.

``opened`` and ``updated`` send ``event_action: trigger`` and ``resolved`` sends ``resolve``, all with
``dedup_key`` = the group id, so PagerDuty keeps one alert per group: a re-trigger with the same key is
added to the open alert instead of paging again, and the resolve closes it. The routing key (the
integration key of a PagerDuty service, 32 characters) comes from a :class:`~tailhound.notifier.secrets.SecretRef`
and is never shown in errors, logs or reprs.

Outcomes: 202 -> receipt ``{"dedup_key": ...}``; 400 (PagerDuty rejected the event) -> non-retryable
with PagerDuty's ``message`` and ``errors``; 429, 5xx, timeouts and connection errors -> retryable.

Bounds (PagerDuty refuses more): summary 1024 characters, dedup_key 255, the event 512 KB. Every other
string is cut to 1024 characters, lists to 100 entries, and custom details that still do not fit lose
their longest parts (related incidents first) with a ``truncated`` note (:mod:`.bounds`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound.durations import Duration
from tailhound.errors import DeliveryError
from tailhound.incident import Evidence, IncidentEvent
from tailhound.notifier.model import Notification, Receipt
from tailhound.notifier.receivers import truncate
from tailhound.notifier.receivers.bounds import cut_strings, fit
from tailhound.notifier.receivers.outbound import OutboundGuard, check_outbound
from tailhound.notifier.receivers.webhook import USER_AGENT, retry_after_seconds, scrub, transport_failure
from tailhound.notifier.secrets import SecretRef
from tailhound.vocabulary import Severity

log = logging.getLogger(__name__)

EVENTS_V2_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_LIMIT = 1024
DEDUP_KEY_LIMIT = 255
#: PagerDuty refuses an event over 512 KB; the rest of the request (summary, links) stays under 64 KB.
EVENT_LIMIT_BYTES = 512 * 1024
DETAILS_BUDGET_BYTES = EVENT_LIMIT_BYTES - 64 * 1024
#: No other field has a documented limit: each string is cut like the summary, each list to 100 entries.
FIELD_LIMIT = 1024
MAX_ITEMS = 100
MAX_LINKS = 10
#: Custom details dropped first when they do not fit, least useful to whoever is paged first.
_DROPPABLE_DETAILS = [
    "related",
    "candidates",
    "group_labels",
    "labels",
    "incident_ids",
    "evidence",
    "suggested_actions",
]
_DETAIL_IN_REASON = 1000

PagerDutySeverity = Literal["critical", "error", "warning", "info"]
_IDENTITY: dict[Severity, PagerDutySeverity] = {
    Severity.CRITICAL: "critical",
    Severity.WARNING: "warning",
    Severity.INFO: "info",
}


class PagerDutyConfig(BaseModel):
    """One PagerDuty service to page, by its Events API v2 integration (routing) key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["pagerduty"]
    name: str = Field(min_length=1)
    routing_key: SecretRef = Field(description="The service's Events API v2 integration key, from env or file.")
    url: str = Field(default=EVENTS_V2_URL, description="Events API endpoint (EU: events.eu.pagerduty.com).")
    timeout_s: Duration = Field(default=10, gt=0)
    severity_map: dict[Severity, PagerDutySeverity] = Field(
        default_factory=lambda: dict(_IDENTITY),
        description="tailhound severity -> PagerDuty severity; unlisted ones map to themselves.",
    )
    client: str | None = Field(default="tailhound", description="Shown by PagerDuty as the sending tool.")
    client_url: str | None = Field(default=None, description="Link PagerDuty shows next to `client`.")

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("https://", "http://")):
            raise ValueError("the Events API url must be http(s)")
        return url

    @field_validator("severity_map")
    @classmethod
    def _complete(cls, mapping: dict[Severity, PagerDutySeverity]) -> dict[Severity, PagerDutySeverity]:
        return {**_IDENTITY, **mapping}


# --- event ---------------------------------------------------------------------------------------------------------
def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def dedup_key(notification: Notification) -> str:
    """The group id (PagerDuty allows 255 characters; a longer id is hashed, still stable)."""
    gid = notification.group_id
    return gid if len(gid) <= DEDUP_KEY_LIMIT else "sha256:" + hashlib.sha256(gid.encode()).hexdigest()


def _evidence(e: Evidence) -> dict[str, Any]:
    return {"text": e.describe(), **e.model_dump(mode="json", exclude_defaults=True)}


def _incident_brief(i: IncidentEvent) -> dict[str, Any]:
    return {
        "incident_id": i.incident_id,
        "event": i.event,
        "root_cause": str(i.root_cause),
        "severity": str(i.severity),
        "scope": i.scope.describe(),
        "summary": i.summary,
    }


def custom_details(notification: Notification) -> dict[str, Any]:
    """What PagerDuty shows under "Custom Details": evidence, suggested actions, scope, group."""
    lead = notification.lead
    details: dict[str, Any] = {
        "root_cause": str(lead.root_cause),
        "summary": lead.summary,
        "scope": lead.scope.model_dump(mode="json", exclude_defaults=True),
        "evidence": [_evidence(e) for e in lead.evidence],
        "suggested_actions": list(lead.actions),
        "transient": notification.transient,
        "flapping": notification.flapping,
        "rule": lead.rule,
        "incident_ids": [i.incident_id for i in notification.incidents],
        "opened_at": _iso(lead.opened_at),
        "notification": f"{notification.kind} #{notification.sequence}",
    }
    if lead.differential is not None:  # the runner-up the signals cannot rule out, and the check
        details["differential"] = lead.differential.model_dump(mode="json")
    if lead.candidates:
        details["candidates"] = [{"root_cause": str(c.root_cause), "score": c.score} for c in lead.candidates]
    if lead.labels:
        details["labels"] = dict(lead.labels)
    if notification.group_labels:
        details["group_labels"] = dict(notification.group_labels)
    if len(notification.incidents) > 1:
        details["related"] = [_incident_brief(i) for i in notification.incidents[1:]]
    return fit(cut_strings(details, FIELD_LIMIT, MAX_ITEMS), DETAILS_BUDGET_BYTES, _DROPPABLE_DETAILS)


def build_event(notification: Notification, routing_key: str, config: PagerDutyConfig) -> dict[str, Any]:
    """The Events API v2 request body for `notification`."""
    event: dict[str, Any] = {"routing_key": routing_key, "dedup_key": dedup_key(notification)}
    if notification.resolved:
        event["event_action"] = "resolve"  # PagerDuty needs only the key to resolve
        return event
    lead = notification.lead
    scope = lead.scope
    payload: dict[str, Any] = {
        "summary": truncate(notification.title(), SUMMARY_LIMIT),
        "source": truncate(scope.node or "fleet", FIELD_LIMIT),
        "severity": config.severity_map[Severity(notification.severity)],
        "timestamp": _iso(lead.ts),
        "class": truncate(str(lead.root_cause), FIELD_LIMIT),
        "custom_details": custom_details(notification),
    }
    if scope.engine:
        payload["component"] = truncate(scope.engine, FIELD_LIMIT)
    if scope.model:
        payload["group"] = truncate(scope.model, FIELD_LIMIT)
    event.update(event_action="trigger", payload=payload)
    if config.client:
        event["client"] = config.client
    if config.client_url:
        event["client_url"] = config.client_url
    if notification.links:
        event["links"] = [
            {"href": href, "text": truncate(text, FIELD_LIMIT)}
            for text, href in list(notification.links.items())[:MAX_LINKS]
            if len(href) <= 2048
        ]
    return event


def _pd_error_text(response: httpx.Response) -> str:
    """PagerDuty's ``message`` and ``errors`` from an error response, else the body."""
    try:
        data = response.json()
    except ValueError:
        return response.text
    if not isinstance(data, dict):
        return str(data)
    message = str(data.get("message") or data.get("status") or "")
    errors = data.get("errors") or []
    if isinstance(errors, list) and errors:
        message += " (" + "; ".join(str(e) for e in errors) + ")"
    return message.strip()


# --- receiver ------------------------------------------------------------------------------------------------------
class PagerDutyReceiver:
    """Triggers, updates and resolves one PagerDuty alert per incident group."""

    def __init__(
        self, config: PagerDutyConfig, environ: dict[str, str] | None = None, *, allowed_hosts: list[str] | None = None
    ) -> None:
        """`allowed_hosts`: ``notifier.webhook_allowed_hosts``; PagerDuty's own event hosts are allowed
        (over https) without it. A `url` elsewhere is a ConfigError now and is refused again on send."""
        check_outbound("pagerduty", config.name, config.url, allowed_hosts or [])
        self.config = config
        self.name = config.name
        self._routing_key = config.routing_key.resolve(environ)
        guard = OutboundGuard("pagerduty", config.name, allowed_hosts or [])
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            event_hooks={"request": [guard.httpx_hook]},
        )

    def __repr__(self) -> str:
        return f"PagerDutyReceiver(name={self.name!r}, url={self.config.url!r})"

    async def send(self, notification: Notification, receipt: Receipt | None = None) -> Receipt:
        """Send the trigger or resolve event; returns ``{"dedup_key": ..., "state": triggered|resolved}``.

        A flapping notice about an alert this receiver already resolved is not sent: re-triggering
        would page again, and flapping incidents are marked, not re-paged."""
        if notification.flapping and notification.kind == "updated" and (receipt or {}).get("state") == "resolved":
            log.info(
                "pagerduty %r: flapping notice for resolved %s not sent (no re-page)", self.name, notification.group_id
            )
            return dict(receipt or {})
        event = build_event(notification, self._routing_key.reveal(), self.config)
        what = f"pagerduty {self.name!r} {event['event_action']} {event['dedup_key']}"
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response = await self._client.post(self.config.url, json=event)
        except (httpx.RequestError, TimeoutError) as exc:
            error = transport_failure(what, exc, self._routing_key)
            log.warning("%s (retryable)", error.reason)
            raise error from None
        status = response.status_code
        if 200 <= status < 300:
            try:
                key = str(response.json().get("dedup_key") or event["dedup_key"])
            except (ValueError, AttributeError):
                key = event["dedup_key"]
            log.info("%s: accepted (%d)", what, status)
            return {"dedup_key": key, "state": "resolved" if event["event_action"] == "resolve" else "triggered"}
        detail = scrub(_pd_error_text(response), self._routing_key)[:_DETAIL_IN_REASON].strip()
        reason = f"{what}: HTTP {status}: {detail}"
        if status in (408, 429) or status >= 500:
            retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            log.warning("%s (retryable, retry after %s)", reason, retry_after)
            raise DeliveryError(reason, retryable=True, retry_after=retry_after, status=status)
        log.warning("%s (not retryable)", reason)
        raise DeliveryError(reason, retryable=False, status=status)

    async def close(self) -> None:
        await self._client.aclose()
