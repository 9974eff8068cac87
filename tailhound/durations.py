"""Durations in rule and config files: ``90``, ``"90s"``, ``"5m"``, ``"1h"``, ``"250ms"`` and Prometheus'
compound form ``"1h30m"``, ``"1d12h"`` (units ms, s, m, h, d, w, largest first, each once) -> seconds."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_HINT = "use a number of seconds or 30s, 5m, 1h, 1h30m"


def parse_duration(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError(f"duration must be a number of seconds or a string: {_HINT}")
    if isinstance(v, int | float):
        if v < 0:
            raise ValueError("duration must be >= 0")
        return float(v)
    text = str(v).strip()
    m = _NUMBER.match(text)
    if m:
        return float(m.group(1))
    total, at, last = 0.0, 0, float("inf")
    for part in _PART.finditer(text):
        unit_s = _UNIT_S[part.group(2)]
        if part.start() != at or unit_s >= last:  # a gap, or units not largest first (1m1h, 5m5m)
            raise ValueError(f"invalid duration {v!r}: {_HINT}")
        total += float(part.group(1)) * unit_s
        at, last = part.end(), unit_s
    if at == 0 or at != len(text):
        raise ValueError(f"invalid duration {v!r}: {_HINT}")
    return total


#: a pydantic field type that takes any of the spellings above and holds seconds
Duration = Annotated[float, BeforeValidator(parse_duration)]
