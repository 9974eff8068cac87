"""What Alertmanager gets for an incident (pure): the receiver's config, and each incident as a postable
alert -- stable labels, annotations with the summary, evidence and actions, ``startsAt``/``endsAt``
(:mod:`tailhound.notifier.receivers.alertmanager` posts them and re-posts open ones)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tailhound.durations import Duration, parse_duration
from tailhound.incident import IncidentEvent
from tailhound.notifier.model import Notification, Receipt
from tailhound.notifier.receivers import truncate
from tailhound.notifier.secrets import SecretRef
from tailhound.vocabulary import ROOT_CAUSES, RootCause

log = logging.getLogger(__name__)

ALERTS_PATH = "/api/v2/alerts"
DEFAULT_ALERTNAME = "TailhoundIncident"
#: a firing alert's endsAt is this many re-post intervals ahead: two re-posts may fail before it expires
ENDS_AFTER_INTERVALS = 3
#: alerts posted for one notification (a group's incidents beyond it are left out, with a warning)
MAX_ALERTS_PER_NOTIFICATION = 100
#: alerts per request (Prometheus sends at most 64 per batch too)
BATCH_SIZE = 64
MAX_URLS = 8
#: the request limit when timeout_s is not set (shortened to half of a repost_interval under 20 s)
DEFAULT_TIMEOUT_S = 10.0
ANNOTATION_LIMIT = 4000
#: the labels the receiver sets itself (static ``labels`` may not use them)
CORE_LABELS = (
    "alertname",
    "root_cause",
    "severity",
    "incident_id",
    "rule",
    "node",
    "gpus",
    "model",
    "engine",
    "endpoint",
    "nodes",
)
#: incident labels that change while an incident is open (the streams worker's member rules): not labels
#: here (the label set must not change), shown as annotations instead
VOLATILE_LABELS = ("rules",)
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_NOT_LABEL_CHAR = re.compile(r"[^a-zA-Z0-9_]")


# --- config --------------------------------------------------------------------------------------------------------
class BasicAuth(BaseModel):
    """HTTP basic auth for Alertmanager's ``--web.config.file`` ``basic_auth_users``."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    username: str = Field(min_length=1)
    password: SecretRef = Field(description="From env or a file, never inline.")


class AlertmanagerConfig(BaseModel):
    """One Alertmanager (or an HA set of them) that gets every incident as an alert."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    type: Literal["alertmanager"]
    name: str = Field(min_length=1)
    urls: list[str] = Field(
        min_length=1,
        max_length=MAX_URLS,
        description="Alertmanager base URLs (http://am-0:9093); each gets every post.",
    )
    timeout_s: Duration = Field(
        default=DEFAULT_TIMEOUT_S,
        gt=0,
        le=60,
        description="Limit for one request; default 10 s, at most half of repost_interval.",
    )
    repost_interval: Duration = Field(
        default=60.0, ge=1, le=3600, description="Open alerts are re-posted this often; endsAt is 3x ahead."
    )
    alertname: str = Field(
        default=DEFAULT_ALERTNAME,
        min_length=1,
        description="The alertname label; `{root_cause}` is replaced by the root cause.",
    )
    labels: dict[str, str] = Field(default_factory=dict, description="Static labels added to every alert.")
    console_url: str | None = Field(default=None, description="generatorURL; `{incident_id}` is replaced.")
    basic_auth: BasicAuth | None = None
    bearer_token: SecretRef | None = None

    @field_validator("urls")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        seen = set()
        for url in urls:
            try:
                parsed = httpx.URL(url)
            except (httpx.InvalidURL, ValueError) as exc:
                raise ValueError(f"malformed url {url!r} ({exc})") from None
            if parsed.scheme not in ("http", "https") or not parsed.host:
                raise ValueError(f"{url!r}: an Alertmanager url is http(s)://host[:port][/prefix]")
            if parsed.userinfo:
                raise ValueError("credentials in the url: use basic_auth with a password secret")
            if parsed.query or parsed.fragment:
                raise ValueError(f"{url!r}: no query or fragment (the receiver posts to <url>{ALERTS_PATH})")
            endpoint = alerts_endpoint(url)
            if endpoint in seen:
                raise ValueError(f"{url!r} is listed twice")
            seen.add(endpoint)
        return urls

    @field_validator("labels")
    @classmethod
    def _labels(cls, labels: dict[str, str]) -> dict[str, str]:
        for name, value in labels.items():
            if not _LABEL_NAME.match(name):
                raise ValueError(f"label name {name!r} is not valid in Alertmanager ([a-zA-Z_][a-zA-Z0-9_]*)")
            if name in CORE_LABELS:
                raise ValueError(f"label {name!r} is set by the alertmanager receiver itself")
            if not value:
                raise ValueError(f"label {name!r} has an empty value (Alertmanager drops it)")
        return labels

    @field_validator("console_url")
    @classmethod
    def _console_url(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("https://", "http://")):
            raise ValueError("console_url must be an http(s) URL")
        return url

    @model_validator(mode="before")
    @classmethod
    def _default_timeout(cls, data: object) -> object:
        # an unset timeout_s fits the repost interval (10 s, at most half of it): `repost_interval: 10s`
        # alone is valid; a timeout_s written in the file is compared as written
        if isinstance(data, dict) and "timeout_s" not in data:
            try:
                interval = parse_duration(data.get("repost_interval", 60.0))
            except ValueError:
                return data  # the field's own check reports it
            return {**data, "timeout_s": min(DEFAULT_TIMEOUT_S, interval / 2) if interval > 0 else DEFAULT_TIMEOUT_S}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> AlertmanagerConfig:
        if self.basic_auth is not None and self.bearer_token is not None:
            raise ValueError("use at most one of `basic_auth` and `bearer_token`")
        if self.timeout_s >= self.repost_interval:
            raise ValueError(
                f"timeout_s ({self.timeout_s:g}s) must be shorter than repost_interval "
                f"({self.repost_interval:g}s): a re-post must end before the next one"
            )
        return self

    @property
    def hold_s(self) -> float:
        """How far ahead a firing alert's endsAt is set."""
        return ENDS_AFTER_INTERVALS * self.repost_interval


def alerts_endpoint(url: str) -> str:
    """``<url>/api/v2/alerts`` (a url that already ends with it is kept)."""
    base = url.rstrip("/")
    return base if base.endswith(ALERTS_PATH) else base + ALERTS_PATH


# --- alerts --------------------------------------------------------------------------------------------------------
def iso(ts: float) -> str:
    """RFC 3339 in UTC with milliseconds, as Alertmanager writes it."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def label_name(name: str) -> str:
    """`name` made a valid Alertmanager label name (other characters become ``_``)."""
    out = _NOT_LABEL_CHAR.sub("_", name) or "_"
    return out if not out[0].isdigit() else "_" + out


def alert_labels(incident: IncidentEvent, config: AlertmanagerConfig) -> dict[str, str]:
    """The label set of `incident`'s alert, from its current event (see :func:`build_alerts` for why an
    incident keeps the labels of its first post): static labels, then the rule's labels, then tailhound's
    own, each overriding the one before."""
    labels = dict(config.labels)
    for name, value in incident.labels.items():
        if name not in VOLATILE_LABELS and value:
            labels[label_name(name)] = str(value)
    root_cause = str(incident.root_cause)
    labels.update(
        alertname=config.alertname.replace("{root_cause}", root_cause),
        root_cause=root_cause,
        severity=str(incident.severity),
        incident_id=incident.incident_id,
        rule=incident.rule,
    )
    labels.update(incident.scope.labels())
    return labels


def incident_firing(incident: IncidentEvent, notification: Notification) -> bool:
    """Whether `incident` is firing as `notification` tells it (a resolve ends every alert it carries)."""
    return not notification.resolved and incident.event != "resolved"


def alert_annotations(incident: IncidentEvent, notification: Notification) -> dict[str, str]:
    """What a person reads: summary, a description, the evidence, the actions, the runbook and other links."""
    scope = incident.scope.describe()
    cause = str(incident.root_cause)
    try:
        title = ROOT_CAUSES[RootCause(cause)].title
    except (KeyError, ValueError):
        title = cause
    summary = incident.summary or f"{title} on {scope}"
    lines = [
        summary,
        "",
        f"Root cause: {cause} ({title}), severity {incident.severity}, "
        f"{'transient' if incident.transient else 'persistent'}",
        f"Scope: {scope}",
        f"Opened: {iso(incident.opened_at)}",
    ]
    if not incident_firing(incident, notification):
        lines.append(f"Resolved: {iso(incident.resolved_at or incident.ts)}")
    if incident.differential is not None:  # the runner-up the signals cannot rule out, and the check
        d = incident.differential
        lines += [f"Not certain: {d.lead} or {d.runner_up}. {d.why}", f"Tell them apart: {d.check}"]
    lines.append(f"Rule: {incident.rule}{rule_place(incident)}")
    lines.append(
        f"Incident: {incident.incident_id} (tailhound group {notification.group_id}, "
        f"notification {notification.kind} #{notification.sequence})"
    )
    others = [i.incident_id for i in notification.incidents if i.incident_id != incident.incident_id]
    if others:
        lines.append(f"Related in the group: {', '.join(others[:10])}" + (" ..." if len(others) > 10 else ""))
    if notification.flapping:
        lines.append("Flapping: the group keeps resolving and firing again; tailhound does not re-page it.")
    out = {
        "summary": summary,
        "description": "\n".join(lines),
        "current_severity": str(incident.severity),
        "transient": "true" if incident.transient else "false",
    }
    if incident.evidence:
        out["evidence"] = "\n".join(f"- {e.describe()}" for e in incident.evidence)
    if incident.actions:
        out["actions"] = "\n".join(f"{n}. {a}" for n, a in enumerate(incident.actions, 1))
    if incident.labels.get("rules"):
        out["rules"] = incident.labels["rules"]
    if notification.flapping:
        out["flapping"] = "true"
    for name, url in notification.links.items():
        out["runbook_url" if name == "runbook" else f"{label_name(name)}_url"] = url
    return {k: truncate(v, ANNOTATION_LIMIT) for k, v in out.items() if v}


def rule_place(incident: IncidentEvent) -> str:
    """Where the rule is defined, in terms of the rule pack (its file and line, and the pack's version), not of
    the directory it was loaded from on the worker's disk."""
    parts = []
    if incident.rule_origin:
        parts.append(f"{incident.rule_origin.rsplit('/', 1)[-1]} of the rule pack")
    if incident.rules_version:
        parts.append(f"version {incident.rules_version}")
    return f", defined at {', '.join(parts)}" if parts else ""


def generator_url(incident: IncidentEvent, notification: Notification, config: AlertmanagerConfig) -> str | None:
    """The console link: ``console_url`` (``{incident_id}`` replaced), else the notification's ``console`` link."""
    if config.console_url:
        return config.console_url.replace("{incident_id}", incident.incident_id)
    return notification.links.get("console")


def build_alerts(
    notification: Notification,
    config: AlertmanagerConfig,
    now: float,
    frozen: Mapping[str, Mapping[str, str]] | None = None,
) -> list[dict[str, Any]]:
    """The postable alerts for `notification` at wall time `now`: one per incident (at most
    MAX_ALERTS_PER_NOTIFICATION). `frozen`: incident id -> the labels of its first post, reused so that
    Alertmanager sees one alert per incident however it changes."""
    alerts = []
    for incident in notification.incidents[:MAX_ALERTS_PER_NOTIFICATION]:
        labels = dict((frozen or {}).get(incident.incident_id) or alert_labels(incident, config))
        starts = incident.opened_at
        if incident_firing(incident, notification):
            ends = max(now, starts) + config.hold_s
        else:  # resolved: when it resolved, never later than now (a clock ahead of ours must not keep it)
            ends = max(min(incident.resolved_at or incident.ts, now), starts)
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": alert_annotations(incident, notification),
            "startsAt": iso(starts),
            "endsAt": iso(ends),
        }
        url = generator_url(incident, notification, config)
        if url:
            alert["generatorURL"] = url
        alerts.append(alert)
    return alerts


def frozen_from_receipt(receipt: Receipt | None) -> dict[str, dict[str, str]]:
    """The labels earlier posts used, by incident id, from a receipt (empty when there are none or they are bad)."""
    raw = (receipt or {}).get("labels")
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): {str(n): str(v) for n, v in v.items()} for k, v in data.items() if isinstance(v, dict)}


# --- receiver ------------------------------------------------------------------------------------------------------
