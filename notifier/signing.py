"""Signatures for outgoing webhooks: HMAC-SHA256 over the timestamp and the exact body bytes.

The sender puts the unix time it sends at in ``X-Tailhound-Timestamp`` and
``v1=<hex HMAC-SHA256(secret, "<timestamp>." + body)>`` in ``X-Tailhound-Signature``. The receiver
recomputes the HMAC over the body bytes *as received* (before any JSON parsing) and refuses a request
whose timestamp is further than ``tolerance_s`` from its own clock, so a captured request cannot be
replayed later. During a secret rotation the header carries several signatures
(``v1=<new>,v1=<old>``) and :func:`verify` accepts the request when any of them matches any of the
secrets it knows. See ``docs/webhooks.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable

from tailhound.errors import TailhoundError

TIMESTAMP_HEADER = "X-Tailhound-Timestamp"
SIGNATURE_HEADER = "X-Tailhound-Signature"
IDEMPOTENCY_HEADER = "Idempotency-Key"

#: The signature scheme this module writes and checks; others in the header are ignored.
SCHEME = "v1"
#: How far (seconds) a request's timestamp may be from the receiver's clock, either way.
DEFAULT_TOLERANCE_S = 300
#: More signatures than this in one header is not a rotation but an attempt to make us hash a lot.
MAX_SIGNATURES = 8


class SignatureError(TailhoundError):
    """A webhook request whose signature or timestamp does not check out; answer it with 401."""


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    if not secret:
        raise ValueError("the signing secret is empty")
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``X-Tailhound-Signature`` value for `body` sent at `timestamp`: ``v1=<hex>``."""
    return f"{SCHEME}={_digest(secret, int(timestamp), body)}"


def sign_all(secrets: Iterable[str], timestamp: int, body: bytes) -> str:
    """One header with a signature per secret (``v1=<a>,v1=<b>``), for a secret rotation."""
    return ",".join(sign(s, timestamp, body) for s in secrets)


def verify(
    secret: str | Iterable[str],
    timestamp_header: str | None,
    signature_header: str | None,
    body: bytes,
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> None:
    """Check a request's signature and timestamp; raise :class:`SignatureError` saying what is wrong.

    `secret` is one secret or several (the receiver's side of a rotation); `body` must be the raw
    request bytes. Returns ``None`` when some ``v1=`` signature matches some secret.
    """
    secrets = [secret] if isinstance(secret, str) else list(secret)
    if not secrets or not all(secrets):
        raise ValueError("verify needs a non-empty secret")
    if not timestamp_header or not timestamp_header.strip():
        raise SignatureError(f"missing {TIMESTAMP_HEADER} header")
    try:
        timestamp = int(timestamp_header.strip())
    except ValueError:
        raise SignatureError(f"malformed {TIMESTAMP_HEADER} header (expected unix seconds)") from None
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise SignatureError(
            f"{TIMESTAMP_HEADER} is {clock - timestamp:+.0f}s from now, outside the "
            f"{tolerance_s:g}s tolerance (stale or replayed request, or clock skew)"
        )
    if not signature_header or not signature_header.strip():
        raise SignatureError(f"missing {SIGNATURE_HEADER} header")
    parts = [p.strip() for p in signature_header.split(",") if p.strip()]
    if len(parts) > MAX_SIGNATURES:
        raise SignatureError(f"{SIGNATURE_HEADER} carries {len(parts)} signatures (at most {MAX_SIGNATURES})")
    offered = [
        value.strip() for scheme, sep, value in (p.partition("=") for p in parts) if sep and scheme.strip() == SCHEME
    ]
    if not offered:
        raise SignatureError(f"{SIGNATURE_HEADER} has no {SCHEME}= signature")
    expected = [_digest(s, timestamp, body) for s in secrets]
    matched = False
    for candidate in offered:
        for want in expected:
            # compare every pair: the time taken does not depend on where (or whether) a match is
            matched |= hmac.compare_digest(candidate.encode(), want.encode())
    if not matched:
        raise SignatureError(f"{SIGNATURE_HEADER} does not match the body (wrong secret or altered body)")
