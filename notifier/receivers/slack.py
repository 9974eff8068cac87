"""The Slack receiver: one Block Kit message per incident group, kept current, with a thread of changes.

Two modes, chosen by the config:

- **bot** (``token`` + ``channel``): the first notification of a group is posted with ``chat.postMessage``
  and the receipt remembers its channel id and ``ts``. Every later notification edits that message
  (``chat.update``) so the channel always shows the group's current state, and posts a thread reply
  saying what changed. If the message is gone (``message_not_found``) a fresh one is posted.
- **webhook** (``webhook_url``): incoming webhooks cannot edit, so every notification is a new message.

Like every receiver it does not retry: failures become :class:`tailhound.errors.DeliveryError` (429 with
its ``Retry-After``, 5xx, timeouts and connection errors are retryable; Slack's ``ok: false`` errors such
as ``invalid_auth`` or ``channel_not_found`` are not) and slack_sdk's own retry handlers are switched off.
It paces itself to Slack's ~1 message per second per channel by waiting, never by dropping. The token
and the webhook URL (itself a secret) never appear in error reasons, logs or reprs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, model_validator
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from tailhound.durations import Duration
from tailhound.errors import DeliveryError
from tailhound.notifier.model import Notification, Receipt
from tailhound.notifier.receivers import truncate
from tailhound.notifier.receivers.outbound import OutboundGuard, check_outbound
from tailhound.notifier.receivers.slack_blocks import render_message, render_reply
from tailhound.notifier.secrets import SecretRef

log = logging.getLogger(__name__)

#: Slack ``error`` codes that mean "try again later" even though the request itself was fine.
RETRYABLE_CODES = frozenset(
    {"ratelimited", "rate_limited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


class SlackConfig(BaseModel):
    """A Slack receiver: a bot token and a channel, or an incoming-webhook URL (exactly one)."""

    # an inline token is a config error whose message must not echo it
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    type: Literal["slack"]
    name: str = Field(min_length=1)
    token: SecretRef | None = Field(default=None, description="Bot token (xoxb-...): post, update, thread.")
    webhook_url: SecretRef | None = Field(default=None, description="Incoming-webhook URL; it is a secret.")
    channel: str | None = Field(default=None, description="Channel id or #name; required with `token`.")
    base_url: str | None = Field(default=None, description="Slack Web API base URL (tests, proxies).")
    timeout_s: Duration = Field(default=10, gt=0)
    min_interval_s: Duration = Field(default=1.0, ge=0, description="Least time between two messages to a channel.")
    mention_on_critical: str | None = Field(default=None, description='E.g. "<!here>", on critical groups.')
    console_url: str | None = Field(default=None, description="Linked from every message.")

    @model_validator(mode="after")
    def _one_mode(self) -> SlackConfig:
        if (self.token is None) == (self.webhook_url is None):
            raise ValueError("a slack receiver needs exactly one of `token` (bot) or `webhook_url` (incoming webhook)")
        if self.token is not None and not self.channel:
            raise ValueError("`channel` is required with a bot `token`")
        if self.webhook_url is not None and self.channel:
            raise ValueError("`channel` cannot be set with `webhook_url`: the webhook decides the channel")
        return self

    @property
    def mode(self) -> Literal["bot", "webhook"]:
        return "bot" if self.token is not None else "webhook"


class SlackDeliveryError(DeliveryError):
    """A failed Slack call; `code` is Slack's ``error`` (``invalid_auth``) when it gave one."""

    def __init__(
        self,
        reason: str,
        *,
        code: str | None,
        retryable: bool,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(reason, retryable=retryable, retry_after=retry_after, status=status)
        self.code = code


class ChannelPacer:
    """Keeps at least `interval` seconds between the end of one message to a channel and the next one.

    Messages to one channel go out one at a time; a caller waits (``sleep``) for its slot, nothing is
    dropped. Measuring from the end of the previous call keeps the gap on Slack's side, whatever the
    network delays. `clock` and `sleep` are injectable for tests.
    """

    def __init__(
        self,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.interval = interval
        self._clock = clock
        self._sleep = sleep
        self._locks: dict[str, asyncio.Lock] = {}
        self._free_at: dict[str, float] = {}

    @asynccontextmanager
    async def slot(self, channel: str) -> AsyncIterator[None]:
        """Hold `channel` for one message; waits until the channel may take another."""
        async with self._locks.setdefault(channel, asyncio.Lock()):
            free_at = self._free_at.get(channel)
            if free_at is not None:
                wait = free_at - self._clock()
                if wait > 0:
                    await self._sleep(wait)
            try:
                yield
            finally:
                self._free_at[channel] = self._clock() + self.interval


class _SecretRedactor(logging.Filter):
    """Replaces registered secrets with ``***`` in records of slack_sdk's logger for this receiver.

    slack_sdk logs the webhook URL (and request bodies) at debug level; this filter sits on the logger
    every :class:`SlackReceiver` hands to slack_sdk, so those lines never carry a secret.
    """

    def __init__(self) -> None:
        super().__init__()
        self.secrets: Counter[str] = Counter()

    def redact(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def remember(self, secrets: list[str]) -> None:
        self.secrets.update(secrets)

    def forget(self, secrets: list[str]) -> None:
        """Drop secrets no open receiver uses any more."""
        self.secrets.subtract(secrets)
        for secret in [s for s, count in self.secrets.items() if count <= 0]:
            del self.secrets[secret]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


_REDACTOR = _SecretRedactor()
_SDK_LOG = logging.getLogger(f"{__name__}.sdk")
_SDK_LOG.addFilter(_REDACTOR)


def _secret_forms(value: str) -> list[str]:
    """The secret and, for a URL, its path (what a shorter message might show)."""
    forms = [value]
    path = urlsplit(value).path
    if len(path) > 8:
        forms.append(path)
    return forms


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("Retry-After") if headers is not None else None
        return max(float(value), 0.0) if value is not None else None
    except (TypeError, ValueError):
        return None


class SlackReceiver:
    """Delivers notifications to one Slack channel (bot token) or one incoming webhook."""

    def __init__(
        self,
        config: SlackConfig,
        environ: dict[str, str] | None = None,
        *,
        allowed_hosts: list[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        """`allowed_hosts`: ``notifier.webhook_allowed_hosts``; Slack's own hosts are allowed (over https)
        without it. A `base_url` or webhook URL elsewhere is a ConfigError naming the receiver and the host
        (never the URL: a webhook URL is a secret), and every request is checked again when it is sent."""
        self.config = config
        self.name = config.name
        ref = config.token if config.token is not None else config.webhook_url
        assert ref is not None
        if config.mode == "bot":
            check_outbound("slack", config.name, config.base_url or AsyncWebClient.BASE_URL, allowed_hosts or [])
        secret = ref.resolve(environ)
        if config.mode == "webhook":
            check_outbound("slack", config.name, secret.reveal(), allowed_hosts or [])
        self._guard = OutboundGuard("slack", config.name, allowed_hosts or [])
        self._secrets = _secret_forms(secret.reveal())
        _REDACTOR.remember(self._secrets)
        self._pacer = ChannelPacer(config.min_interval_s, clock, sleep)
        self._session: aiohttp.ClientSession | None = None
        self._channel_id: str | None = None  # the id Slack answered for `config.channel`, for pacing
        self._web: AsyncWebClient | None = None
        self._hook: AsyncWebhookClient | None = None
        if config.mode == "bot":
            self._web = AsyncWebClient(
                token=secret.reveal(),
                base_url=config.base_url or AsyncWebClient.BASE_URL,
                timeout=config.timeout_s,
                retry_handlers=[],
                logger=_SDK_LOG,
            )  # type: ignore[arg-type]
        else:
            self._hook = AsyncWebhookClient(
                url=secret.reveal(),
                timeout=config.timeout_s,  # type: ignore[arg-type]
                retry_handlers=[],
                logger=_SDK_LOG,
            )
        self._closed = False

    def __repr__(self) -> str:
        where = f"channel={self.config.channel!r}" if self.config.mode == "bot" else "webhook=***"
        return f"SlackReceiver(name={self.name!r}, mode={self.config.mode!r}, {where})"

    async def send(self, notification: Notification, receipt: Receipt | None) -> Receipt:
        """Post, or update and reply in the thread; returns ``{channel, ts}`` (bot) or ``{}`` (webhook)."""
        text, blocks = render_message(
            notification, mention=self.config.mention_on_critical, console_url=self.config.console_url
        )
        if self._hook is not None:
            await self._send_webhook(text, blocks)
            return {}
        if not receipt or not receipt.get("ts") or not receipt.get("channel"):
            return await self._post(text, blocks)
        channel, ts = receipt["channel"], receipt["ts"]
        try:
            await self._call("chat.update", channel, ts=ts, text=text, blocks=blocks)
        except SlackDeliveryError as err:
            if err.code != "message_not_found":
                raise
            log.info("slack %s: message %s in %s is gone; posting a fresh one", self.name, ts, channel)
            return await self._post(text, blocks)
        reply_text, reply_blocks = render_reply(notification)
        await self._call("chat.postMessage", channel, thread_ts=ts, text=reply_text, blocks=reply_blocks)
        return dict(receipt)

    async def close(self) -> None:
        """Close the HTTP session; the receiver may not be used afterwards."""
        if self._closed:
            return
        self._closed = True
        _REDACTOR.forget(self._secrets)
        if self._session is not None:
            await self._session.close()
            self._session = None

    # -- calls ---------------------------------------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        """One session for all calls, made on first use (inside the running loop)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s), trace_configs=[self._guard.trace_config()]
            )
        return self._session

    async def _post(self, text: str, blocks: list[dict[str, Any]]) -> Receipt:
        assert self.config.channel is not None
        data = await self._call("chat.postMessage", self.config.channel, text=text, blocks=blocks)
        channel, ts = data.get("channel") or self.config.channel, data.get("ts")
        if not ts:
            raise SlackDeliveryError(
                "slack chat.postMessage answered without a message ts", code=None, retryable=False, status=200
            )
        self._channel_id = str(channel)
        return {"channel": str(channel), "ts": str(ts)}

    def _pace_key(self, channel: str) -> str:
        """The configured channel and the id Slack gave for it are one channel to pace."""
        return self.config.channel if channel == self._channel_id else channel  # type: ignore[return-value]

    async def _call(self, method: str, channel: str, **payload: Any) -> dict[str, Any]:
        """One Web API call (paced per channel); returns the response data or raises SlackDeliveryError."""
        assert self._web is not None
        self._web.session = self._http()
        args = {"channel": channel, **payload}
        if method == "chat.postMessage":
            args.update(unfurl_links=False, unfurl_media=False)
        async with self._pacer.slot(self._pace_key(channel)):
            try:
                response = await self._web.api_call(method, json=args)
            except SlackApiError as exc:
                raise self._api_error(method, exc) from None
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise self._transport_error(method, exc) from None
        log.debug("slack %s: %s to %s ok", self.name, method, channel)
        return response.data if isinstance(response.data, dict) else {}

    async def _send_webhook(self, text: str, blocks: list[dict[str, Any]]) -> None:
        assert self._hook is not None
        self._hook.session = self._http()
        async with self._pacer.slot("webhook"):
            try:
                response = await self._hook.send(text=text, blocks=blocks, unfurl_links=False, unfurl_media=False)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise self._transport_error("webhook", exc) from None
        status = response.status_code
        if status == 200:
            return
        code = (response.body or "").strip()[:200] or None
        raise SlackDeliveryError(
            self._redact(f"slack webhook failed: {code or 'no answer'} (HTTP {status})"),
            code=code,
            retryable=status == 429 or status >= 500,
            retry_after=_retry_after(response.headers) if status == 429 else None,
            status=status,
        )

    # -- errors --------------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _api_error(self, method: str, exc: SlackApiError) -> SlackDeliveryError:
        response = exc.response
        status = getattr(response, "status_code", None)
        data = response.data if isinstance(getattr(response, "data", None), dict) else {}
        code = data.get("error") or None
        reason = f"slack {method} failed: {code or 'unexpected answer'}"
        if status != 200:
            reason += f" (HTTP {status})"
        details = (data.get("response_metadata") or {}).get("messages") or []
        if details:
            reason += ": " + "; ".join(str(d) for d in details[:3])
        rate_limited = status == 429 or code in ("ratelimited", "rate_limited")
        retryable = rate_limited or (status or 0) >= 500 or code in RETRYABLE_CODES
        headers = getattr(response, "headers", None)
        return SlackDeliveryError(
            truncate(self._redact(reason), 1000),
            code=code,
            retryable=retryable,
            retry_after=_retry_after(headers) if rate_limited else None,
            status=status,
        )

    def _transport_error(self, what: str, exc: BaseException) -> SlackDeliveryError:
        if isinstance(exc, TimeoutError):
            reason = f"slack {what}: no answer within {self.config.timeout_s:g}s"
        else:
            reason = f"slack {what}: {type(exc).__name__}: {exc}"
        return SlackDeliveryError(truncate(self._redact(reason), 1000), code=None, retryable=True)
