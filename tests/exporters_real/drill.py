"""Helpers of the real-exporter tests: a second HTTP client that fetches what the agent scrapes at the same
time, exposition text taken apart without the agent's parser, and what the catalog maps for a source."""

from __future__ import annotations

import os
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field

from tailhound.catalog import SourceMetric, default_catalog

#: TAILHOUND_LONG_DRILLS=1: a minute of scraping (the issue's `tailhound record` ran 60 s); CI: 15 s
LONG = os.environ.get("TAILHOUND_LONG_DRILLS", "") not in ("", "0", "false")
DRILL_S = 60.0 if LONG else 15.0
#: Catalog metrics node_exporter 1.5 does not give with its default flags: the default
#: --collector.netstat.fields regexp leaves out Tcp_AttemptFails and Tcp_EstabResets
#: (test_node_exporter_flags.py adds them with the flag; procnet sends them without one).
NOT_IN_NODE_EXPORTER_DEFAULTS = frozenset({"node_netstat_Tcp_AttemptFails", "node_netstat_Tcp_EstabResets"})
#: a sample line: name, optional {labels}, a value, an optional timestamp
_SAMPLE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? [^ ]+( -?\d+)?$")


def families(text: str) -> frozenset[str]:
    """The metric families a text page declares (its ``# TYPE`` lines)."""
    return frozenset(line.split()[2] for line in text.splitlines() if line.startswith("# TYPE "))


def sample_names(text: str) -> frozenset[str]:
    return frozenset(
        re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line and not line.startswith("#")
    )


def complete(text: str) -> bool:
    """A whole page: it ends in a newline and its last line is a whole sample."""
    lines = text.splitlines()
    return text.endswith("\n") and bool(lines) and _SAMPLE.match(lines[-1]) is not None


def catalog_metrics(source: str, prefix: str = "") -> list[SourceMetric]:
    """The catalog's mappings of `source` (tailhound/catalog/signals.yaml), those whose metric starts with `prefix`."""
    return [
        sm
        for spec in default_catalog().signals.values()
        for sm in spec.sources.get(source, ())
        if sm.metric.startswith(prefix)
    ]


@dataclass
class SecondClient:
    """Fetches `urls` with urllib every `every_s` in a thread while the agent scrapes them: what an independent
    client saw at the same time, to compare the agent's bodies with."""

    urls: list[str]
    every_s: float = 0.5
    bodies: dict[str, list[str]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self, deadline: float) -> None:
        while not self._stop.is_set() and time.monotonic() < deadline:  # bounded by the deadline
            for url in self.urls:
                try:
                    with urllib.request.urlopen(url, timeout=5) as resp:
                        self.bodies.setdefault(url, []).append(resp.read().decode())
                except OSError as exc:
                    self.errors.append(f"{url}: {exc}")
            self._stop.wait(self.every_s)

    def __enter__(self) -> SecondClient:
        self._thread = threading.Thread(target=self._run, args=(time.monotonic() + 300,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
