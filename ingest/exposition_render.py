"""A scrape's samples back into exposition text, a ``# TYPE`` line per family.

A group of remote-write samples (one scrape, :mod:`tailhound.ingest.grouping`) becomes the body of a
:class:`~tailhound.recording.ScrapeRecord`: the exposition text of its samples, with a ``# TYPE`` per family
(:func:`family_types`: from the metadata Prometheus sends, the catalog, or the names' conventions: ``_bucket``
with ``le``, ``_total``), so that the agent's :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` parses it
as it parses the page itself. Names and label values are escaped as the text format wants; Prometheus 3's
UTF-8 names are written quoted (``{"my.metric", a="b"}``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tailhound.agents.exposition_lines import NAME_RE
from tailhound.agents.render import format_value
from tailhound.catalog import Catalog
from tailhound.ingest.remote_write_messages import Labels

_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
#: The suffixes of a histogram's (or summary's) series besides the family's own name.
HIST_PARTS = ("_bucket", "_sum", "_count")
_MAX_CACHED_SERIES = 100_000  # rendered series


def family_types(
    names: Iterable[str],
    bucket_names: set[str],
    quantile_names: set[str],
    source: str,
    metadata: dict[str, str],
    catalog: Catalog,
) -> dict[str, tuple[str, str]]:
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


def _family_type(
    n: str, bucket_bases: set[str], quantile_names: set[str], source: str, metadata: dict[str, str], catalog: Catalog
) -> tuple[str, str]:
    t = metadata.get(n)
    if t is not None and t not in ("histogram", "gaugehistogram"):
        return n, t
    for suffix in (*HIST_PARTS, "_gsum", "_gcount"):
        if n.endswith(suffix):
            base = n[: -len(suffix)]
            bt = metadata.get(base)
            if bt in ("histogram", "gaugehistogram") or (bt == "summary" and suffix in ("_sum", "_count")):
                return base, bt
    for suffix in ("_total", "_created"):
        if n.endswith(suffix) and metadata.get(n[: -len(suffix)]) == "counter":
            return n[: -len(suffix)], "counter"
    kind = catalog.kind_of(source, n)
    if kind in ("counter", "gauge"):
        return n, kind
    for suffix in HIST_PARTS:
        if n.endswith(suffix):
            base = n[: -len(suffix)]
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
    return ",".join(
        f'{k}="{_escape(v)}"' if _LABEL_RE.fullmatch(k) else f'"{_escape(k)}"="{_escape(v)}"' for k, v in items
    )


#: (name, labels) -> the series' text up to its value: scrapes repeat the same series (bounded).
_HEADS: dict[tuple[str, Labels], str] = {}


def series_head(name: str, items: Labels) -> str:
    """A series' text up to its value: ``name{a="b"}``, or quoted for a UTF-8 name."""
    if NAME_RE.fullmatch(name):
        return f"{name}{{{_label_text(items)}}}" if items else name
    # Prometheus 3's UTF-8 names: {"my.metric", a="b"}
    return "{" + ",".join((f'"{_escape(name)}"', *([_label_text(items)] if items else []))) + "}"


def _line(name: str, items: Labels, value: float) -> str:
    key = (name, items)
    head = _HEADS.get(key)
    if head is None:
        head = series_head(name, items)
        if len(_HEADS) >= _MAX_CACHED_SERIES:
            _HEADS.clear()
        _HEADS[key] = head
    return f"{head} {format_value(value)}"


def render(series: dict[tuple[str, Labels], float], source: str, metadata: dict[str, str], catalog: Catalog) -> str:
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
