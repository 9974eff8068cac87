"""The receivers the notifier starts with: every one in notifier.yaml, secrets resolved; one whose secret is
missing is disabled (the deployment starts and still notifies somewhere) and its routes go to a fallback.
"""

from __future__ import annotations

import logging
from typing import Any

from tailhound.resources import default_notifier_config
from tailhound.settings import Settings

from .config import NotifierConfig, Route, load_config
from .receivers import Receiver
from .receivers.console import ConsoleConfig, ConsoleReceiver
from .receivers.registry import build_receiver, missing_secrets

log = logging.getLogger(__name__)


def notifier_config(settings: Settings) -> NotifierConfig:
    """The configured notifier file, else the bundled example (console only, the built-in defaults)."""
    return load_config(settings.notifier.config or default_notifier_config())


#: the receiver added for the routes of disabled receivers when the top-level route's receiver is disabled too
FALLBACK_CONSOLE = "console"


class Receivers(dict[str, Receiver]):
    """The receivers :func:`build_receivers` built, by name; `disabled`: those it did not build because a
    secret is missing (name -> why, never the value); `fallback`: the receiver their routes go to."""

    def __init__(self) -> None:
        super().__init__()
        self.disabled: dict[str, str] = {}
        self.fallback: str | None = None


def build_receivers(settings: Settings, config: NotifierConfig, **console: Any) -> Receivers:
    """Every configured receiver, secrets resolved.

    A receiver whose secret is missing (env variable unset or empty, file unreadable or empty) is
    *disabled*, so a deployment that has not created its Secret yet starts (instead of crash-looping) and
    still notifies somewhere: logged now as a warning naming the receiver and the variable or file, exported as
    ``tailhound_notifier_receiver_disabled{receiver}`` by the service, and every route naming it delivers to
    the top-level route's receiver instead, or to a console receiver when that one is disabled too
    (:func:`reroute`). ``tailhound notifier check --secrets`` still reports the missing secret as a problem.
    A webhook host that is not allowed, or any other config error, still stops the start with a
    ConfigError naming the receiver."""
    out = Receivers()
    for rc in config.receivers:
        missing = missing_secrets(rc)
        if missing:
            out.disabled[rc.name] = "; ".join(missing)
            continue
        extra = console if rc.type == "console" else {}
        out[rc.name] = build_receiver(rc, allowed_hosts=settings.notifier.webhook_allowed_hosts, **extra)
    if out.disabled:
        out.fallback = _fallback(config, out, console)
        for name, why in out.disabled.items():
            log.warning(
                "notifier: receiver %r is DISABLED: %s. Its routes deliver to %r until the secret is "
                "provided and the worker restarted (`tailhound notifier check --secrets` lists what is "
                "missing)",
                name,
                why,
                out.fallback,
            )
    return out


def _fallback(config: NotifierConfig, built: Receivers, console: dict[str, Any]) -> str:
    """The top-level route's receiver if it was built, else a configured console receiver, else a new one."""
    top = config.route.receiver
    if top in built:
        return top
    for rc in config.receivers:
        if rc.type == "console" and rc.name in built:
            return rc.name
    names = {rc.name for rc in config.receivers}
    name = FALLBACK_CONSOLE if FALLBACK_CONSOLE not in names else f"{FALLBACK_CONSOLE}-fallback"
    built[name] = ConsoleReceiver(ConsoleConfig(type="console", name=name), **console)
    return name


def reroute(config: NotifierConfig, disabled: set[str] | dict[str, str], fallback: str) -> NotifierConfig:
    """`config` with every route that names a disabled receiver naming `fallback` instead (added as a
    console receiver when the config has no receiver of that name)."""

    def walk(route: Route) -> Route:
        receiver = fallback if route.receiver in disabled else route.receiver
        return route.model_copy(update={"receiver": receiver, "routes": [walk(r) for r in route.routes]})

    receivers = list(config.receivers)
    if fallback not in {rc.name for rc in receivers}:
        receivers.append(ConsoleConfig(type="console", name=fallback))
    return config.model_copy(update={"route": walk(config.route), "receivers": receivers})
