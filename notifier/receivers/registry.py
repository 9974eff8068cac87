"""Every receiver kind, by its config's ``type``: the config union and the factory."""

from __future__ import annotations

from typing import Any

from tailhound.errors import ConfigError

from .console import ConsoleConfig, ConsoleReceiver
from .pagerduty import PagerDutyConfig, PagerDutyReceiver
from .slack import SlackConfig, SlackReceiver
from .webhook import WebhookConfig, WebhookReceiver

ReceiverConfig = ConsoleConfig | SlackConfig | PagerDutyConfig | WebhookConfig


def build_receiver(config: ReceiverConfig, *, allowed_hosts: list[str] | None = None,
                   environ: dict[str, str] | None = None, **extra: Any):
    """The receiver for `config`, secrets resolved now: a missing one is a ConfigError naming the
    receiver and the env variable or file (never the value)."""
    try:
        if isinstance(config, ConsoleConfig):
            return ConsoleReceiver(config, **extra)
        if isinstance(config, SlackConfig):
            return SlackReceiver(config, environ)
        if isinstance(config, PagerDutyConfig):
            return PagerDutyReceiver(config, environ)
        if isinstance(config, WebhookConfig):
            return WebhookReceiver(config, list(allowed_hosts or []), environ)
    except ConfigError as exc:
        if config.name in str(exc):
            raise
        raise ConfigError(f"receiver {config.name!r}: {exc}") from exc
    raise TypeError(f"unknown receiver config {type(config).__name__}")
