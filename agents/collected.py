"""What a native collector returns: a scrape record whose samples the pipeline takes as they are.

A native collector (NVML, procnet, tcp_connect, hops, nginx, the stream probe) measures values, not
text. :class:`CollectedRecord` carries the record's header (a validated :class:`ScrapeRecord` with an
empty body) and the :class:`~tailhound.agents.render.ExpositionWriter` holding the values. The pipeline reads
``families()`` (what parsing the text would give); the Prometheus text is rendered only when something
asks for ``body``: ``tailhound record`` / a recorder writing ``to_line()``, or a test. Live collection
and recordings thus stay equivalent (tests/agents/test_direct_samples.py) without the agent rendering
and parsing ~1k samples a second.
"""

from __future__ import annotations

from tailhound.agents.exposition import Family
from tailhound.agents.render import ExpositionWriter
from tailhound.recording import ScrapeRecord


class CollectedRecord:
    """Duck-types the read side of :class:`ScrapeRecord` (``ts``, ``node``, ``job``, ``body``, ``labels``,
    ``interval_s``, ``error``); ``to_record()`` is the ScrapeRecord a recording stores."""

    __slots__ = ("header", "writer", "_body")

    def __init__(
        self,
        *,
        ts: float,
        node: str,
        job: str,
        writer: ExpositionWriter,
        labels: dict[str, str] | None = None,
        interval_s: float | None = None,
    ) -> None:
        self.header = ScrapeRecord(ts=ts, node=node, job=job, labels=labels or {}, interval_s=interval_s)
        self.writer = writer
        self._body: str | None = None

    @property
    def ts(self) -> float:
        return self.header.ts

    @property
    def node(self) -> str:
        return self.header.node

    @property
    def job(self) -> str:
        return self.header.job

    @property
    def labels(self) -> dict[str, str]:
        return self.header.labels

    @property
    def interval_s(self) -> float | None:
        return self.header.interval_s

    @property
    def error(self) -> None:
        return None  # a failed collection is a plain ScrapeRecord with `error` (failure_records)

    @property
    def body(self) -> str:
        """The collection as exposition text (rendered once, on first use)."""
        if self._body is None:
            self._body = self.writer.text()
        return self._body

    def families(self, entries_as_samples: bool = False) -> list[Family]:
        """What parsing ``body`` gives, taken from the writer directly (see ExpositionWriter.families)."""
        return self.writer.families(entries_as_samples)

    def with_labels(self, labels: dict[str, str]) -> CollectedRecord:
        """The same collection with other record labels (the agent's top-level labels merged in)."""
        out = CollectedRecord.__new__(CollectedRecord)
        out.header = self.header.model_copy(update={"labels": labels})
        out.writer, out._body = self.writer, self._body
        return out

    def to_record(self) -> ScrapeRecord:
        return self.header.model_copy(update={"body": self.body})

    def to_line(self) -> str:
        return self.to_record().to_line()

    def __repr__(self) -> str:
        return f"CollectedRecord({self.header!r})"
