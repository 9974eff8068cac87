"""Every receiver kind, by its config's ``type``: the config union and the factory."""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel

from tailhound.errors import ConfigError
from tailhound.notifier.secrets import SecretRef

from .alertmanager import AlertmanagerConfig, AlertmanagerReceiver
from .console import ConsoleConfig, ConsoleReceiver
from .pagerduty import PagerDutyConfig, PagerDutyReceiver
from .slack import SlackConfig, SlackReceiver
from .webhook import WebhookConfig, WebhookReceiver

ReceiverConfig = ConsoleConfig | SlackConfig | PagerDutyConfig | WebhookConfig | AlertmanagerConfig
#: the ``type`` of every receiver kind, in the order of :data:`ReceiverConfig`
RECEIVER_TYPES: tuple[str, ...] = tuple(
    get_args(kind.model_fields["type"].annotation)[0] for kind in get_args(ReceiverConfig)
)


def build_receiver(
    config: ReceiverConfig,
    *,
    allowed_hosts: list[str] | None = None,
    environ: dict[str, str] | None = None,
    **extra: Any,
):
    """The receiver for `config`, secrets resolved now: a missing one is a ConfigError naming the
    receiver and the env variable or file (never the value). Every outbound URL (Slack, PagerDuty,
    webhooks, Alertmanager) is checked against `allowed_hosts` (``notifier.webhook_allowed_hosts``) and
    the kind's own service hosts: one elsewhere is a ConfigError naming the receiver and the host."""
    try:
        if isinstance(config, ConsoleConfig):
            return ConsoleReceiver(config, **extra)
        if isinstance(config, SlackConfig):
            return SlackReceiver(config, environ, allowed_hosts=list(allowed_hosts or []))
        if isinstance(config, PagerDutyConfig):
            return PagerDutyReceiver(config, environ, allowed_hosts=list(allowed_hosts or []))
        if isinstance(config, WebhookConfig):
            return WebhookReceiver(config, list(allowed_hosts or []), environ)
        if isinstance(config, AlertmanagerConfig):
            return AlertmanagerReceiver(config, environ, allowed_hosts=list(allowed_hosts or []))
    except ConfigError as exc:
        if config.name in str(exc):
            raise
        raise ConfigError(f"receiver {config.name!r}: {exc}") from exc
    raise TypeError(f"unknown receiver config {type(config).__name__}")


def missing_secrets(config: ReceiverConfig, environ: dict[str, str] | None = None) -> list[str]:
    """Why each secret `config` names cannot be read now (``secret env X is not set``, a file that cannot be
    read or is empty), never the value; empty when every one can. Nested models (``basic_auth.password``)
    count."""
    out = []

    def visit(value: object) -> None:
        if isinstance(value, SecretRef):
            try:
                value.resolve(environ)
            except ConfigError as exc:
                out.append(str(exc))
        elif isinstance(value, BaseModel):
            for field in type(value).model_fields:
                visit(getattr(value, field))
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    visit(config)
    return out
