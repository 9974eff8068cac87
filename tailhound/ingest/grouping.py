"""Remote-write series -> one scrape record per scrape: (node, source, target labels, timestamp).

Prometheus stamps every sample of one scrape of one target with the same timestamp, and adds the target's
labels (``job``, ``instance``, relabelled ones such as ``node``, the ``external_labels``) to every series.
:class:`Grouper` files each sample under

- its **node**: the first of :attr:`GroupingConfig.node_labels` the series has (``node``, ``Hostname``,
  ``instance`` by default); ``instance`` is a target address, so its port is cut (``10.0.0.5:9400`` ->
  ``10.0.0.5``, ``[::1]:8000`` -> ``::1``; a blackbox probe's URL -> its host, as the agent names the node
  of a probe after the probed host);
- its **source**: the ``job`` label (:attr:`GroupingConfig.source_label`), renamed by
  :attr:`GroupingConfig.sources` (``{"dcgm-exporter": "dcgm"}``); an unknown job stays its own source;
- its **common labels**: those of :attr:`GroupingConfig.common_labels` it has (``instance`` by default, as
  the agent's scrape collector adds it; add ``cluster`` and relabelled target labels there), taken off the
  sample and made the record's labels, so that two servers of one job on one node stay two sources;
- its timestamp.

A group is one scrape. Remote write sends a scrape in one or more requests, and with several shards in no
particular order, so a group stays open until no sample came for it for :attr:`GroupingConfig.settle_s`
(Prometheus sends a partial batch after ``queue_config.batch_send_deadline``, 5 s by default); it then
becomes a :class:`~tailhound.recording.ScrapeRecord` whose body is the exposition text of its samples, with a
``# TYPE`` per family (from the metadata Prometheus sends, the catalog, or the names' conventions:
``_bucket`` with ``le``, ``_total``), so that the agent's :class:`~tailhound.agents.pipeline.SnapshotBuilder`
makes of it exactly the snapshot it makes of the page itself: same samples, deltas, resets, histograms,
sentinels and limits. A source's groups come out in timestamp order; a sample older than the source's
latest emitted group is late (counted, dropped: its deltas are already computed).

Prometheus' own series tell the rest: ``up 0`` (and the stale markers of every series) is a failed scrape
-> a record with ``error`` (the snapshot is a gap, as the agent's); a stale marker on ``up`` means the
target is gone -> :class:`Forget` (the builder's state of that source is dropped); the other
``scrape_*`` series are left out.

Bounded: open groups per source (:attr:`~GroupingConfig.max_open_per_source`), samples held in open groups
(:attr:`~GroupingConfig.max_pending_samples`; the oldest groups close early), series in one group
(:attr:`~GroupingConfig.max_group_series`, the agent parser's sample limit), sources remembered
(:attr:`~GroupingConfig.max_sources`; the least recently seen is forgotten), metadata families and the
per-series cache.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import NamedTuple
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from tailhound.agents.exposition_lines import NAME_RE
from tailhound.agents.render import format_value
from tailhound.catalog import Catalog, default_catalog
from tailhound.ingest.remote_write import Labels, Metadata, Series
from tailhound.recording import ScrapeRecord
from tailhound.snapshot import LIMITS

#: The series Prometheus writes about each scrape (``up`` is read, the others left out unless kept).
SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped",
                       "scrape_samples_post_metric_relabeling", "scrape_series_added", "scrape_timeout_seconds",
                       "scrape_sample_limit", "scrape_body_size_bytes"})
SOURCE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")  # Snapshot.source
_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_HIST_PARTS = ("_bucket", "_sum", "_count")
_MAX_CACHED_SERIES = 100_000  # label sets whose node, source and labels are known; rendered series
#: The error of the record of a failed scrape.
TARGET_DOWN = "target down: Prometheus could not scrape it (up == 0)"


class GroupingConfig(BaseModel):
    """How remote-write series become per-scrape records (defaults: plain Prometheus scrape configs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_labels: tuple[str, ...] = Field(
        default=("node", "Hostname", "instance"), min_length=1,
        description="Labels naming the node, tried in order; `instance` loses its port (host:port -> host).")
    source_label: str = Field(default="job", description="The label naming the source (the agent's `job`).")
    sources: dict[str, str] = Field(default_factory=dict,
                                    description="Job -> source (`dcgm-exporter: dcgm`); other jobs are their own.")
    common_labels: tuple[str, ...] = Field(
        default=("instance",), description="Target labels taken off the samples into the snapshot's labels.")
    drop_labels: tuple[str, ...] = Field(default=(), description="Labels removed from the samples.")
    known_only: bool = Field(default=False, description="Drop series the catalog does not map, before grouping.")
    keep_synthetic: bool = Field(default=False, description="Keep scrape_duration_seconds & co. as samples.")
    interval_s: dict[str, float] = Field(
        default_factory=dict, description="Source -> scrape interval; others are estimated from the timestamps.")
    settle_s: float = Field(default=5.0, ge=0, le=600,
                            description="A scrape is complete when nothing came for it for this long.")
    close_on_newer: bool = Field(default=False, description="A newer scrape of a source closes the older ones "
                                 "at once (one shard, or federation: scrapes arrive whole and in order).")
    max_open_per_source: int = Field(default=8, ge=1, description="Scrapes of one source open at once.")
    max_pending_samples: int = Field(default=500_000, ge=1, description="Samples held in open scrapes.")
    max_group_series: int = Field(default=100_000, ge=1, description="Series in one scrape (the agent parser's).")
    max_sources: int = Field(default=20_000, ge=1, description="Sources (node, source, common labels) remembered.")
    max_metadata: int = Field(default=50_000, ge=0, description="Metric families whose TYPE is remembered.")


DEFAULT_GROUPING = GroupingConfig()

SourceKey = tuple[str, str, Labels]  # (node, source, common label items)


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


def host_of(value: str) -> str:
    """The host of a target address: ``10.0.0.5:9400`` -> ``10.0.0.5``, ``[::1]:80`` -> ``::1``, a URL -> its
    host; anything else as it is."""
    if "://" in value:
        try:
            return urlsplit(value).hostname or value
        except ValueError:
            return value
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 1 else value
    host, sep, port = value.rpartition(":")
    if sep and host and ":" not in host and port.isdigit():
        return host
    return value


def _node_ok(node: str) -> bool:
    return 0 < len(node) <= 200 and not any(ch.isspace() for ch in node)


class _Group:
    __slots__ = ("ts_ms", "series", "up", "gone", "first", "last", "overflow")

    def __init__(self, ts_ms: int, now: float) -> None:
        self.ts_ms = ts_ms
        self.series: dict[tuple[str, Labels], float] = {}
        self.up: float | None = None
        self.gone = False  # a stale marker on `up`
        self.first = self.last = now
        self.overflow = False


class _Source:
    __slots__ = ("key", "open", "emitted_ms", "prev_ms", "diffs")

    def __init__(self, key: SourceKey) -> None:
        self.key = key
        self.open: dict[int, _Group] = {}
        self.emitted_ms: int | None = None
        self.prev_ms: int | None = None  # the latest scrape made into a record
        self.diffs: deque[int] = deque(maxlen=8)


class _Parsed(NamedTuple):
    """What a series' labels say, worked out once per label set (scrapes repeat the same series)."""

    key: SourceKey | None  # None: left out (see `reject`, or dropped on purpose when reject is None)
    name: str
    labels: Labels  # the sample's own labels
    reject: tuple[str, str] | None  # (kind, reason)


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
        self._cache: dict[Labels, _Parsed] = {}
        self.metadata: dict[str, str] = {}  # family -> TYPE
        self.pending_samples = 0
        self.stats: dict[str, int] = {}

    # -- in --------------------------------------------------------------------------------------------------

    def _count(self, what: str, n: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + n

    def add_metadata(self, metadata: Iterable[Metadata]) -> None:
        """Remember the TYPE of each family (Prometheus sends metadata in requests of their own, every
        ``metadata_config.send_interval``, 1 min by default)."""
        meta, limit = self.metadata, self.config.max_metadata
        for m in metadata:
            if m.type == "unknown" or not m.family:
                continue
            if meta.get(m.family) == m.type:
                continue
            meta.pop(m.family, None)
            while meta and len(meta) >= limit:
                del meta[next(iter(meta))]
            if limit:
                meta[m.family] = m.type

    def _parse(self, labels: Labels) -> _Parsed:
        cfg = self.config
        d = dict(labels)
        if len(d) != len(labels):
            return _Parsed(None, d.get("__name__", ""), (), ("duplicate_label", "a series has the same label twice"))
        name = d.pop("__name__", "")
        if not name:
            return _Parsed(None, name, (), ("no_name", "a series without __name__"))
        job = d.get(cfg.source_label)
        if not job:
            return _Parsed(None, name, (), ("no_source", f"a series without the {cfg.source_label!r} label"))
        source = cfg.sources.get(job, job)
        if not SOURCE_RE.match(source):
            return _Parsed(None, name, (), ("bad_source", f"source {source[:60]!r} (job {job[:60]!r}) is not a "
                                            "source name ([a-z][a-z0-9_-]{0,39}): map it in `sources`"))
        node = None
        for label in cfg.node_labels:
            value = d.get(label)
            if value:
                node = host_of(value) if label == "instance" else value
                break
        if node is None:
            return _Parsed(None, name, (), ("no_node", f"a series without any of the node labels {cfg.node_labels}"))
        if not _node_ok(node):
            return _Parsed(None, name, (), ("bad_node", f"node {node[:60]!r}: 1-200 characters without blanks"))
        if name not in SYNTHETIC or cfg.keep_synthetic:
            if len(name) > 200:
                return _Parsed(None, name, (), ("label_limits", f"metric name of {len(name)} characters (at most "
                                                "200)"))
            if cfg.known_only and not self._known(source, name):
                return _Parsed(None, name, (), None)
        common = tuple((k, d[k]) for k in cfg.common_labels if k in d)
        drop = {cfg.source_label, *cfg.common_labels, *cfg.drop_labels}
        own = tuple((k, v) for k, v in labels if k not in drop and k != "__name__")
        if len(own) > LIMITS.max_labels:
            return _Parsed(None, name, (), ("label_limits", f"{len(own)} labels (at most {LIMITS.max_labels})"))
        for k, v in (*own, *common):
            if len(k) > LIMITS.max_label_name or len(v) > LIMITS.max_label_value:
                return _Parsed(None, name, (), ("label_limits", f"label {k[:60]!r}: names of at most "
                                                f"{LIMITS.max_label_name} and values of at most "
                                                f"{LIMITS.max_label_value} characters"))
        return _Parsed((node, source, common), name, own, None)

    def _known(self, source: str, name: str) -> bool:
        by_metric = self.catalog.by_metric
        if (source, name) in by_metric:
            return True
        return any(name.endswith(suffix) and (source, name[:-len(suffix)]) in by_metric for suffix in _HIST_PARTS)

    def add(self, series: Iterable[Series], now: float) -> list[SeriesReject]:
        """File the samples of `series` (one request's); returns the series left out as bad input, by kind."""
        cfg = self.config
        cache = self._cache
        rejects: dict[str, list] = {}
        n_late = n_samples = n_dropped = 0
        for s in series:
            parsed = cache.get(s.labels)
            if parsed is None:
                parsed = self._parse(s.labels)
                if len(cache) >= _MAX_CACHED_SERIES:
                    cache.clear()
                cache[s.labels] = parsed
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
            src = self._source(key)
            name = parsed.name
            synthetic = name in SYNTHETIC and not cfg.keep_synthetic
            for ts, value in s.samples:
                if src.emitted_ms is not None and ts <= src.emitted_ms:
                    n_late += 1
                    continue
                if ts <= 0:
                    entry = rejects.setdefault("bad_timestamp", ["a sample dated at or before 1970", 0, s.labels])
                    entry[1] += 1
                    continue
                group = self._group(src, ts, now)
                if group is None:
                    n_late += 1
                    continue
                if synthetic:
                    if name == "up":
                        group.up = value
                    continue
                k = (name, parsed.labels)
                if k not in group.series:
                    if group.overflow or len(group.series) >= cfg.max_group_series:
                        group.overflow = True
                        entry = rejects.setdefault("too_many_series", [
                            f"a scrape of {key[1]} on {key[0]} has more than {cfg.max_group_series} series", 0,
                            s.labels])
                        entry[1] += 1
                        continue
                    self.pending_samples += 1
                    n_samples += 1
                group.series[k] = value
            if name == "up" and s.stale:
                for ts in s.stale:
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
            if src.open and ts < max(src.open) and (cfg.close_on_newer or (
                    len(src.open) >= cfg.max_open_per_source and ts < min(src.open))):
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
        candidates = sorted(((g.first, src, ts) for src in self._active.values() for ts, g in src.open.items()),
                            key=lambda c: c[0])
        for _, src, ts in candidates:
            if self.pending_samples <= self.config.max_pending_samples:
                break
            for older in sorted(t for t in src.open if t <= ts):
                self._close(src, older)
                self._count("closed_early")

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
        yield ScrapeRecord(**common_args, body=render(group.series, source, self.metadata, self.catalog))


# -- families and exposition text ----------------------------------------------------------------------------


def family_types(names: Iterable[str], bucket_names: set[str], quantile_names: set[str], source: str,
                 metadata: dict[str, str], catalog: Catalog) -> dict[str, tuple[str, str]]:
    """Sample name -> (family, TYPE) for the samples of one scrape: from the metadata Prometheus sent
    (the TYPE lines it scraped), else the catalog's kind for the source, else the names' conventions
    (``x_bucket`` with an ``le`` label and its ``x_sum``/``x_count``: a histogram; ``x`` with ``quantile`` and its
    ``x_sum``/``x_count``: a summary; ``x_total``: a counter); else untyped (a gauge, unless the catalog makes
    it a counter)."""
    names = set(names)
    bucket_bases = {n[:-7] for n in bucket_names if n.endswith("_bucket")}
    out: dict[str, tuple[str, str]] = {}
    for n in names:
        out[n] = _family_type(n, bucket_bases, quantile_names, source, metadata, catalog)
    return out


def _family_type(n: str, bucket_bases: set[str], quantile_names: set[str], source: str, metadata: dict[str, str],
                 catalog: Catalog) -> tuple[str, str]:
    t = metadata.get(n)
    if t is not None and t not in ("histogram", "gaugehistogram"):
        return n, t
    for suffix in (*_HIST_PARTS, "_gsum", "_gcount"):
        if n.endswith(suffix):
            base = n[:-len(suffix)]
            bt = metadata.get(base)
            if bt in ("histogram", "gaugehistogram") or (bt == "summary" and suffix in ("_sum", "_count")):
                return base, bt
    for suffix in ("_total", "_created"):
        if n.endswith(suffix) and metadata.get(n[:-len(suffix)]) == "counter":
            return n[:-len(suffix)], "counter"
    kind = catalog.kind_of(source, n)
    if kind in ("counter", "gauge"):
        return n, kind
    for suffix in _HIST_PARTS:
        if n.endswith(suffix):
            base = n[:-len(suffix)]
            if catalog.kind_of(source, base) == "histogram" or base in bucket_bases:
                return base, "histogram"
            if suffix != "_bucket" and base in quantile_names:
                return base, "summary"
    if n in quantile_names:
        return n, "summary"
    if n.endswith("_total"):
        return n, "counter"
    return n, "untyped"


def _escape(v: str) -> str:
    if "\\" not in v and "\n" not in v and '"' not in v:
        return v
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _label_text(items: Labels) -> str:
    return ",".join(f'{k}="{_escape(v)}"' if _LABEL_RE.fullmatch(k) else f'"{_escape(k)}"="{_escape(v)}"'
                    for k, v in items)


#: (name, labels) -> the series' text up to its value: scrapes repeat the same series (bounded).
_HEADS: dict[tuple[str, Labels], str] = {}


def _line(name: str, items: Labels, value: float) -> str:
    key = (name, items)
    head = _HEADS.get(key)
    if head is None:
        if NAME_RE.fullmatch(name):
            head = f"{name}{{{_label_text(items)}}}" if items else name
        else:  # Prometheus 3's UTF-8 names: {"my.metric", a="b"}
            head = "{" + ",".join((f'"{_escape(name)}"', *([_label_text(items)] if items else []))) + "}"
        if len(_HEADS) >= _MAX_CACHED_SERIES:
            _HEADS.clear()
        _HEADS[key] = head
    return f"{head} {format_value(value)}"


def render(series: dict[tuple[str, Labels], float], source: str, metadata: dict[str, str],
           catalog: Catalog) -> str:
    """The exposition text of one scrape's samples: a ``# TYPE`` line per family (:func:`family_types`), the
    families in name order, their samples in (name, labels) order."""
    names = {n for n, _ in series}
    buckets = {n for n, items in series if n.endswith("_bucket") and any(k == "le" for k, _ in items)}
    quantiles = {n for n, items in series if any(k == "quantile" for k, _ in items)}
    types = family_types(names, buckets, quantiles, source, metadata, catalog)
    families: dict[str, tuple[str, list[tuple[str, Labels, float]]]] = {}
    for (n, items), value in series.items():
        fam, type_ = types[n]
        entry = families.get(fam)
        if entry is None:
            entry = families[fam] = (type_, [])
        entry[1].append((n, items, value))
    out: list[str] = []
    for fam in sorted(families):
        type_, samples = families[fam]
        shown = fam if NAME_RE.fullmatch(fam) else f'"{_escape(fam)}"'
        out.append(f"# TYPE {shown} {type_}")
        samples.sort(key=lambda s: (s[0], s[1]))
        out.extend(_line(n, items, v) for n, items, v in samples)
    return "\n".join(out) + ("\n" if out else "")
