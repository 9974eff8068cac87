"""Signed remediation webhooks: a JSON request per notification to an automation endpoint you run.

The request body is documented in ``docs/webhooks.md`` (``schema_version`` 1): the notification's
identity (``idempotency_key``, ``kind``, ``group_id``, ``sequence``), a ``requested_action`` derived
from the lead incident's root cause (``scale-out``, ``drain-node``, ``reduce-batch``, ``shed-load`` or
``investigate``) and the incidents themselves. It is signed with HMAC-SHA256 (:mod:`tailhound.notifier.signing`).

Where a webhook may go is decided by the operator, not by rule or routing files: the receiver refuses
a URL whose host is not in ``notifier.webhook_allowed_hosts`` (env
``TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS``), so editing a rule file alone can never send incident
data to a new host. Redirects are not followed, for the same reason.

The receiver does not retry: 408/425/429/5xx, timeouts and connection errors raise a retryable
:class:`~tailhound.errors.DeliveryError` (with the ``Retry-After`` the far side asked for) and the
deliver stage retries with the same ``Idempotency-Key``; a 409 means the far side already processed
that key, which counts as delivered.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tailhound import __version__
from tailhound.durations import Duration
from tailhound.errors import DeliveryError
from tailhound.incident import IncidentEvent
from tailhound.notifier.model import Notification, Receipt
from tailhound.notifier.receivers.bounds import cut_strings, json_size
from tailhound.notifier.receivers.outbound import OutboundGuard, check_outbound
from tailhound.notifier.receivers.outbound import host_allowed as host_allowed  # re-exported
from tailhound.notifier.secrets import Secret, SecretRef
from tailhound.notifier.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, sign_all

log = logging.getLogger(__name__)

WEBHOOK_SCHEMA_VERSION = 1
USER_AGENT = f"tailhound/{__version__}"

#: The action a remediation endpoint is asked for, by root cause; anything else is ``investigate``.
ACTION_BY_ROOT_CAUSE: dict[str, str] = {
    "capacity": "scale-out",
    "gpu-thermal-throttle": "drain-node",
    "nvlink-degraded": "drain-node",
    "kv-cache-pressure": "reduce-batch",
    "retry-storm": "shed-load",
    "node-degraded": "drain-node",
    "gpu-hardware-error": "drain-node",
}
DEFAULT_ACTION = "investigate"

#: Bounds on a request body (the example receiver's default MAX_BODY_BYTES is 1 MiB): every string cut to
#: FIELD_LIMIT characters, lists to MAX_ITEMS, at most MAX_INCIDENTS incidents, the lead within a quarter
#: of the body (it is sent twice) and related incidents while they fit (the body says so in ``truncated``).
MAX_BODY_BYTES = 1 << 20
FIELD_LIMIT = 4096
MAX_ITEMS = 64
MAX_INCIDENTS = 50

#: Headers the receiver sets itself; a config may not override them.
_RESERVED_HEADERS = {
    h.lower()
    for h in (
        SIGNATURE_HEADER,
        TIMESTAMP_HEADER,
        IDEMPOTENCY_HEADER,
        "Content-Type",
        "User-Agent",
        "Host",
        "Content-Length",
        "Transfer-Encoding",
    )
}
#: Headers that carry credentials: secrets come from a SecretRef, never inline in the config.
_CREDENTIAL_HEADERS = {"authorization", "proxy-authorization", "cookie"}
#: HTTP statuses below 500 worth a retry (timeout, too early, too many requests)
RETRYABLE_STATUS = {408, 425, 429}
_BODY_IN_REASON = 200


class WebhookConfig(BaseModel):
    """One remediation webhook: where to POST and which secret signs the requests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["webhook"]
    name: str = Field(min_length=1)
    url: str = Field(min_length=1, description="http(s) URL; its host must be in the allow-list setting.")
    secret: SecretRef = Field(description="The HMAC signing secret, from env or a file.")
    previous_secret: SecretRef | None = Field(
        default=None, description="During a rotation: requests are signed with this one too."
    )
    timeout_s: Duration = Field(default=5, gt=0)
    headers: dict[str, str] = Field(default_factory=dict, description="Extra non-secret request headers.")

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name in headers:
            if name.lower() in _RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by the webhook receiver itself")
            if name.lower() in _CREDENTIAL_HEADERS:
                raise ValueError(f"header {name!r} carries credentials; secrets are never written inline")
        return headers


# --- allow-list (shared with Slack and PagerDuty: tailhound.notifier.receivers.outbound) ----------------------------
def check_url(name: str, url: str, allowed_hosts: Iterable[str]) -> None:
    """Raise :class:`ConfigError` naming receiver `name` unless `url` is http(s) to an allowed host.

    The URL is parsed by httpx, the same parser that sends the request, so the host checked is the
    host connected to.
    """
    check_outbound("webhook", name, url, allowed_hosts)


# --- payload -------------------------------------------------------------------------------------------------------
def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def requested_action(incident: IncidentEvent) -> dict[str, Any]:
    """What the remediation endpoint is asked to do about `incident`, and where."""
    scope = incident.scope
    action = {
        "type": ACTION_BY_ROOT_CAUSE.get(str(incident.root_cause), DEFAULT_ACTION),
        "root_cause": str(incident.root_cause),
        "target": {"node": scope.node, "engine": scope.engine, "model": scope.model, "endpoint": scope.endpoint},
        "suggested_actions": list(incident.actions),
    }
    if incident.differential is not None:  # automation should not act on a cause the signals cannot confirm
        action.update(certain=False, runner_up=str(incident.differential.runner_up), check=incident.differential.check)
    return action


def build_payload(notification: Notification) -> dict[str, Any]:
    """The JSON document POSTed for `notification` (schema in ``docs/webhooks.md``).

    It depends only on the notification, so a redelivery of the same step sends the same bytes.
    """
    lead = _lead_doc(notification.lead)
    payload: dict[str, Any] = {
        "schema_version": WEBHOOK_SCHEMA_VERSION,
        "idempotency_key": notification.idempotency_key,
        "kind": notification.kind,
        "group_id": notification.group_id,
        "receiver": notification.receiver,
        "sequence": notification.sequence,
        "sent_at": _iso(notification.ts),
        "title": notification.title(),
        "severity": notification.severity,
        "transient": notification.transient,
        "flapping": notification.flapping,
        "group_labels": dict(notification.group_labels),
        "links": dict(notification.links),
        "requested_action": requested_action(notification.lead),
    }
    payload = cut_strings(payload, FIELD_LIMIT, MAX_ITEMS)
    # Related incidents one at a time while the body stays under the bound: each is sized once.
    incidents, size = [lead], json_size(payload) + 2 * json_size(lead)
    for event in notification.incidents[1:MAX_INCIDENTS]:
        doc = cut_strings(event.model_dump(mode="json"), FIELD_LIMIT, MAX_ITEMS)
        size += json_size(doc) + 1
        if size > MAX_BODY_BYTES - 1024:  # room for the notes below
            break
        incidents.append(doc)
    payload.update(incident=lead, incidents=incidents)
    if omitted := len(notification.incidents) - len(incidents):
        payload["incidents_omitted"] = omitted
    if "truncated" in lead or len(incidents) < min(len(notification.incidents), MAX_INCIDENTS):
        payload["truncated"] = lead.pop("truncated", None) or f"related incidents over {MAX_BODY_BYTES} bytes left out"
    return payload


def _lead_doc(event: IncidentEvent) -> dict[str, Any]:
    """The lead incident as JSON, within half the body bound: chart series left out first, then its details."""
    doc = cut_strings(event.model_dump(mode="json"), FIELD_LIMIT, MAX_ITEMS)
    if json_size(doc) <= MAX_BODY_BYTES // 4:  # it is sent twice (``incident`` and ``incidents[0]``)
        return doc
    doc = {k: v for k, v in doc.items() if k not in ("series", "candidates")}
    if json_size(doc) <= MAX_BODY_BYTES // 4:
        return {**doc, "truncated": "the lead incident's chart series and candidates left out"}
    doc = {k: v for k, v in doc.items() if k not in ("evidence", "labels", "actions")}
    return {**doc, "truncated": "only the lead incident's identity kept"}


def encode_body(payload: dict[str, Any]) -> bytes:
    """Compact UTF-8 JSON; these exact bytes are signed."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


# --- HTTP outcome helpers (shared with the PagerDuty receiver) ---------------------------------------------------
def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A ``Retry-After`` header as seconds from now: delta-seconds or an HTTP date; None if absent or bad."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(when.timestamp() - (time.time() if now is None else now), 0.0)


def transport_failure(what: str, exc: Exception, *secrets: Secret | None) -> DeliveryError:
    """A retryable :class:`DeliveryError` for a timeout or connection failure talking to `what`."""
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return DeliveryError(f"{what}: timed out", retryable=True)
    detail = scrub(str(exc) or type(exc).__name__, *secrets)
    return DeliveryError(f"{what}: {type(exc).__name__}: {detail}", retryable=True)


def scrub(text: str, *secrets: Secret | None) -> str:
    """`text` with every secret value replaced by ``***`` (a far side may echo what it was sent)."""
    for secret in secrets:
        if secret is not None and secret.reveal():
            text = text.replace(secret.reveal(), "***")
    return text


# --- receiver ------------------------------------------------------------------------------------------------------
class WebhookReceiver:
    """POSTs a signed JSON payload per notification to an allow-listed remediation endpoint."""

    def __init__(self, config: WebhookConfig, allowed_hosts: list[str], environ: dict[str, str] | None = None) -> None:
        check_url(config.name, config.url, allowed_hosts)
        self.config = config
        self.name = config.name
        self._secret = config.secret.resolve(environ)
        self._previous = config.previous_secret.resolve(environ) if config.previous_secret else None
        self._host = httpx.URL(config.url).host
        guard = OutboundGuard("webhook", config.name, allowed_hosts)  # checked again on every request
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s),
            follow_redirects=False,
            headers={"User-Agent": USER_AGENT},
            event_hooks={"request": [guard.httpx_hook]},
        )

    def __repr__(self) -> str:
        return f"WebhookReceiver(name={self.name!r}, url={self.config.url!r})"

    def _signing_secrets(self) -> list[str]:
        return [s.reveal() for s in (self._secret, self._previous) if s is not None]

    async def send(self, notification: Notification, receipt: Receipt | None = None) -> Receipt:
        """POST `notification`; ``{}`` when accepted (2xx) or already processed (409)."""
        body = encode_body(build_payload(notification))
        timestamp = int(time.time())
        headers = {
            **self.config.headers,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign_all(self._signing_secrets(), timestamp, body),
            IDEMPOTENCY_HEADER: notification.idempotency_key,
        }
        what = f"webhook {self.name!r} ({self._host})"
        try:
            async with asyncio.timeout(self.config.timeout_s):
                response = await self._client.post(self.config.url, content=body, headers=headers)
        except (httpx.RequestError, TimeoutError) as exc:
            error = transport_failure(what, exc, self._secret, self._previous)
            log.warning("%s: %s (retryable)", notification.idempotency_key, error.reason)
            raise error from None
        return self._outcome(notification, response, what)

    def _outcome(self, notification: Notification, response: httpx.Response, what: str) -> Receipt:
        status = response.status_code
        key = notification.idempotency_key
        if 200 <= status < 300:
            log.info("%s: delivered to %s (%d)", key, what, status)
            return {}
        if status == 409:
            log.info("%s: %s already processed this key (409), counted as delivered", key, what)
            return {}
        text = scrub(response.text, self._secret, self._previous)[:_BODY_IN_REASON].strip()
        reason = f"{what}: HTTP {status}" + (f": {text}" if text else "")
        if status in RETRYABLE_STATUS or status >= 500:
            retry_after = None
            if status in (429, 503):
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            log.warning("%s: %s (retryable, retry after %s)", key, reason, retry_after)
            raise DeliveryError(reason, retryable=True, retry_after=retry_after, status=status)
        if 300 <= status < 400:
            reason += " (redirects are not followed; point the url at the final endpoint)"
        log.warning("%s: %s (not retryable)", key, reason)
        raise DeliveryError(reason, retryable=False, status=status)

    async def close(self) -> None:
        await self._client.aclose()
