"""The hostile-input suite (issue 28): every attack as a test against real sockets, files and processes.

Like the fault drills (tests/faults/conftest.py), each test runs a short variant by default (``make test`` and
CI) and a long one with ``TAILHOUND_LONG_DRILLS=1`` (``make drills``: more messages, longer floods, more
connections), sized with :func:`tests.faults.conftest.scale`; the tests here are marked ``drill`` too."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.drill)
