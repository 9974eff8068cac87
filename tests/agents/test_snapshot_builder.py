"""Scrape records -> snapshots: counter and histogram deltas, resets, gaps, failures."""

from __future__ import annotations

import pytest

from tailhound.agents.render import ExpositionWriter
from tailhound.agents.snapshot_builder import SnapshotBuilder, is_dcgm_blank
from tailhound.recording import ScrapeRecord


def vllm_body(tokens: float, buckets: list[float], count: float, total: float, waiting: float = 1) -> str:
    w = ExpositionWriter()
    labels = {"engine": "0", "model_name": "m"}
    w.gauge("vllm:num_requests_waiting", waiting, labels)
    w.counter("vllm:generation_tokens_total", tokens, labels)
    w.histogram("vllm:time_to_first_token_seconds", [0.1, 0.5, 1.0], buckets, count, total, labels)
    return w.text()


def rec(ts: float, body: str = "", **kw) -> ScrapeRecord:
    return ScrapeRecord(ts=ts, node="n1", job="vllm", body=body, interval_s=5, labels={"instance": "a:1"}, **kw)


def one(snap, name):
    [s] = list(snap.find(name))
    return s


def test_first_sight_has_no_delta_then_deltas_cover_prev_ts():
    b = SnapshotBuilder()
    s1 = b.build(rec(100, vllm_body(1000, [1, 5, 8], 10, 4.0)))
    assert s1.prev_ts is None and not s1.gap
    assert one(s1, "vllm:generation_tokens_total").delta is None
    assert one(s1, "vllm:time_to_first_token_seconds").delta is None
    s2 = b.build(rec(105, vllm_body(1600, [3, 9, 14], 17, 7.5)))
    assert s2.prev_ts == 100 and not s2.gap
    assert one(s2, "vllm:generation_tokens_total").delta == 600
    h = one(s2, "vllm:time_to_first_token_seconds")
    assert h.delta.counts == [2, 4, 6] and h.delta.count == 7 and h.delta.sum == pytest.approx(3.5)
    assert one(s2, "vllm:num_requests_waiting").kind == "gauge"


def test_engine_restart_resets_are_never_negative_or_huge():
    b = SnapshotBuilder()
    b.build(rec(100, vllm_body(1_000_000, [100, 500, 800], 1000, 400.0)))
    s = b.build(rec(105, vllm_body(250, [1, 2, 3], 4, 1.2)))
    c = one(s, "vllm:generation_tokens_total")
    assert c.reset and c.delta == 250
    h = one(s, "vllm:time_to_first_token_seconds")
    assert h.reset and h.delta.counts == [1, 2, 3] and h.delta.count == 4
    s3 = b.build(rec(110, vllm_body(300, [1, 3, 4], 5, 1.5)))
    assert not one(s3, "vllm:generation_tokens_total").reset
    assert one(s3, "vllm:generation_tokens_total").delta == 50


def test_changed_bucket_layout_starts_over():
    b = SnapshotBuilder()
    b.build(rec(100, vllm_body(1, [1, 2, 3], 3, 1.0)))
    w = ExpositionWriter()
    w.histogram("vllm:time_to_first_token_seconds", [0.2, 2.0], [5, 9], 9, 3.0, {"engine": "0", "model_name": "m"})
    h = one(b.build(rec(105, w.text())), "vllm:time_to_first_token_seconds")
    assert h.delta is None and not h.reset


def test_failed_and_missed_collections_are_gaps():
    b = SnapshotBuilder()
    b.build(rec(100, vllm_body(10, [1, 1, 1], 1, 0.1)))
    failed = b.build(rec(105, error="http://a:1/metrics: HTTP 503"))
    assert failed.error.endswith("HTTP 503") and failed.gap and failed.samples == [] and failed.prev_ts == 100
    after = b.build(rec(110, vllm_body(20, [2, 2, 2], 2, 0.2)))
    assert after.gap and after.prev_ts == 100  # the delta spans the failed collection
    assert one(after, "vllm:generation_tokens_total").delta == 10
    on_time = b.build(rec(115, vllm_body(25, [2, 2, 2], 2, 0.2)))
    assert not on_time.gap
    late = b.build(rec(130, vllm_body(30, [2, 2, 2], 2, 0.2)))
    assert late.gap and late.prev_ts == 115


def test_sources_are_kept_apart_by_node_job_and_labels():
    b = SnapshotBuilder()
    b.build(rec(100, vllm_body(10, [1, 1, 1], 1, 0.1)))
    other = ScrapeRecord(
        ts=101, node="n1", job="vllm", body=vllm_body(5000, [1, 1, 1], 1, 0.1), labels={"instance": "b:2"}, interval_s=5
    )
    assert one(b.build(other), "vllm:generation_tokens_total").delta is None
    assert one(b.build(rec(105, vllm_body(15, [1, 1, 1], 1, 0.1))), "vllm:generation_tokens_total").delta == 5


def test_unparsable_text_is_a_gap_with_the_line_and_bad_histogram_is_skipped(caplog):
    b = SnapshotBuilder()
    bad = b.build(rec(100, "# TYPE x gauge\n\nthis is not exposition\n"))  # nothing usable (one bad family alone
    # is dropped and counted: tests/agents/test_exposition.py)
    assert bad.error.startswith("unparsable exposition: line 3") and bad.gap
    text = vllm_body(10, [1, 1, 1], 1, 0.1) + (
        "# TYPE vllm:e2e_request_latency_seconds histogram\n"
        'vllm:e2e_request_latency_seconds_bucket{le="1"} 5\n'
        'vllm:e2e_request_latency_seconds_bucket{le="2"} 3\n'
        "vllm:e2e_request_latency_seconds_count 5\nvllm:e2e_request_latency_seconds_sum 1\n"
    )
    snap = b.build(rec(105, text))
    assert snap.error is None and not list(snap.find("vllm:e2e_request_latency_seconds"))
    assert one(snap, "vllm:generation_tokens_total").value == 10
    assert "cumulative" in caplog.text and b.parse_errors == 2


def test_series_that_disappear_are_forgotten():
    b = SnapshotBuilder()
    b.build(rec(100, vllm_body(10, [1, 1, 1], 1, 0.1)))
    b.build(rec(105, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 1\n"))
    s = b.build(rec(110, vllm_body(20, [1, 1, 1], 1, 0.1)))
    assert one(s, "vllm:generation_tokens_total").delta is None  # not a delta across its absence


@pytest.mark.parametrize(
    ("value", "blank"),
    [
        (9223372036854775794, True),
        (2147483632, True),
        (2147483634, True),
        (140737488355328.0, True),
        (0, False),
        (86, False),
        (2147483631, False),
        (384736210457, False),
    ],
)
def test_dcgm_blank_values(value, blank):
    assert is_dcgm_blank(value) is blank
