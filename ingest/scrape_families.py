"""A scrape's samples straight into the families the agent's parser reads from its exposition text.

The agent's :class:`~tailhound.agents.snapshot_builder.SnapshotBuilder` takes a scrape's families; text written only
to be parsed again would cost more than the rest of the ingest. :func:`layout` files each series of a scrape
(:mod:`tailhound.ingest.grouping`) under the family the parser would file its line under in the text
:func:`~tailhound.ingest.exposition_render.render` writes (the ``# TYPE`` lines of
:func:`~tailhound.ingest.exposition_render.family_types`, families in name order, series in (name, labels)
order), and :class:`GroupedRecord` hands the families over as a native collector's record does.

Each distinct series is checked once (:class:`SeriesInfo`): its rendered line head goes through the parser's
own line reader, so names, labels, escapes and the line limits are the parser's. A scrape that holds a series
the parser would refuse, or that comes near the parser's sample or family limits, returns None: the caller
renders it and lets the parser decide, so the snapshot is the same either way. Values go through what the
text does to them (:func:`text_value`: only ``-0`` changes, to ``0``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tailhound.agents.collected import CollectedRecord
from tailhound.agents.exposition import Family, RawSample
from tailhound.agents.exposition_lines import DEFAULT_LIMITS, LineError, parse_sample, use_limits
from tailhound.catalog import Catalog
from tailhound.ingest.exposition_render import family_types, series_head
from tailhound.ingest.remote_write_messages import Labels
from tailhound.recording import ScrapeRecord

_TYPES = frozenset({"counter", "gauge", "histogram", "gaugehistogram", "summary", "untyped", "info", "stateset"})
_SUFFIXES = ("_bucket", "_sum", "_count", "_created", "_total", "_gcount", "_gsum")  # the parser's, in its order
_MAX_VALUE_TEXT = 32  # characters format_value writes at most, and the blank before them
_new_sample = tuple.__new__


class SeriesInfo:
    """One distinct series of a source (name and own labels), worked out once: what the parser reads off its
    line (``pname``, ``items``), or ``ok`` False when the parser would refuse it."""

    __slots__ = ("name", "labels", "pname", "items", "label_dict", "bucket", "quantile", "ok")

    def __init__(self, name: str, labels: Labels) -> None:
        self.name, self.labels = name, labels
        self.bucket = name.endswith("_bucket") and any(k == "le" for k, _ in labels)
        self.quantile = any(k == "quantile" for k, _ in labels)
        self.pname, self.items, self.ok = name, labels, False
        head = series_head(name, labels)
        if len(head) + _MAX_VALUE_TEXT <= DEFAULT_LIMITS.max_line_length:
            use_limits(DEFAULT_LIMITS)  # the line reader's cache holds label sets checked against these
            try:
                self.pname, self.items, _, _ = parse_sample(head + " 0", DEFAULT_LIMITS)
                self.ok = True
            except LineError:
                pass  # the scrape goes the text way, where the parser says why
        self.label_dict = dict(self.items)  # copied for each sample (copying a dict is cheaper than building it)

    def __repr__(self) -> str:
        return f"SeriesInfo({self.name!r}, {self.labels!r})"


Layout = list[tuple[str, str, list[SeriesInfo]]]  # (family, TYPE, its series in line order), in family order


def text_value(v: float) -> float:
    """What a value reads back as from the text format_value writes (``-0`` is written ``0``)."""
    return 0.0 if v == 0 else v


def _family_of(name: str, families: dict[str, list], order: list[str]) -> list:
    """The parser's family of a sample line named `name`: its own, else the one its suffix points at, else new."""
    fam = families.get(name)
    if fam is not None:
        return fam
    for suffix in _SUFFIXES:
        base = name.removesuffix(suffix)
        if base != name and base in families:
            return families[base]
    fam = families[name] = ["untyped", []]
    order.append(name)
    return fam


def layout(infos: Iterable[SeriesInfo], source: str, metadata: dict[str, str], catalog: Catalog) -> Layout | None:
    """The families the parser makes of the rendered text of a scrape with these series (values aside), or
    None when the text must decide (a series it refuses, near its limits, an unknown TYPE)."""
    infos = list(infos)
    names = {i.name for i in infos}
    lim = DEFAULT_LIMITS
    # every family is a TYPE line's or a sample name's: at most twice the names
    if len(infos) >= lim.max_samples or 2 * len(names) >= lim.max_families or not all(i.ok for i in infos):
        return None
    types = family_types(
        names, {i.name for i in infos if i.bucket}, {i.name for i in infos if i.quantile}, source, metadata, catalog
    )
    grouped: dict[str, tuple[str, list[SeriesInfo]]] = {}
    for i in infos:
        fam, type_ = types[i.name]
        entry = grouped.get(fam)
        if entry is None:
            entry = grouped[fam] = (type_, [])
        entry[1].append(i)
    families: dict[str, list] = {}  # the parser's: name -> [TYPE, series], in order of creation
    order: list[str] = []
    family_of: dict[str, list] = {}  # sample name -> family, memoised as the parser does
    for fam in sorted(grouped):
        type_, members = grouped[fam]
        if type_ not in _TYPES:
            return None
        entry = families.get(fam)
        if entry is None:  # a TYPE line names its family exactly
            entry = families[fam] = ["untyped", []]
            order.append(fam)
        entry[0] = type_
        members.sort(key=lambda i: (i.name, i.labels))
        for i in members:
            target = family_of.get(i.pname)
            if target is None:
                target = family_of[i.pname] = _family_of(i.pname, families, order)
            target[1].append(i)
    return [(name, families[name][0], families[name][1]) for name in order if families[name][1]]


def families_of(lay: Layout, values: dict[SeriesInfo, float]) -> list[Family]:
    """One scrape's families, as the parser gives them: fresh label dicts, the values as the text reads."""
    new, raw, get = _new_sample, RawSample, values.__getitem__
    return [
        Family(
            name,
            type_,
            "",
            [new(raw, (i.pname, i.label_dict.copy(), 0.0 if (v := get(i)) == 0 else v)) for i in members],
        )
        for name, type_, members in lay
    ]


class GroupedRecord(CollectedRecord):
    """A grouped scrape for the builder: its header, its families, and its text only if something asks
    (``body``: a dead letter, a recording, a test)."""

    __slots__ = ("_families", "_text")

    def __init__(self, header: ScrapeRecord, families: list[Family], text: Callable[[], str]) -> None:
        self.header, self.writer, self._body = header, None, None
        self._families, self._text = families, text

    @property
    def body(self) -> str:
        if self._body is None:
            self._body = self._text()
        return self._body

    def families(self, entries_as_samples: bool = False) -> list[Family]:
        return self._families

    def with_header(self, **update: object) -> GroupedRecord:
        """The same scrape with other header fields (``interval_s``, ``labels``)."""
        return GroupedRecord(self.header.model_copy(update=update), self._families, self._text)

    def with_labels(self, labels: dict[str, str]) -> GroupedRecord:
        return self.with_header(labels=labels)

    def __repr__(self) -> str:
        return f"GroupedRecord({self.header!r})"
