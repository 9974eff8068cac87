"""Fault drills (issue 13): hostile input, clock skew, broker outages, worker kills, receiver outages,
regex attacks, silence floods, each against real processes on the bundled broker.

Every drill runs a short variant by default (what ``make test`` and CI run) and a long one with
``TAILHOUND_LONG_DRILLS=1`` (``make drills``). A drill reports its figures (lost, duplicated, time to recover,
RSS, ...) with the :func:`drill_report` fixture: they are printed and appended as one JSON line to
``.tailhound/drills.jsonl`` (``TAILHOUND_DRILL_REPORT`` overrides the path), which BENCHMARKS.md quotes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

LONG = os.environ.get("TAILHOUND_LONG_DRILLS", "") not in ("", "0", "false")


def scale(short: int, long: int) -> int:
    """The drill's size: `short` in CI, `long` under ``TAILHOUND_LONG_DRILLS=1``."""
    return long if LONG else short


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.drill)


@pytest.fixture
def drill_report(request: pytest.FixtureRequest) -> Callable[..., dict]:
    """``drill_report(**figures)``: print and record the drill's figures (one JSON line per call)."""

    def report(**figures: object) -> dict:
        row = {"drill": request.node.name, "variant": "long" if LONG else "short", "ts": time.time(), **figures}
        path = Path(os.environ.get("TAILHOUND_DRILL_REPORT", ".tailhound/drills.jsonl"))
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        print("DRILL", json.dumps(row, default=str))
        return row

    return report
