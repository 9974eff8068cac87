"""Where receivers may send: every outbound URL (Slack, PagerDuty, webhooks) against the host allow-list.

A Slack ``base_url`` or a PagerDuty ``url`` pointed elsewhere would hand out the bot token or the routing
key with the incident data, so they are checked like webhook URLs: the host must be on
``notifier.webhook_allowed_hosts`` (settings, env ``TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS``), or be
one of the receiver kind's own service hosts (:data:`DEFAULT_HOSTS`, over https only). Nothing else
is allowed by default, loopback included: tests and local mocks list ``127.0.0.1`` themselves.

Checked twice: when the receiver is built (the worker's start, ``notifier check --secrets``), with a
:class:`~tailhound.errors.ConfigError` naming the receiver and the host, and again on every request the
receiver's HTTP client makes, redirects included (:class:`OutboundGuard`), where a host off the list is
a non-retryable :class:`~tailhound.errors.DeliveryError` and nothing is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any
from urllib.parse import urljoin

import aiohttp
import httpx

from tailhound.errors import ConfigError, DeliveryError

ALLOWED_HOSTS_SETTING = "notifier.webhook_allowed_hosts"
ALLOWED_HOSTS_ENV = "TAILHOUND_NOTIFIER__WEBHOOK_ALLOWED_HOSTS"

#: each receiver kind's own service, allowed without listing (https only)
DEFAULT_HOSTS: dict[str, tuple[str, ...]] = {
    "slack": ("slack.com", "hooks.slack.com"),
    "pagerduty": ("events.pagerduty.com", "events.eu.pagerduty.com"),
    "webhook": (),
}


def _norm_host(host: str) -> str:
    return host.strip().strip("[]").rstrip(".").lower()


def host_allowed(host: str, allowed_hosts: Iterable[str]) -> bool:
    """Whether `host` matches an entry: an exact host (``hooks.example.com``, ``10.0.0.5``) or
    ``*.suffix``, which matches any name below ``suffix`` but not ``suffix`` itself."""
    host = _norm_host(host)
    if not host:
        return False
    for entry in allowed_hosts:
        pattern = _norm_host(entry)
        if pattern.startswith("*."):
            suffix = pattern[1:]  # ".example.com"
            if len(suffix) > 1 and host.endswith(suffix) and len(host) > len(suffix):
                return True
        elif pattern and host == pattern:
            return True
    return False


def url_problem(kind: str, url: str, allowed_hosts: Iterable[str]) -> tuple[str, str | None]:
    """(host, None) when `url` may be used by a receiver of `kind`, else (host, why not).

    The URL is parsed by httpx; aiohttp (Slack) connects to the same host for every URL this accepts
    (userinfo and backslashes, where parsers disagree, are refused)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError) as exc:
        return "", f"malformed url ({exc})"
    host = parsed.host
    if parsed.scheme not in ("http", "https"):
        return host, f"url scheme {parsed.scheme!r} is not http or https"
    if parsed.userinfo:
        return host, "credentials in the url"
    if "\\" in url.split("?", 1)[0].split("#", 1)[0]:
        return host, "a backslash in the url (parsers disagree on its host)"
    allowed = list(allowed_hosts)
    if host_allowed(host, allowed):
        return host, None
    defaults = DEFAULT_HOSTS.get(kind, ())
    if host_allowed(host, defaults):
        if parsed.scheme == "https":
            return host, None
        return host, (
            f"host {host!r} is allowed over https only (list it in {ALLOWED_HOSTS_SETTING} to use {parsed.scheme})"
        )
    listed = ", ".join(allowed) if allowed else "empty"
    default = f"; {kind} hosts allowed by default: {', '.join(defaults)}" if defaults else ""
    return host, (
        f"host {host!r} is not in {ALLOWED_HOSTS_SETTING} ({listed}){default}; add it there (env {ALLOWED_HOSTS_ENV})"
    )


def check_outbound(kind: str, name: str, url: str, allowed_hosts: Iterable[str]) -> str:
    """The host of `url`, or :class:`ConfigError` naming the receiver and the host. Only the host is
    ever shown (a Slack webhook URL is itself a secret)."""
    host, problem = url_problem(kind, url, allowed_hosts)
    if problem is not None:
        raise ConfigError(f"{kind} receiver {name!r}: {problem}")
    return host


class OutboundGuard:
    """The send-time check: hooks for the receivers' HTTP clients that refuse any request (the first one
    or a redirect) to a host off the allow-list before it leaves."""

    def __init__(self, kind: str, name: str, allowed_hosts: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.allowed = list(allowed_hosts)

    def check(self, url: str) -> None:
        host, problem = url_problem(self.kind, url, self.allowed)
        if problem is not None:
            raise DeliveryError(f"{self.kind} receiver {self.name!r}: refused to send: {problem}", retryable=False)

    # --- httpx (PagerDuty, webhooks): called for every request the client sends ---------------------
    async def httpx_hook(self, request: httpx.Request) -> None:
        self.check(str(request.url))

    # --- aiohttp (Slack): the first request, and every redirect before it is followed ---------------------
    def trace_config(self) -> aiohttp.TraceConfig:
        trace = aiohttp.TraceConfig()

        async def on_start(session: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
            self.check(str(params.url))

        async def on_redirect(session: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestRedirectParams) -> None:
            location = params.response.headers.get("Location") or params.response.headers.get("URI")
            if location:
                self.check(urljoin(str(params.url), location))

        trace.on_request_start.append(on_start)
        trace.on_request_redirect.append(on_redirect)
        return trace
