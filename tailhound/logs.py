"""Log setup for every tailhound process: one format (logfmt or JSON) on stderr, one level, a start line.

Lines look like a Prometheus component's (go-kit logfmt)::

    ts=2026-12-01T21:21:41.123Z level=info logger=tailhound.worker.compose msg="tailhound worker starting" version=0.1.0

``--log-format logfmt|json`` and ``--log-level`` on the command line win over ``TAILHOUND_LOG_FORMAT`` /
``TAILHOUND_LOG_LEVEL``, which win over the defaults (logfmt, info). Fields given with ``extra={...}`` are
written as ``key=value`` (logfmt) or keys of the object (JSON). Noisy client libraries (aiokafka while the
broker is away: hundreds of lines a second) go through :class:`RepeatFilter`.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import IO, Any

LEVEL_ENV = "TAILHOUND_LOG_LEVEL"
FORMAT_ENV = "TAILHOUND_LOG_FORMAT"
FORMATS = ("logfmt", "json")
LEVELS = ("debug", "info", "warning", "error", "critical")
#: loggers whose repeated messages are folded into a summary line (reconnect loops)
NOISY_LOGGERS = ("aiokafka", "kafka", "faust.transport")
#: the seconds between two lines of one repeated message (the second one is the summary)
REPEAT_WINDOW_S = 10.0

#: attributes every LogRecord has: the rest came from ``extra`` and are written as fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def _stamp(created: float) -> str:
    return datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(created % 1 * 1000):03d}Z"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _logfmt_value(value: Any) -> str:
    text = (
        value
        if isinstance(value, str)
        else json.dumps(value, default=str)
        if isinstance(value, list | dict | tuple)
        else str(value)
    )
    if text and not any(c in text for c in ' ="\\\n\t') and text.isprintable():
        return text
    return json.dumps(text, ensure_ascii=False)


class LogfmtFormatter(logging.Formatter):
    """``ts=... level=info logger=... msg="..." key=value``, one line per record (tracebacks in ``exc``)."""

    def format(self, record: logging.LogRecord) -> str:
        pairs: list[tuple[str, Any]] = [
            ("ts", _stamp(record.created)),
            ("level", record.levelname.lower()),
            ("logger", record.name),
            ("msg", record.getMessage()),
        ]
        pairs += _fields(record).items()
        if record.exc_info:
            pairs.append(("exc", self.formatException(record.exc_info)))
        return " ".join(f"{k}={_logfmt_value(v)}" for k, v in pairs)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, the extra fields, ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _stamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class RepeatFilter(logging.Filter):
    """Lets the first record of a kind (logger, level, message template) through, drops the repeats for
    `window_s`, then lets the next one through with ``suppressed=N`` and a note in its message: a reconnect
    loop writes two lines per window instead of hundreds a second. Only warnings and errors of loggers under
    `prefixes`."""

    def __init__(
        self,
        prefixes: Iterable[str] = NOISY_LOGGERS,
        window_s: float = REPEAT_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = 1024,
    ) -> None:
        super().__init__()
        self.prefixes = tuple(prefixes)
        self.window_s = window_s
        self.clock = clock
        self.max_kinds = max_kinds
        #: kind -> (when its last line went out, repeats dropped since)
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        # warnings and errors only: an info line of these loggers (a topic created) is no flood and says something
        if record.levelno < logging.WARNING or not record.name.startswith(self.prefixes):
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.window_s:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if len(self._seen) >= self.max_kinds and key not in self._seen:
            self._seen.clear()  # bounded: message templates with values baked in must not grow this forever
        suppressed = last[1] if last is not None else 0
        self._seen[key] = (now, 0)
        if suppressed:
            record.suppressed = suppressed
            record.msg = f"{record.msg} ({suppressed} similar messages suppressed in the last {self.window_s:g} s)"
        return True


def resolve(
    level: str | None = None, fmt: str | None = None, default_level: str = "info", default_format: str = "logfmt"
) -> tuple[str, str]:
    """(level, format) from the arguments, else the environment, else the defaults; ValueError names the choices."""
    level = (level or os.environ.get(LEVEL_ENV) or default_level).lower()
    fmt = (fmt or os.environ.get(FORMAT_ENV) or default_format).lower()
    if level == "warn":
        level = "warning"
    if level not in LEVELS:
        raise ValueError(f"log level {level!r}: use one of {', '.join(LEVELS)}")
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: use one of {', '.join(FORMATS)}")
    return level, fmt


class _TailhoundHandler(logging.StreamHandler):
    """The handler setup_logging installs (a second call replaces it instead of adding another); without a
    stream it writes to the sys.stderr of the moment (one replaced later, as by a test runner, is followed)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._fixed = stream
        super().__init__(stream)

    @property
    def stream(self) -> IO[str]:  # type: ignore[override]
        return self._fixed if self._fixed is not None else sys.stderr

    @stream.setter
    def stream(self, value: IO[str]) -> None:
        self._fixed = value if value is not sys.stderr else self._fixed


def setup_logging(
    level: str | None = None,
    fmt: str | None = None,
    *,
    stream: IO[str] | None = None,
    default_level: str = "info",
    default_format: str = "logfmt",
) -> logging.Handler:
    """Send every log record of the process to `stream` (stderr) in `fmt`, at `level` and above; the handler.

    `level` and `fmt` come from the command line (None: not given), the defaults from settings.
    Replaces the handlers a previous call or ``logging.basicConfig`` installed on the root logger."""
    from tailhound.errors import TailhoundError

    try:
        level, fmt = resolve(level, fmt, default_level, default_format)
    except ValueError as exc:
        raise TailhoundError(str(exc)) from None
    handler = _TailhoundHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else LogfmtFormatter())
    handler.addFilter(RepeatFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        # ours and basicConfig's go; other kinds (a test runner's capture) stay
        if isinstance(old, _TailhoundHandler) or type(old) in (logging.StreamHandler, logging.FileHandler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)
    return handler


def log_always(logger: logging.Logger, msg: str, **fields: Any) -> None:
    """An info line written at every level (start and listen lines: a worker at ``warning`` still says what it
    is and where it listens); `fields` as extra fields, None left out."""
    record = logger.makeRecord(
        logger.name, logging.INFO, __file__, 0, msg, (), None, extra={k: v for k, v in fields.items() if v is not None}
    )
    logger.handle(record)  # handle(), not info(): past the level check, through the handlers and filters


def log_start(process: str, **fields: Any) -> None:
    """The start line: ``msg="tailhound <process> starting" version=... pid=... <fields>`` (listen addresses)."""
    from tailhound import __version__

    log_always(
        logging.getLogger(f"tailhound.{process}"),
        f"tailhound {process} starting",
        version=__version__,
        pid=os.getpid(),
        **fields,
    )
