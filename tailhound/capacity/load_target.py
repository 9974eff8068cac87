"""Which endpoints ``tailhound loadtest`` may load: only ones explicitly configured.

An http(s) URL given by the user, without credentials, on a loopback address unless its host is allowed with
``--allow-host``: a load test saturates what it points at, so it never picks or follows a target itself.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from tailhound.errors import TailhoundError

#: The environment variable the API key is read from (the driver reads it too; never on a command line).
API_KEY_ENV = "TAILHOUND_LOADTEST_API_KEY"


class TargetRefused(TailhoundError):
    """A load-test target that is not explicitly configured (or not an http(s) URL)."""


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Target:
    """A checked endpoint: ``base`` as given (no credentials), its origin and API root (``.../v1``)."""

    base: str
    origin: str
    api_root: str
    host: str

    def api_path(self, api: str) -> str:
        return f"{self.api_root}/{'chat/completions' if api == 'chat' else 'completions'}"

    @property
    def metrics_url(self) -> str:
        return f"{self.origin}/metrics"


def check_target(url: str | None, allowed_hosts: Iterable[str] = (), option: str = "--target") -> Target:
    """`url` if it may be loaded: http(s), a host, no credentials; loopback, or a host in `allowed_hosts`."""
    if not url or not url.strip():
        raise TargetRefused(
            f"{option} is required: the endpoint to load (e.g. http://127.0.0.1:8000/v1); tailhound never picks one"
        )
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"{option}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(
            f"{option}: only http:// and https:// URLs can be load-tested, not "
            f"{parts.scheme + '://' if parts.scheme else 'a URL without a scheme'}"
        )
    if parts.username is not None or parts.password is not None:
        raise TargetRefused(
            f"{option}: credentials in the URL are refused; give the API key with {API_KEY_ENV} or --api-key-file"
        )
    host = parts.hostname
    if not host:
        raise TargetRefused(f"{option}: the URL has no host")
    if parts.query or parts.fragment:
        raise TargetRefused(f"{option}: give the base URL without a query or fragment")
    allowed = {h.strip().strip("[]").lower().rstrip(".") for h in allowed_hosts if h.strip()}
    if not is_loopback(host) and host.lower().rstrip(".") not in allowed:
        raise TargetRefused(
            f"{option}: {host} is not a loopback address; load-testing it needs --allow-host {host}"
            " (a load test saturates the endpoint: only ones you name explicitly)"
        )
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    api_root = path if path.endswith("/v1") else f"{path}/v1"
    return Target(
        base=f"{parts.scheme}://{netloc}{path}", origin=f"{parts.scheme}://{netloc}", api_root=api_root, host=host
    )
