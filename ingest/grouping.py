"""Remote-write series -> one scrape record per scrape: (node, source, target labels, timestamp).

Prometheus stamps every sample of one scrape of one target with the same timestamp, and adds the target's
labels (``job``, ``instance``, relabelled ones such as ``node``, the ``external_labels``) to every series.
:class:`Grouper` files each sample under its **node**, its **source** (the ``job``) and its **common labels**
(what :class:`GroupingConfig` makes of a series' labels: :mod:`tailhound.ingest.series_labels`), and its
timestamp.

A group is one scrape. Remote write sends a scrape in one or more requests, and with several shards in no
particular order, so a group stays open until no sample came for it for :attr:`GroupingConfig.settle_s`
(Prometheus sends a partial batch after ``queue_config.batch_send_deadline``, 5 s by default); it then
becomes a record holding the families the agent's parser would read from the exposition text of its samples,
with a ``# TYPE`` per family (:class:`~tailhound.ingest.scrape_families.GroupedRecord`; the text itself,
:mod:`tailhound.ingest.exposition_render`, is written only when asked for, or for a scrape the parser must
judge), so that the agent's :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` makes of it exactly the
snapshot it makes of the page itself: same samples, deltas, resets, histograms, sentinels and limits.
Series are filed on the label-set objects the decoder interns (looked up by identity first), each distinct
series once as a :class:`~tailhound.ingest.scrape_families.SeriesInfo`. A source's groups come out in
timestamp order; a sample older than the source's latest emitted group is late (counted, dropped: its deltas
are already computed).

Prometheus' own series tell the rest: ``up 0`` (and the stale markers of every series) is a failed scrape
-> a record with ``error`` (the snapshot is a gap, as the agent's); a stale marker on ``up`` means the
target is gone -> :class:`Forget` (the builder's state of that source is dropped); the other
``scrape_*`` series are left out.

Bounded: open groups per source (:attr:`~GroupingConfig.max_open_per_source`), samples held in open groups
(:attr:`~GroupingConfig.max_pending_samples`; the oldest groups close early), series in one group
(:attr:`~GroupingConfig.max_group_series`, the agent parser's sample limit), sources remembered
(:attr:`~GroupingConfig.max_sources`; the least recently seen is forgotten), metadata families and the
per-series cache.

Re-exported from the modules they live in: :class:`GroupingConfig`, :func:`host_of` (series_labels),
:func:`family_types`, :func:`render` (exposition_render).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from tailhound.catalog import Catalog, default_catalog
from tailhound.ingest.exposition_render import family_types as family_types
from tailhound.ingest.exposition_render import render as render
from tailhound.ingest.grouping_state import TARGET_DOWN as TARGET_DOWN
from tailhound.ingest.grouping_state import Forget as Forget
from tailhound.ingest.grouping_state import SeriesReject as SeriesReject
from tailhound.ingest.grouping_state import _Group, _Source
from tailhound.ingest.remote_write import Labels as Labels
from tailhound.ingest.remote_write import Metadata as Metadata
from tailhound.ingest.remote_write import Series as Series
from tailhound.ingest.scrape_families import GroupedRecord, Layout, SeriesInfo, families_of, layout
from tailhound.ingest.series_labels import DEFAULT_GROUPING as DEFAULT_GROUPING
from tailhound.ingest.series_labels import SOURCE_RE as SOURCE_RE
from tailhound.ingest.series_labels import SYNTHETIC as SYNTHETIC
from tailhound.ingest.series_labels import GroupingConfig as GroupingConfig
from tailhound.ingest.series_labels import ParsedSeries, parse_labels
from tailhound.ingest.series_labels import SourceKey as SourceKey
from tailhound.ingest.series_labels import host_of as host_of
from tailhound.recording import ScrapeRecord

_MAX_CACHED_SERIES = 100_000  # label sets whose node, source and labels are known


class Grouper:
    """Files remote-write series into per-scrape groups and hands out, in order, the records they make.

    Not thread-safe: one caller at a time (the receiver serialises requests). Times (`now`) are any monotonic
    seconds; the same clock for every call."""

    def __init__(self, config: GroupingConfig | None = None, catalog: Catalog | None = None) -> None:
        self.config = config or DEFAULT_GROUPING
        self.catalog = catalog or default_catalog()
        self._sources: dict[SourceKey, _Source] = {}  # least recently seen first
        self._active: dict[SourceKey, _Source] = {}  # those with open scrapes
        self._closed: list[tuple[_Source, _Group] | Forget] = []  # closed, in order, waiting for ready()
        # label set -> what it says and its series (None: `up` & co.); by value, and by the identity of the
        # decoder's interned label sets (the entry holds the object, so its id is not reused meanwhile)
        self._cache: dict[Labels, tuple[ParsedSeries, SeriesInfo | None]] = {}
        self._by_id: dict[int, tuple[Labels, ParsedSeries, SeriesInfo | None]] = {}
        self._infos: dict[tuple[SourceKey, str, Labels], SeriesInfo] = {}  # one per distinct series
        self._keys: dict[SourceKey, SourceKey] = {}  # interned source keys
        self.metadata: dict[str, str] = {}  # family -> TYPE; replaced, never changed, so records may keep it
        self._metadata_version = 0
        self.pending_samples = 0
        self.stats: dict[str, int] = {}

    # -- in --------------------------------------------------------------------------------------------------

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def add_metadata(self, metadata: Iterable[Metadata]) -> None:
        """Remember the TYPE of each family (Prometheus sends metadata in requests of their own, every
        ``metadata_config.send_interval``, 1 min by default)."""
        meta, limit = self.metadata, self.config.max_metadata
        copied = False
        for m in metadata:
            if m.type == "unknown" or not m.family:
                continue
            if meta.get(m.family) == m.type:
                continue
            if not copied:  # records made so far render with the metadata of their time
                meta = self.metadata = dict(meta)
                self._metadata_version += 1
                copied = True
            meta.pop(m.family, None)
            while meta and len(meta) >= limit:
                del meta[next(iter(meta))]
            if limit:
                meta[m.family] = m.type

    def add(self, series: Iterable[Series], now: float) -> list[SeriesReject]:
        """File the samples of `series` (one request's); returns the series left out as bad input, by kind."""
        cfg = self.config
        by_id = self._by_id
        rejects: dict[str, list] = {}
        n_late = n_samples = n_dropped = 0
        last_key = src = None
        last_ts, last_group = None, None  # the group the previous sample went to (series of a scrape come together)
        for s in series:
            labels, samples, stale = s
            hit = by_id.get(id(labels))
            if hit is not None and hit[0] is labels:
                parsed, info = hit[1], hit[2]
            else:
                parsed, info = self._parse(labels)
            key = parsed.key
            if key is None:
                if parsed.reject is None:
                    n_dropped += 1
                else:
                    kind, reason = parsed.reject
                    entry = rejects.get(kind)
                    if entry is None:
                        rejects[kind] = [reason, 1, s.labels]
                    else:
                        entry[1] += 1
                continue
            if key is not last_key:  # keys are interned: the same source as the previous series needs no lookup
                src, last_key, last_ts = self._source(key), key, None  # (a lookup may close another's scrapes)
            for ts, value in samples:
                emitted = src.emitted_ms
                if emitted is not None and ts <= emitted:
                    n_late += 1
                    continue
                if ts <= 0:
                    entry = rejects.setdefault("bad_timestamp", ["a sample dated at or before 1970", 0, s.labels])
                    entry[1] += 1
                    continue
                if ts == last_ts:
                    group = last_group
                else:
                    group = self._group(src, ts, now)
                    if group is None:
                        n_late += 1
                        last_ts = None
                        continue
                    last_ts, last_group = ts, group
                if info is None:  # `up` and the other scrape_* series
                    if parsed.name == "up":
                        group.up = value
                    continue
                in_group = group.series
                if info not in in_group:
                    if group.overflow or len(in_group) >= cfg.max_group_series:
                        group.overflow = True
                        entry = rejects.setdefault(
                            "too_many_series",
                            [
                                f"a scrape of {key[1]} on {key[0]} has more than {cfg.max_group_series} series",
                                0,
                                s.labels,
                            ],
                        )
                        entry[1] += 1
                        continue
                    self.pending_samples += 1
                    n_samples += 1
                in_group[info] = value
            if stale and parsed.name == "up":
                last_ts = None
                for ts in stale:
                    if src.emitted_ms is None or ts > src.emitted_ms:
                        group = self._group(src, ts, now)
                        if group is not None:
                            group.gone = True
        if n_late:
            self._count("late_samples", n_late)
        if n_dropped:
            self._count("unknown_series", n_dropped)
        self._count("samples", n_samples)
        self._bound_pending()
        out = [SeriesReject(kind, reason, n, example) for kind, (reason, n, example) in rejects.items()]
        for r in out:
            self._count("rejected_" + r.kind, r.count)
        return out

    def _parse(self, labels: Labels) -> tuple[ParsedSeries, SeriesInfo | None]:
        """What `labels` say and their series, worked out once per label set (bounded caches)."""
        cache = self._cache
        entry = cache.get(labels)
        if entry is None:
            # the series of open scrapes survive a forget: count them out, or a full forget would come again
            # with every new label set while they stay open (at most one a pending sample)
            if len(cache) >= _MAX_CACHED_SERIES or len(self._infos) >= _MAX_CACHED_SERIES + self.pending_samples:
                self._forget_series()
            parsed = parse_labels(labels, self.config, self.catalog)
            if parsed.key is not None:
                parsed = parsed._replace(key=self._keys.setdefault(parsed.key, parsed.key))
            info = None
            if parsed.key is not None and not (parsed.name in SYNTHETIC and not self.config.keep_synthetic):
                k = (parsed.key, parsed.name, parsed.labels)
                info = self._infos.get(k)
                if info is None:
                    info = self._infos[k] = SeriesInfo(parsed.name, parsed.labels)
            entry = cache[labels] = (parsed, info)
        if len(self._by_id) >= _MAX_CACHED_SERIES:
            self._by_id.clear()
        self._by_id[id(labels)] = (labels, *entry)
        return entry

    def _forget_series(self) -> None:
        """Empty the per-series caches; the series of open scrapes stay known (one key per series in a scrape)."""
        self._cache.clear()
        self._by_id.clear()
        self._keys.clear()
        self._infos = {
            (src.key, i.name, i.labels): i for src in self._active.values() for g in src.open.values() for i in g.series
        }

    def _source(self, key: SourceKey) -> _Source:
        sources = self._sources
        src = sources.pop(key, None)
        if src is None:
            src = _Source(key)
            if len(sources) >= self.config.max_sources:
                self._evict()
        sources[key] = src  # most recently used last
        return src

    def _evict(self) -> None:
        """Forget the least recently seen source (its open scrapes close first)."""
        key, src = next(iter(self._sources.items()))
        del self._sources[key]
        for ts in sorted(src.open):
            self._close(src, ts)
        self._closed.append(Forget(key[0], key[1], dict(key[2])))
        self._count("sources_forgotten")

    def _group(self, src: _Source, ts: int, now: float) -> _Group | None:
        """The open scrape of `src` at `ts` (opened now if need be); None when it is too late for one: newer
        scrapes of the source are open already, as many as may be, or (close_on_newer) any."""
        group = src.open.get(ts)
        if group is None:
            cfg = self.config
            if (
                src.open
                and ts < max(src.open)
                and (cfg.close_on_newer or (len(src.open) >= cfg.max_open_per_source and ts < min(src.open)))
            ):
                return None
            if cfg.close_on_newer:
                for older in sorted(t for t in src.open if t < ts):
                    self._close(src, older)
            while len(src.open) >= cfg.max_open_per_source:
                self._close(src, min(src.open))
                self._count("closed_early")
            group = src.open[ts] = _Group(ts, now)
            self._active[src.key] = src
        group.last = now
        return group

    def _close(self, src: _Source, ts: int) -> None:
        group = src.open.pop(ts)
        if not src.open:
            self._active.pop(src.key, None)
        self.pending_samples -= len(group.series)
        src.emitted_ms = ts if src.emitted_ms is None else max(src.emitted_ms, ts)
        self._closed.append((src, group))

    def _bound_pending(self) -> None:
        if self.pending_samples <= self.config.max_pending_samples:
            return
        # the oldest open scrapes (first sample received), a bounded number of rounds
        candidates = sorted(
            ((g.first, src, ts) for src in self._active.values() for ts, g in src.open.items()), key=lambda c: c[0]
        )
        for _, src, ts in candidates:
            if self.pending_samples <= self.config.max_pending_samples:
                break
            for older in sorted(t for t in src.open if t <= ts):
                self._close(src, older)
                self._count("closed_early")

    @property
    def open_scrapes(self) -> int:
        """Scrapes waiting for more of their samples."""
        return sum(len(src.open) for src in self._active.values())

    @property
    def source_count(self) -> int:
        """Sources whose state (latest scrape, interval) is kept."""
        return len(self._sources)

    # -- out -------------------------------------------------------------------------------------------------

    def ready(self, now: float) -> list[ScrapeRecord | Forget]:
        """What is complete by `now`: each source's settled scrapes (and any older ones) as records, in
        timestamp order per source, and the sources to forget."""
        settle = self.config.settle_s
        for src in list(self._active.values()):
            settled = [ts for ts, g in src.open.items() if now - g.last >= settle]
            if settled:
                newest = max(settled)
                for ts in sorted(t for t in src.open if t <= newest):
                    self._close(src, ts)
        return self._take()

    def drain(self) -> list[ScrapeRecord | Forget]:
        """Everything still open, as records (at shutdown)."""
        for src in list(self._active.values()):
            for ts in sorted(src.open):
                self._close(src, ts)
        return self._take()

    def _take(self) -> list[ScrapeRecord | Forget]:
        out: list[ScrapeRecord | Forget] = []
        closed, self._closed = self._closed, []
        for item in closed:
            if isinstance(item, Forget):
                out.append(item)
            else:
                out.extend(self._emit(*item))
        return out

    def _interval_of(self, src: _Source, ts: int) -> float | None:
        """The source's configured interval, else the shortest of its last 8 gaps between scrapes (a missed
        scrape makes one gap longer, never the estimate), None before its second scrape."""
        if src.prev_ms is not None and ts > src.prev_ms:
            src.diffs.append(ts - src.prev_ms)
        src.prev_ms = ts
        configured = self.config.interval_s.get(src.key[1])
        if configured is not None:
            return configured
        return min(src.diffs) / 1000 if src.diffs else None

    def _emit(self, src: _Source, group: _Group) -> Iterator[ScrapeRecord | Forget]:
        node, source, common = src.key
        labels = dict(common)
        if not group.series and group.up is None and group.gone:
            if not src.open and self._sources.get(src.key) is src:
                del self._sources[src.key]
            self._count("sources_gone")
            yield Forget(node, source, labels)
            return
        if not group.series and group.up is None:
            self._count("empty_scrapes")  # stale markers only
            return
        if not group.series and group.up != 0 and self.config.known_only:
            self._count("empty_scrapes")
            return
        interval = self._interval_of(src, group.ts_ms)
        common_args = dict(ts=group.ts_ms / 1000, node=node, job=source, labels=labels, interval_s=interval)
        self._count("scrapes")
        if group.overflow:
            yield ScrapeRecord(**common_args, error=f"more than {self.config.max_group_series} series in one scrape")
            return
        if not group.series and group.up == 0:
            yield ScrapeRecord(**common_args, error=TARGET_DOWN)
            return
        values, metadata, catalog = group.series, self.metadata, self.catalog

        def text() -> str:
            return render({(i.name, i.labels): v for i, v in values.items()}, source, metadata, catalog)

        lay = self._layout(src, group)
        if lay is None:  # a series the parser may refuse, or near its limits: the parser decides
            yield ScrapeRecord(**common_args, body=text())
            return
        yield GroupedRecord(ScrapeRecord(**common_args), families_of(lay, values), text)

    def _layout(self, src: _Source, group: _Group) -> Layout | None:
        """The families of the group's series; the source's last one when the series and metadata are the same."""
        key = (frozenset(group.series), self._metadata_version)
        if key != src.layout_key:
            src.layout_key, src.layout = key, layout(group.series, src.key[1], self.metadata, self.catalog)
        return src.layout
