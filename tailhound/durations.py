"""Durations in rule and config files: ``90``, ``"90s"``, ``"5m"``, ``"1h"``, ``"250ms"`` -> seconds."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("duration must be a number of seconds or a string like 30s, 5m, 1h")
    if isinstance(v, int | float):
        if v < 0:
            raise ValueError("duration must be >= 0")
        return float(v)
    m = _DURATION.match(str(v))
    if not m:
        raise ValueError(f"invalid duration {v!r}: use a number of seconds or 30s, 5m, 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


#: a pydantic field type that takes any of the spellings above and holds seconds
Duration = Annotated[float, BeforeValidator(parse_duration)]
