"""A grouped scrape's families, built without text, equal what the agent's parser reads from its rendered text.

The grouping hands the builder families (GroupedRecord); ``rec.body`` is the text the same scrape renders to.
Every fixture page (with and without the metadata Prometheus sends) and a set of awkward series (escapes,
UTF-8 names, family names that collide, -0, NaN, infinities) must give the parser's families exactly; a series
the parser refuses sends its scrape the text way.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tailhound.agents.exposition import parse_exposition
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.ingest import grouping as grouping_module
from tailhound.ingest.grouping import Forget, Grouper, GroupingConfig
from tailhound.ingest.remote_write import Metadata, Series, series_from_exposition
from tailhound.ingest.scrape_families import GroupedRecord, text_value
from tailhound.recording import ScrapeRecord

AGENT_FIXTURES = Path(__file__).parents[1] / "agents" / "fixtures"
PAGES = sorted(p.name for p in AGENT_FIXTURES.glob("*.prom"))
T0 = 1_700_000_000_000
TARGET = {"job": "vllm", "instance": "10.0.0.5:8000"}


def comparable(families) -> list:
    """Families as plain values (NaN made comparable)."""
    return [
        (f.name, f.type, [(s.name, s.labels, "NaN" if math.isnan(s.value) else s.value) for s in f.samples])
        for f in families
    ]


def one_scrape(series: list[Series], metadata: list[Metadata] = ()) -> GroupedRecord | ScrapeRecord:
    g = Grouper(GroupingConfig(node_labels=("instance",)))  # one node, whatever Hostname labels say
    g.add_metadata(metadata)
    assert g.add(series, now=0) == []
    (rec,) = [r for r in g.drain() if not isinstance(r, Forget)]
    return rec


@pytest.mark.parametrize("with_metadata", [True, False])
@pytest.mark.parametrize("page_name", PAGES)
def test_every_fixture_page_gives_the_parsers_families(page_name, with_metadata):
    stored = series_from_exposition((AGENT_FIXTURES / page_name).read_text(), TARGET, T0)
    rec = one_scrape(stored.series, stored.metadata if with_metadata else [])
    assert isinstance(rec, GroupedRecord)
    assert comparable(rec.families()) == comparable(parse_exposition(rec.body))


def s(name: str, value: float, **labels: str) -> Series:
    return Series(tuple(sorted({**TARGET, **labels, "__name__": name}.items())), ((T0, value),))


AWKWARD = [
    s("esc", 1.0, path='a"b\\c\nd', empty_ok="x"),
    s("my.metric", 2.0, **{"http.status": "200"}),  # Prometheus 3's UTF-8 names
    s("neg_zero", -0.0),
    s("a_nan", math.nan),
    s("pos_inf", math.inf),
    s("neg_inf", -math.inf),
    s("big", 1e300),
    s("tiny", 5e-324),
    s("integral", 123456789012345.0),
    s("lat_bucket", 1.0, le="0.1"),
    s("lat_bucket", 3.0, le="+Inf"),
    s("lat_sum", 0.4),
    s("lat_count", 3.0),
    s("lat_count_gauge_count", 7.0),
    s("x", 1.0),
    s("x_total", 5.0),
    s("x_created", 1.7e9),
    s("req_total", 9.0),
    s("req_created", 1.6e9),
    s("q", 0.5, quantile="0.5"),
    s("q_sum", 2.0),
    s("q_count", 4.0),
    s("fam", 1.0),
    s("fam_count", 2.0),
    s("fam_bucket", 3.0),
]


@pytest.mark.parametrize(
    "metadata",
    [
        [],
        [
            Metadata("fam_count", "gauge", "", ""),
            Metadata("lat", "histogram", "", ""),
            Metadata("req", "counter", "", ""),
            Metadata("x", "gauge", "", ""),
            Metadata("q", "summary", "", ""),
            Metadata("fam", "info", "", ""),
        ],
    ],
)
def test_awkward_series_give_the_parsers_families(metadata):
    rec = one_scrape(AWKWARD, metadata)
    assert isinstance(rec, GroupedRecord)
    assert comparable(rec.families()) == comparable(parse_exposition(rec.body))
    neg_zero = next(x for f in rec.families() for x in f.samples if x.name == "neg_zero")
    assert math.copysign(1, neg_zero.value) == 1 and text_value(-0.0) == 0.0  # as "0" reads back


def test_a_series_the_parser_refuses_sends_its_scrape_the_text_way():
    """An empty label name is valid protobuf; the text parser drops that series' family, keeping the rest."""
    bad = Series(tuple(sorted({**TARGET, "__name__": "odd", "": "v"}.items())), ((T0, 1.0),))
    rec = one_scrape([s("vllm:num_requests_running", 2.0), bad])
    assert type(rec) is ScrapeRecord
    snap = SnapshotBuilder().build(rec)
    assert [x.name for x in snap.samples] == ["vllm:num_requests_running"]


def test_the_families_follow_metadata_and_an_earlier_record_keeps_its_own():
    g = Grouper(GroupingConfig())
    g.add([s("jobs", 1.0)], now=0)
    (first,) = g.drain()
    g.add_metadata([Metadata("jobs", "counter", "", "")])
    g.add([Series(s("jobs", 2.0).labels, ((T0 + 15_000, 2.0),))], now=15)
    (second,) = g.drain()
    assert [f.type for f in first.families()] == ["untyped"] and "# TYPE jobs untyped" in first.body
    assert [f.type for f in second.families()] == ["counter"] and "# TYPE jobs counter" in second.body


def test_emptied_caches_keep_one_entry_per_series_in_an_open_scrape(monkeypatch):
    monkeypatch.setattr(grouping_module, "_MAX_CACHED_SERIES", 2)
    g = Grouper(GroupingConfig())
    names = [f"m{i}" for i in range(5)]
    g.add([s(n, 1.0) for n in names], now=0)
    # the same series again, as new label-set objects, after the caches were emptied: the same scrape's
    g.add([Series(tuple(x for x in s(n, 2.0).labels), ((T0, 2.0),)) for n in names], now=1)
    assert g.pending_samples == 5
    (rec,) = g.drain()
    assert sorted((f.name, f.samples[0].value) for f in rec.families()) == [(n, 2.0) for n in names]


def test_series_of_open_scrapes_do_not_make_every_new_label_set_empty_the_caches(monkeypatch):
    """Open scrapes keep their series through a forget; they must not count towards the next one."""
    monkeypatch.setattr(grouping_module, "_MAX_CACHED_SERIES", 4)
    g = Grouper(GroupingConfig())
    forgets = []
    forget = g._forget_series
    monkeypatch.setattr(g, "_forget_series", lambda: (forgets.append(1), forget()))
    g.add([s(f"open{i}", 1.0) for i in range(8)], now=0)  # one open scrape of 8 series
    before = len(forgets)
    g.add([s(f"new{i}", 1.0) for i in range(12)], now=1)
    assert len(forgets) - before <= 12 // 4 + 1  # once per cache-full of new label sets, not once per label set
    (rec,) = g.drain()
    assert len(rec.families()) == 20
