"""What the grouping keeps and hands out besides records: its open scrapes and sources, and the notices.

:class:`_Group` is one open scrape of a source (its series' values, ``up``, whether ``up`` went stale),
:class:`_Source` one (node, source, common labels) with its open scrapes, the latest one emitted and the
layout of its last scrape's families (:mod:`tailhound.ingest.scrape_families`). :class:`Forget` and
:class:`SeriesReject` are what :class:`~tailhound.ingest.grouping.Grouper` hands out besides records, and
re-exports with :data:`TARGET_DOWN`.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from tailhound.ingest.remote_write_messages import Labels
from tailhound.ingest.scrape_families import Layout, SeriesInfo
from tailhound.ingest.series_labels import SourceKey

#: The error of the record of a failed scrape.
TARGET_DOWN = "target down: Prometheus could not scrape it (up == 0)"


class Forget(NamedTuple):
    """A source is gone (its target left Prometheus' config, or it was forgotten to bound memory)."""

    node: str
    source: str
    labels: dict[str, str]


class SeriesReject(NamedTuple):
    """Series of one request left out for one reason: how many, and the first one's labels."""

    kind: str
    reason: str
    count: int
    example: Labels


class _Group:
    __slots__ = ("ts_ms", "series", "up", "gone", "first", "last", "overflow")

    def __init__(self, ts_ms: int, now: float) -> None:
        self.ts_ms = ts_ms
        self.series: dict[SeriesInfo, float] = {}
        self.up: float | None = None
        self.gone = False  # a stale marker on `up`
        self.first = self.last = now
        self.overflow = False


class _Source:
    __slots__ = ("key", "open", "emitted_ms", "prev_ms", "diffs", "layout_key", "layout")

    def __init__(self, key: SourceKey) -> None:
        self.key = key
        self.open: dict[int, _Group] = {}
        self.emitted_ms: int | None = None
        self.prev_ms: int | None = None  # the latest scrape made into a record
        self.diffs: deque[int] = deque(maxlen=8)
        self.layout_key: tuple[frozenset[SeriesInfo], int] | None = None  # the series and metadata of the last
        self.layout: Layout | None = None  # scrape's layout: the next scrape mostly has the same
