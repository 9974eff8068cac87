"""Durations in every config and rule file: plain seconds (``90``, ``1.5``) or Prometheus' form (``"500ms"``,
``"90s"``, ``"5m"``, ``"1h30m"``, ``"1d12h"``: units ms, s, m, h, d, w, largest first, each once).

One parser for every file kind (settings and their environment variables, agent.yaml, notifier.yaml,
ingest.yaml, the capacity file, rules), so ``timeout_s: 5m`` and ``repost_interval: 300`` both work and
fields compare as numbers of seconds once parsed."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
#: the accepted forms, as every error message states them
FORMS = "a number of seconds (90, 1.5) or a duration such as 500ms, 10s, 5m, 1h30m"
_HINT = f"use {FORMS}"


def parse_duration(v: Any) -> float:
    """`v` in seconds; ValueError naming the accepted forms for anything else (negative, bool, ``5x``)."""
    if isinstance(v, bool):
        raise ValueError(f"a duration is {FORMS}, not {str(v).lower()}")
    if isinstance(v, int | float):
        if v < 0:
            raise ValueError(f"a duration must be >= 0 ({FORMS})")
        return float(v)
    if not isinstance(v, str):
        raise ValueError(f"a duration is {FORMS}")
    text = v.strip()
    m = _NUMBER.match(text)
    if m:
        return float(m.group(1))
    total, at, last = 0.0, 0, float("inf")
    for part in _PART.finditer(text):
        unit_s = _UNIT_S[part.group(2)]
        if part.start() != at or unit_s >= last:  # a gap, or units not largest first (1m1h, 5m5m)
            raise ValueError(f"invalid duration {v[:40]!r}: {_HINT}")
        total += float(part.group(1)) * unit_s
        at, last = part.end(), unit_s
    if at == 0 or at != len(text):
        raise ValueError(f"invalid duration {v[:40]!r}: {_HINT}")
    return total


def parse_milliseconds(v: Any) -> Any:
    """A ``*_ms`` field: a plain number is milliseconds (as the name says); a string with a unit is converted
    (``"250ms"``, ``"1s"``)."""
    if isinstance(v, int | float) and not isinstance(v, bool) or isinstance(v, str) and _NUMBER.match(v):
        return parse_duration(v)
    return parse_duration(v) * 1000.0


def _whole_ms(v: Any) -> int:
    ms = parse_milliseconds(v)
    if ms != int(ms):
        raise ValueError(f"{ms:g} ms is not a whole number of milliseconds")
    return int(ms)


#: a pydantic field type that takes any of the spellings above and holds seconds
Duration = Annotated[float, BeforeValidator(parse_duration)]
#: the same for a field counted in milliseconds (``linger_ms``): ``100`` or ``"100ms"`` or ``"1s"`` -> int ms
Milliseconds = Annotated[int, BeforeValidator(_whole_ms)]


def _whole_s(v: Any) -> int:
    s = parse_duration(v)
    if s != int(s):
        raise ValueError(f"{s:g}s is not a whole number of seconds")
    return int(s)


#: a field counted in whole seconds (an HTTP Retry-After): ``5`` or ``"5s"`` or ``"1m"`` -> int seconds
WholeSeconds = Annotated[int, BeforeValidator(_whole_s)]
