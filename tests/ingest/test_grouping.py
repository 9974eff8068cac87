"""Remote-write series -> per-scrape records: node, source, common labels, settling, order, bounds, TYPEs."""

from __future__ import annotations

import pytest

from tailhound.agents.exposition import parse_exposition
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.ingest.grouping import (
    TARGET_DOWN,
    Forget,
    Grouper,
    GroupingConfig,
    family_types,
    host_of,
    render,
)
from tailhound.ingest.remote_write import Metadata, Series
from tailhound.recording import ScrapeRecord

T0 = 1_700_000_000_000


def s(name: str, value: float | None = 1.0, ts: int = T0, *, stale: bool = False, **labels: str) -> Series:
    labels.setdefault("job", "vllm")
    labels.setdefault("instance", "10.0.0.5:8000")
    items = tuple(sorted({**labels, "__name__": name}.items()))
    return Series(items, () if value is None else ((ts, value),), (ts,) if stale else ())


def scrape(ts: int = T0, up: float = 1.0, **labels: str) -> list[Series]:
    return [
        s("vllm:num_requests_running", 3.0, ts, engine="0", **labels),
        s("vllm:prompt_tokens_total", 100.0 + ts - T0, ts, engine="0", **labels),
        s("up", up, ts, **labels),
        s("scrape_duration_seconds", 0.01, ts, **labels),
    ]


def records(items) -> list[ScrapeRecord]:
    return [i for i in items if not isinstance(i, Forget)]


def test_host_of():
    assert host_of("10.0.0.5:9400") == "10.0.0.5"
    assert host_of("gpu-node-1:9100") == "gpu-node-1"
    assert host_of("[fe80::1]:8000") == "fe80::1"
    assert host_of("fe80::1") == "fe80::1"  # a bare IPv6 address has no port
    assert host_of("gpu-node-1") == "gpu-node-1"
    assert host_of("https://inference.example.com:8443/health") == "inference.example.com"
    assert host_of("http://[::1]:80/") == "::1"
    assert host_of("host:notaport") == "host:notaport"


def test_a_scrape_becomes_one_record_once_it_settled():
    g = Grouper(GroupingConfig(settle_s=5))
    assert g.add(scrape(), now=100.0) == []
    assert g.ready(now=104.9) == []
    (rec,) = g.ready(now=105.0)
    assert (rec.node, rec.job, rec.ts, rec.labels, rec.error) == (
        "10.0.0.5",
        "vllm",
        T0 / 1000,
        {"instance": "10.0.0.5:8000"},
        None,
    )
    samples = {(f.name, f.type): [x.labels for x in f.samples] for f in parse_exposition(rec.body)}
    assert samples == {
        ("vllm:num_requests_running", "gauge"): [{"engine": "0"}],
        ("vllm:prompt_tokens_total", "counter"): [{"engine": "0"}],
    }  # job, instance, up ... gone
    assert g.ready(now=1000.0) == [] and g.pending_samples == 0


def test_a_scrape_split_over_requests_stays_one_group_and_arrival_keeps_it_open():
    g = Grouper(GroupingConfig(settle_s=5))
    first, second = scrape()[:2], scrape()[2:]
    g.add(first, now=100.0)
    g.add(second, now=104.0)
    assert g.ready(now=108.0) == []  # 4 s after the last part
    (rec,) = g.ready(now=109.0)
    assert len(parse_exposition(rec.body)) == 2


def test_node_labels_are_tried_in_order():
    cfg = GroupingConfig(settle_s=0)
    g = Grouper(cfg)
    g.add(
        [
            s("a", node="n1", Hostname="h1"),
            s("b", Hostname="h1", job="dcgm"),
            s("c", job="node"),
            s("d", job="blackbox", instance="https://api.example.com/v1/health"),
        ],
        now=0,
    )
    assert sorted((r.node, r.job) for r in records(g.ready(now=0))) == [
        ("10.0.0.5", "node"),
        ("api.example.com", "blackbox"),
        ("h1", "dcgm"),
        ("n1", "vllm"),
    ]
    g = Grouper(GroupingConfig(settle_s=0, node_labels=("kubernetes_node",)))
    rejects = g.add([s("a", kubernetes_node="k8s-7"), s("b")], now=0)
    assert [r.node for r in records(g.ready(now=0))] == ["k8s-7"]
    assert [(r.kind, r.count) for r in rejects] == [("no_node", 1)]


def test_sources_come_from_job_mapped_or_not():
    g = Grouper(GroupingConfig(settle_s=0, sources={"dcgm-exporter": "dcgm", "Kube Pods": "vllm"}))
    rejects = g.add(
        [
            s("a", job="dcgm-exporter"),
            s("b", job="my-engine"),
            s("c", job="Kube Pods"),
            s("d", job="Bad Job"),
            Series((("__name__", "e"), ("instance", "h:1")), ((T0, 1.0),)),
        ],
        now=0,
    )
    assert sorted(r.job for r in records(g.ready(now=0))) == ["dcgm", "my-engine", "vllm"]
    assert sorted((r.kind, r.count) for r in rejects) == [("bad_source", 1), ("no_source", 1)]


def test_common_labels_split_sources_and_dropped_labels_go():
    g = Grouper(GroupingConfig(settle_s=0, common_labels=("instance", "cluster"), drop_labels=("pod",)))
    g.add([s("a", cluster="c1", pod="p"), s("a", instance="10.0.0.5:8001", cluster="c1", pod="p")], now=0)
    recs = records(g.ready(now=0))
    assert sorted(tuple(sorted(r.labels.items())) for r in recs) == [
        (("cluster", "c1"), ("instance", "10.0.0.5:8000")),
        (("cluster", "c1"), ("instance", "10.0.0.5:8001")),
    ]
    assert {r.node for r in recs} == {"10.0.0.5"}
    for r in recs:
        assert parse_exposition(r.body)[0].samples[0].labels == {}


def test_bad_series_are_rejected_once_per_kind_with_an_example():
    g = Grouper(GroupingConfig(settle_s=0))
    bad = [
        Series((("__name__", "x"), ("job", "vllm"), ("job", "vllm"))),  # duplicate label
        Series((("job", "vllm"), ("instance", "h:1")), ((T0, 1.0),)),  # no __name__
        s("y", node="has space"),
        s("z", long="v" * 5000),
        s("z", long="w" * 5000),
        s("n" * 201),
        s("t", 1.0, ts=-5),
    ]
    rejects = {r.kind: r for r in g.add(bad, now=0)}
    assert {k: r.count for k, r in rejects.items()} == {
        "duplicate_label": 1,
        "no_name": 1,
        "bad_node": 1,
        "label_limits": 3,
        "bad_timestamp": 1,
    }
    assert dict(rejects["label_limits"].example)["__name__"] == "z"
    assert g.stats["rejected_label_limits"] == 3


def test_scrapes_come_out_in_timestamp_order_per_source_and_late_samples_are_dropped():
    g = Grouper(GroupingConfig(settle_s=5))
    g.add(scrape(T0 + 5000), now=100.0)
    g.add(scrape(T0), now=101.0)  # an older scrape (another shard) arrives later
    g.add(scrape(T0 + 10_000), now=103.0)
    out = records(g.ready(now=105.5))  # T0+5000 settled: T0, older, goes out first
    assert [r.ts * 1000 for r in out] == [T0, T0 + 5000]
    g.add(scrape(T0 + 2000), now=106.0)  # older than what went out: late (its 4 samples)
    assert g.stats["late_samples"] == 4
    assert [r.ts * 1000 for r in records(g.ready(now=200.0))] == [T0 + 10_000]


def test_close_on_newer_closes_at_once():
    g = Grouper(GroupingConfig(settle_s=60, close_on_newer=True))
    g.add(scrape(T0), now=0)
    g.add(scrape(T0 + 5000), now=0)
    assert [r.ts * 1000 for r in records(g.ready(now=0))] == [T0]
    g.add(scrape(T0 + 1000), now=0)  # older than an open scrape: late
    assert g.stats["late_samples"] == 4


def test_open_scrapes_per_source_are_bounded():
    g = Grouper(GroupingConfig(settle_s=60, max_open_per_source=2))
    for k in range(4):
        g.add(scrape(T0 + k * 1000), now=0)
    assert [r.ts * 1000 for r in records(g.ready(now=0))] == [T0, T0 + 1000]
    assert g.stats["closed_early"] == 2
    g.add(scrape(T0 + 1500), now=0)  # older than every open scrape with none to spare: late
    assert g.stats["late_samples"] == 4
    assert [r.ts * 1000 for r in records(g.drain())] == [T0 + 2000, T0 + 3000]


def test_pending_samples_are_bounded_the_oldest_scrapes_closing_first():
    g = Grouper(GroupingConfig(settle_s=60, max_pending_samples=3))  # a scrape holds 2
    g.add(scrape(T0, instance="a:1"), now=1)
    g.add(scrape(T0, instance="b:1"), now=2)
    g.add(scrape(T0, instance="c:1"), now=3)
    assert g.pending_samples == 2
    assert [r.labels["instance"] for r in records(g.ready(now=3))] == ["a:1", "b:1"]


def test_sources_are_bounded_the_least_recently_seen_forgotten():
    g = Grouper(GroupingConfig(settle_s=0, max_sources=2))
    for i, inst in enumerate(("a:1", "b:1", "a:1", "c:1")):
        g.add(scrape(T0 + i * 1000, instance=inst), now=i)
    out = g.ready(now=10)
    forgets = [o for o in out if isinstance(o, Forget)]
    assert forgets == [Forget("b", "vllm", {"instance": "b:1"})]
    assert g.stats["sources_forgotten"] == 1 and len(g._sources) == 2


def test_a_forgotten_source_with_open_scrapes_hands_them_out_first():
    g = Grouper(GroupingConfig(settle_s=60, max_sources=1))
    g.add(scrape(T0, instance="a:1"), now=0)
    g.add(scrape(T0, instance="b:1"), now=1)
    out = g.ready(now=1)
    assert [type(o).__name__ for o in out] == ["GroupedRecord", "Forget"] and out[1].node == "a"


def test_a_failed_scrape_is_an_error_record_and_a_gone_target_is_forgotten():
    g = Grouper(GroupingConfig(settle_s=0))
    down = [
        s("up", 0.0, T0),
        s("scrape_duration_seconds", 0.0, T0),
        s("vllm:num_requests_running", None, T0, stale=True, engine="0"),
    ]
    g.add(down, now=0)
    (rec,) = g.ready(now=0)
    assert rec.error == TARGET_DOWN and rec.body == ""
    g.add([s("up", None, T0 + 1000, stale=True), s("vllm:num_requests_running", None, T0 + 1000, stale=True)], now=1)
    assert g.ready(now=1) == [Forget("10.0.0.5", "vllm", {"instance": "10.0.0.5:8000"})]
    assert g.stats["sources_gone"] == 1 and not g._sources
    g.add([s("vllm:num_requests_running", None, T0 + 2000, stale=True)], now=2)  # stale markers only
    assert g.ready(now=2) == [] and g.pending_samples == 0


def test_a_series_gone_while_the_target_is_up_is_just_absent():
    g = Grouper(GroupingConfig(settle_s=0))
    g.add([*scrape(T0)[:1], s("vllm:prompt_tokens_total", None, T0, stale=True, engine="0"), s("up", 1.0)], now=0)
    (rec,) = g.ready(now=0)
    assert [f.name for f in parse_exposition(rec.body)] == ["vllm:num_requests_running"]


def test_too_many_series_in_one_scrape_is_an_error_record_and_a_reject():
    g = Grouper(GroupingConfig(settle_s=0, max_group_series=2))
    rejects = g.add([s("m", float(i), engine=str(i)) for i in range(4)], now=0)
    assert [(r.kind, r.count) for r in rejects] == [("too_many_series", 2)]
    (rec,) = g.ready(now=0)
    assert rec.error == "more than 2 series in one scrape"


def test_interval_is_estimated_from_the_timestamps_or_configured():
    g = Grouper(GroupingConfig(settle_s=0))
    for ts in (0, 5000, 15_000, 20_000):  # one scrape missed between 5 and 15 s
        g.add(scrape(T0 + ts), now=0)
        g.ready(now=0)
    g.add(scrape(T0 + 25_000), now=0)
    g.add(scrape(T0 + 26_000, instance="other:1"), now=0)
    intervals = {r.labels["instance"]: r.interval_s for r in records(g.ready(now=0))}
    assert intervals == {"10.0.0.5:8000": 5.0, "other:1": None}
    g = Grouper(GroupingConfig(settle_s=0, interval_s={"vllm": 15.0}))
    g.add(scrape(), now=0)
    assert records(g.ready(now=0))[0].interval_s == 15.0


def test_synthetic_series_can_be_kept():
    g = Grouper(GroupingConfig(settle_s=0, keep_synthetic=True))
    g.add(scrape(), now=0)
    (rec,) = g.ready(now=0)
    assert "scrape_duration_seconds" in rec.body and "\nup" in "\n" + rec.body


def test_known_only_drops_what_the_catalog_does_not_map_early():
    g = Grouper(GroupingConfig(settle_s=0, known_only=True))
    g.add(
        [
            s("vllm:num_requests_running", 1.0),
            s("vllm:cache_config_info", 1.0),
            s("vllm:time_to_first_token_seconds_bucket", 1.0, le="0.1"),
            s("vllm:time_to_first_token_seconds_count", 1.0),
            s("vllm:time_to_first_token_seconds_sum", 0.1),
            s("up", 1.0),
            s("python_gc_objects_collected_total", 5.0, job="my-app"),
            s("up", 1.0, job="my-app"),
        ],
        now=0,
    )
    (rec,) = g.ready(now=0)  # my-app: nothing known, no empty record
    assert sorted(f.name for f in parse_exposition(rec.body)) == [
        "vllm:num_requests_running",
        "vllm:time_to_first_token_seconds",
    ]
    assert g.stats["unknown_series"] == 2 and g.stats["empty_scrapes"] == 1


def test_metadata_is_bounded_and_unknown_types_ignored():
    g = Grouper(GroupingConfig(max_metadata=2))
    g.add_metadata([Metadata("a", "gauge"), Metadata("b", "counter"), Metadata("c", "unknown"), Metadata("", "gauge")])
    assert g.metadata == {"a": "gauge", "b": "counter"}
    g.add_metadata([Metadata("d", "histogram")])
    assert g.metadata == {"b": "counter", "d": "histogram"}
    g.add_metadata([Metadata("b", "gauge")])
    assert g.metadata == {"d": "histogram", "b": "gauge"}
    off = Grouper(GroupingConfig(max_metadata=0))
    off.add_metadata([Metadata("a", "gauge")])
    assert off.metadata == {}


# -- TYPEs and text ------------------------------------------------------------------------------------------

CATALOG = default_catalog()


def types(names, source="vllm", metadata=None, buckets=(), quantiles=()):
    return family_types(names, set(buckets), set(quantiles), source, metadata or {}, CATALOG)


def test_types_from_metadata_first():
    meta = {
        "x_total": "counter",
        "h": "histogram",
        "sm": "summary",
        "om": "counter",
        "g": "gauge",
        "gh": "gaugehistogram",
    }
    assert types(
        [
            "x_total",
            "h_bucket",
            "h_sum",
            "h_count",
            "sm",
            "sm_sum",
            "sm_count",
            "om_total",
            "om_created",
            "g",
            "gh_bucket",
            "gh_gsum",
        ],
        metadata=meta,
    ) == {
        "x_total": ("x_total", "counter"),
        "h_bucket": ("h", "histogram"),
        "h_sum": ("h", "histogram"),
        "h_count": ("h", "histogram"),
        "sm": ("sm", "summary"),
        "sm_sum": ("sm", "summary"),
        "sm_count": ("sm", "summary"),
        "om_total": ("om", "counter"),
        "om_created": ("om", "counter"),
        "g": ("g", "gauge"),
        "gh_bucket": ("gh", "gaugehistogram"),
        "gh_gsum": ("gh", "gaugehistogram"),
    }


def test_types_from_the_catalog_then_the_names():
    assert types(["tgi_request_success", "tgi_request_duration_sum", "tgi_request_duration_count"], "tgi") == {
        "tgi_request_success": ("tgi_request_success", "counter"),
        "tgi_request_duration_sum": ("tgi_request_duration", "histogram"),
        "tgi_request_duration_count": ("tgi_request_duration", "histogram"),
    }
    assert types(
        ["lat_bucket", "lat_sum", "lat_count", "q", "q_sum", "q_count", "n_total", "g", "g_sum"],
        "my-app",
        buckets=["lat_bucket"],
        quantiles=["q"],
    ) == {
        "lat_bucket": ("lat", "histogram"),
        "lat_sum": ("lat", "histogram"),
        "lat_count": ("lat", "histogram"),
        "q": ("q", "summary"),
        "q_sum": ("q", "summary"),
        "q_count": ("q", "summary"),
        "n_total": ("n_total", "counter"),
        "g": ("g", "untyped"),
        "g_sum": ("g_sum", "untyped"),
    }


def test_render_parses_back_to_the_same_samples_utf8_names_and_escapes_included():
    series = {
        ("vllm:x_total", (("a", 'quote " and \\ and\nnewline'),)): 5.0,
        ("my.metric", (("http.status", "200"), ("le", "x"))): 1.5,
        ("plain", ()): float("nan"),
        ("h_bucket", (("le", "0.1"),)): 1.0,
        ("h_bucket", (("le", "+Inf"),)): 2.0,
        ("h_sum", ()): 0.3,
        ("h_count", ()): 2.0,
    }
    text = render(series, "vllm", {}, CATALOG)
    parsed = parse_exposition(text)
    assert parsed.rejected == {}
    got = {(x.name, tuple(sorted(x.labels.items()))): x.value for f in parsed for x in f.samples}
    assert {k: v for k, v in got.items() if k[0] != "plain"} == {k: v for k, v in series.items() if k[0] != "plain"}
    assert {f.name: f.type for f in parsed} == {
        "vllm:x_total": "counter",
        "my.metric": "untyped",
        "plain": "untyped",
        "h": "histogram",
    }
    snap = SnapshotBuilder().build(ScrapeRecord(ts=1.0, node="n", job="vllm", body=text))
    assert {x.name for x in snap.samples} == {"vllm:x_total", "my.metric", "h"}  # NaN left out, as the agent does


@pytest.mark.parametrize("settle", [0.0, 5.0])
def test_drain_hands_out_everything_open(settle):
    g = Grouper(GroupingConfig(settle_s=settle))
    g.add(scrape(T0) + scrape(T0 + 1000, instance="b:2"), now=0)
    assert len(records(g.drain())) == 2 and g.pending_samples == 0
