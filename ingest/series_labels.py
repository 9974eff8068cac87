"""What a remote-write series' labels say: the scrape it belongs to (node, source, common labels) and its own labels.

Prometheus adds the target's labels (``job``, ``instance``, relabelled ones such as ``node``, the
``external_labels``) to every series of a scrape. :func:`parse_labels` reads off them, as
:class:`GroupingConfig` says,

- the **node**: the first of :attr:`GroupingConfig.node_labels` the series has (``node``, ``Hostname``,
  ``instance`` by default); ``instance`` is a target address, so its port is cut (``10.0.0.5:9400`` ->
  ``10.0.0.5``, ``[::1]:8000`` -> ``::1``; a blackbox probe's URL -> its host, as the agent names the node
  of a probe after the probed host: :func:`host_of`);
- the **source**: the ``job`` label (:attr:`GroupingConfig.source_label`), renamed by
  :attr:`GroupingConfig.sources` (``{"dcgm-exporter": "dcgm"}``); an unknown job stays its own source;
- the **common labels**: those of :attr:`GroupingConfig.common_labels` it has (``instance`` by default, as
  the agent's scrape collector adds it; add ``cluster`` and relabelled target labels there), taken off the
  sample and made the record's labels, so that two servers of one job on one node stay two sources;

or why the series is left out (no name, no source or node, labels over the snapshot's limits). The grouping
into scrapes is :mod:`tailhound.ingest.grouping`'s (which re-exports :class:`GroupingConfig`).
"""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from tailhound.catalog import Catalog
from tailhound.durations import Duration
from tailhound.ingest.exposition_render import HIST_PARTS
from tailhound.ingest.remote_write_messages import Labels
from tailhound.snapshot import LIMITS

#: The series Prometheus writes about each scrape (``up`` is read, the others left out unless kept).
SYNTHETIC = frozenset(
    {
        "up",
        "scrape_duration_seconds",
        "scrape_samples_scraped",
        "scrape_samples_post_metric_relabeling",
        "scrape_series_added",
        "scrape_timeout_seconds",
        "scrape_sample_limit",
        "scrape_body_size_bytes",
    }
)
SOURCE_RE = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")  # Snapshot.source


class GroupingConfig(BaseModel):
    """How remote-write series become per-scrape records (defaults: plain Prometheus scrape configs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node_labels: tuple[str, ...] = Field(
        default=("node", "Hostname", "instance"),
        min_length=1,
        description="Labels naming the node, tried in order; `instance` loses its port (host:port -> host).",
    )
    source_label: str = Field(default="job", description="The label naming the source (the agent's `job`).")
    sources: dict[str, str] = Field(
        default_factory=dict, description="Job -> source (`dcgm-exporter: dcgm`); other jobs are their own."
    )
    common_labels: tuple[str, ...] = Field(
        default=("instance",), description="Target labels taken off the samples into the snapshot's labels."
    )
    drop_labels: tuple[str, ...] = Field(default=(), description="Labels removed from the samples.")
    known_only: bool = Field(default=False, description="Drop series the catalog does not map, before grouping.")
    keep_synthetic: bool = Field(default=False, description="Keep scrape_duration_seconds & co. as samples.")
    interval_s: dict[str, Duration] = Field(
        default_factory=dict, description="Source -> scrape interval; others are estimated from the timestamps."
    )
    settle_s: Duration = Field(
        default=5.0, ge=0, le=600, description="A scrape is complete when nothing came for it for this long."
    )
    close_on_newer: bool = Field(
        default=False,
        description="A newer scrape of a source closes the older ones "
        "at once (one shard, or federation: scrapes arrive whole and in order).",
    )
    max_open_per_source: int = Field(default=8, ge=1, description="Scrapes of one source open at once.")
    max_pending_samples: int = Field(default=500_000, ge=1, description="Samples held in open scrapes.")
    max_group_series: int = Field(default=100_000, ge=1, description="Series in one scrape (the agent parser's).")
    max_sources: int = Field(default=20_000, ge=1, description="Sources (node, source, common labels) remembered.")
    max_metadata: int = Field(default=50_000, ge=0, description="Metric families whose TYPE is remembered.")


DEFAULT_GROUPING = GroupingConfig()

SourceKey = tuple[str, str, Labels]  # (node, source, common label items)


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


class ParsedSeries(NamedTuple):
    """What a series' labels say, worked out once per label set (scrapes repeat the same series)."""

    key: SourceKey | None  # None: left out (see `reject`, or dropped on purpose when reject is None)
    name: str
    labels: Labels  # the sample's own labels
    reject: tuple[str, str] | None  # (kind, reason)


def parse_labels(labels: Labels, config: GroupingConfig, catalog: Catalog) -> ParsedSeries:
    """The source key (node, source, common labels), name and own labels of a series with `labels`, or
    why it is left out (``config.known_only``: series the catalog does not map, without a reason)."""
    cfg = config
    d = dict(labels)
    if len(d) != len(labels):
        return ParsedSeries(None, d.get("__name__", ""), (), ("duplicate_label", "a series has the same label twice"))
    name = d.pop("__name__", "")
    if not name:
        return ParsedSeries(None, name, (), ("no_name", "a series without __name__"))
    job = d.get(cfg.source_label)
    if not job:
        return ParsedSeries(None, name, (), ("no_source", f"a series without the {cfg.source_label!r} label"))
    source = cfg.sources.get(job, job)
    if not SOURCE_RE.match(source):
        return ParsedSeries(
            None,
            name,
            (),
            (
                "bad_source",
                f"source {source[:60]!r} (job {job[:60]!r}) is not a "
                "source name ([a-z][a-z0-9_-]{0,39}): map it in `sources`",
            ),
        )
    node = None
    for label in cfg.node_labels:
        value = d.get(label)
        if value:
            node = host_of(value) if label == "instance" else value
            break
    if node is None:
        return ParsedSeries(None, name, (), ("no_node", f"a series without any of the node labels {cfg.node_labels}"))
    if not _node_ok(node):
        return ParsedSeries(None, name, (), ("bad_node", f"node {node[:60]!r}: 1-200 characters without blanks"))
    if name not in SYNTHETIC or cfg.keep_synthetic:
        if len(name) > 200:
            return ParsedSeries(
                None, name, (), ("label_limits", f"metric name of {len(name)} characters (at most 200)")
            )
        if cfg.known_only and not _known(catalog, source, name):
            return ParsedSeries(None, name, (), None)
    common = tuple((k, d[k]) for k in cfg.common_labels if k in d)
    drop = {cfg.source_label, *cfg.common_labels, *cfg.drop_labels}
    own = tuple((k, v) for k, v in labels if k not in drop and k != "__name__")
    if len(own) > LIMITS.max_labels:
        return ParsedSeries(None, name, (), ("label_limits", f"{len(own)} labels (at most {LIMITS.max_labels})"))
    for k, v in (*own, *common):
        if len(k) > LIMITS.max_label_name or len(v) > LIMITS.max_label_value:
            return ParsedSeries(
                None,
                name,
                (),
                (
                    "label_limits",
                    f"label {k[:60]!r}: names of at most "
                    f"{LIMITS.max_label_name} and values of at most "
                    f"{LIMITS.max_label_value} characters",
                ),
            )
    return ParsedSeries((node, source, common), name, own, None)


def _known(catalog: Catalog, source: str, name: str) -> bool:
    by_metric = catalog.by_metric
    if (source, name) in by_metric:
        return True
    return any(name.endswith(suffix) and (source, name[: -len(suffix)]) in by_metric for suffix in HIST_PARTS)
