from __future__ import annotations

import json
import math

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.histogram import TTFT_BUCKETS
from tailhound.agents.simulator.recording import snapshot_to_record
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.snapshot import HistogramDelta, HistogramSample, Snapshot
from tailhound.streams.histograms import (
    Histogram,
    cumulative_at,
    ensure_monotonic,
    histogram_quantile,
    merge,
)
from tailhound.streams.latency import LatencyTracker
from tailhound.streams.latency_window import LatencyWindow

INF = math.inf
T0 = 1_767_225_600.0
MODEL = "meta-llama/Llama-3.1-70B-Instruct"


# --- histogram_quantile: hand computations ------------------------------------------------------


def test_quantile_interpolates_linearly_inside_the_bucket():
    le, counts, count = [1.0, 2.0, 4.0], [10.0, 30.0, 40.0], 50.0
    assert histogram_quantile(0.1, le, counts, count) == pytest.approx(0.5)  # rank 5 of 10 in (0, 1]
    assert histogram_quantile(0.5, le, counts, count) == pytest.approx(1.75)  # rank 25: 15 of 20 in (1, 2]
    assert histogram_quantile(0.7, le, counts, count) == pytest.approx(3.0)  # rank 35: 5 of 10 in (2, 4]
    assert histogram_quantile(0.8, le, counts, count) == pytest.approx(4.0)  # rank 40: top of (2, 4]
    assert histogram_quantile(0.9, le, counts, count) == 4.0  # in the +Inf bucket: the largest finite bound
    assert histogram_quantile(1.0, le, counts, count) == 4.0


def test_quantile_special_cases():
    le, counts = [1.0, 2.0], [1.0, 2.0]
    assert histogram_quantile(-0.1, le, counts, 3.0) == -INF
    assert histogram_quantile(1.01, le, counts, 3.0) == INF
    assert math.isnan(histogram_quantile(math.nan, le, counts, 3.0))
    assert histogram_quantile(0.5, le, [0.0, 0.0], 0.0) is None  # Prometheus: NaN (no observations)
    assert histogram_quantile(0.5, [], [], 5.0) is None  # only the +Inf bucket: NaN in Prometheus
    assert histogram_quantile(0.5, [1.0, 2.0], [1.0, 2.0], None) is None  # no +Inf bucket: NaN
    # q=0 with an empty first bucket of positive bound: 0/0 in Prometheus.
    assert math.isnan(histogram_quantile(0.0, [1.0, 2.0], [0.0, 2.0], 2.0))


def test_quantile_accepts_unsorted_bounds_and_an_explicit_inf_bound():
    assert histogram_quantile(0.5, [4.0, 1.0, 2.0], [40.0, 10.0, 30.0], 50.0) == pytest.approx(1.75)
    assert histogram_quantile(0.5, [1.0, 2.0, 4.0, INF], [10.0, 30.0, 40.0, 50.0], None) == pytest.approx(1.75)


def test_float_noise_is_ignored_and_monotonicity_forced_like_prometheus():
    # The last finite bucket and +Inf are 1e-12 above 10: noise, so every observation is <= 2.
    noisy = 10.0 + 1e-12
    assert histogram_quantile(1.0, [1.0, 2.0, 3.0], [0.0, 10.0, noisy], noisy) == pytest.approx(2.0)
    counts = [0.0, 10.0, noisy, noisy]
    assert ensure_monotonic(counts) == (False, True)
    assert counts == [0.0, 10.0, 10.0, 10.0]
    counts = [2.0, 1.0, 5.0, 4.0, 9.0, 8.0]  # real decreases: the envelope
    assert ensure_monotonic(counts) == (True, False)
    assert counts == [2.0, 2.0, 5.0, 5.0, 9.0, 9.0]


# --- histogram_quantile: Prometheus' own examples (promql/promqltest/testdata/histograms.test) ----

# testhistogram_bucket at 50m (0+Nx10 -> 10*N)
POSITIVE = ([0.1, 0.2, 1.0, INF], [50.0, 70.0, 110.0, 120.0])
NEGATIVE = ([-0.2, -0.1, 0.3, INF], [10.0, 20.0, 20.0, 30.0])


@pytest.mark.parametrize(
    ("q", "positive", "negative"),
    [
        (0.0, 0.0, -0.2),
        (0.2, 0.048, -0.2),
        (0.5, 0.15, -0.15),
        (0.8, 0.72, 0.3),
        (1.0, 1.0, 0.3),
    ],
)
def test_prometheus_testhistogram(q, positive, negative):
    assert histogram_quantile(q, *POSITIVE, None) == pytest.approx(positive)
    assert histogram_quantile(q, *NEGATIVE, None) == pytest.approx(negative)


@pytest.mark.parametrize(
    ("q", "positive", "negative"),
    [
        (0.0, 0.0, -0.25),
        (0.25, 0.055, -0.225),
        (0.5, 0.125, -0.2),
        (0.75, 0.45, -0.15),
        (1.0, 1.0, -0.1),
    ],
)
def test_prometheus_testhistogram3(q, positive, negative):
    pos = ([0.0, 0.1, 0.2, 1.0], [0.0, 50.0, 70.0, 110.0], 110.0)
    neg = ([-0.25, -0.2, -0.1, 0.3], [0.0, 10.0, 20.0, 20.0], 20.0)
    assert histogram_quantile(q, *pos) == pytest.approx(positive)
    assert histogram_quantile(q, *neg) == pytest.approx(negative)


@pytest.mark.parametrize(("q", "expected"), [(1 / 6, 1.0), (0.5, 3.0), (5 / 6, 5.0)])
def test_prometheus_testhistogram2_middle_of_buckets(q, expected):
    assert histogram_quantile(q, [0.0, 2.0, 4.0, 6.0], [0.0, 1.0, 2.0, 3.0], 3.0) == pytest.approx(expected)


@pytest.mark.parametrize(("q", "expected"), [(0.01, 0.0045), (0.5, 8.5), (0.99, 979.75)])
def test_prometheus_nonmonotonic_buckets(q, expected):
    le, counts = [0.1, 1.0, 10.0, 100.0, 1000.0], [20.0, 10.0, 50.0, 40.0, 90.0]
    assert histogram_quantile(q, le, counts, 80.0) == pytest.approx(expected)


def test_prometheus_mixed_le_representations_are_coalesced():
    # le="0.2", "2e-1" and "2.0e-1" are one bound: their series are summed.
    le, counts = [0.1, 0.2, 0.2, 0.2, INF], [1.0, 1.0, 1.0, 1.0, 4.0]
    assert histogram_quantile(0.5, le, counts, None) == pytest.approx(0.15)
    assert histogram_quantile(0.75, le, counts, None) == pytest.approx(0.2)
    assert histogram_quantile(1.0, le, counts, None) == pytest.approx(0.2)
    assert histogram_quantile(0.5, [INF, INF], [0.0, 0.0], None) is None  # ins2: NaN


# request_duration_seconds at 50m, per (job, instance): le 0.1, 0.2, +Inf
REQUESTS = {
    ("job1", "ins1"): Histogram((0.1, 0.2), (10.0, 30.0), 40.0),
    ("job1", "ins2"): Histogram((0.1, 0.2), (20.0, 50.0), 60.0),
    ("job2", "ins1"): Histogram((0.1, 0.2), (30.0, 40.0), 60.0),
    ("job2", "ins2"): Histogram((0.1, 0.2), (40.0, 70.0), 90.0),
}


def test_prometheus_aggregated_histograms_equal_layouts():
    everything = merge(REQUESTS.values())
    assert everything.counts == (100.0, 190.0) and everything.count == 250.0
    assert everything.quantile(0.3) == pytest.approx(0.075)
    assert everything.quantile(0.5) == pytest.approx(0.1277777777777778)
    job1 = merge(h for (job, _), h in REQUESTS.items() if job == "job1")
    job2 = merge(h for (job, _), h in REQUESTS.items() if job == "job2")
    assert (job1.quantile(0.3), job1.quantile(0.5)) == (pytest.approx(0.1), pytest.approx(0.14))
    assert (job2.quantile(0.3), job2.quantile(0.5)) == (pytest.approx(0.0642857142857143), pytest.approx(0.1125))
    ins1 = merge(h for (_, ins), h in REQUESTS.items() if ins == "ins1")
    assert ins1.quantile(0.5) == pytest.approx(0.1333333333)
    assert REQUESTS[("job2", "ins2")].quantile(0.5) == pytest.approx(0.11666666666666667)


# --- merge with different layouts ---------------------------------------------------------------


def test_merge_different_layouts_rebuckets_onto_the_union_by_interpolation():
    a = Histogram((1.0, 2.0), (10.0, 20.0), 20.0, 25.0)
    b = Histogram((1.5,), (30.0,), 30.0, 30.0)
    assert cumulative_at(a, 1.5) == 15.0  # halfway between 10 and 20
    assert cumulative_at(b, 1.0) == 20.0  # 0 at 0 .. 30 at 1.5
    assert cumulative_at(b, 2.0) == 30.0  # above b's largest bound: stays
    m = merge([a, b])
    assert m.le == (1.0, 1.5, 2.0)
    assert m.counts == pytest.approx((30.0, 45.0, 50.0))
    assert (m.count, m.sum) == (50.0, 55.0)
    assert m.mean() == pytest.approx(1.1)


def test_merge_rebucketing_agrees_with_linear_interpolation():
    coarse = Histogram((1.0, 2.0, 4.0), (10.0, 30.0, 40.0), 50.0)
    fine = Histogram((1.0, 2.0, 3.0, 4.0), (10.0, 30.0, 35.0, 40.0), 50.0)  # same data, split bucket
    m = merge([coarse, fine])
    for q in (0.1, 0.5, 0.7, 0.8, 0.95):
        assert m.quantile(q) == pytest.approx(coarse.quantile(q))


def test_merge_tgi_and_vllm_layouts_keeps_count_and_a_plausible_p50():
    tgi_le = tuple(0.001 * 1.5**i for i in range(35))

    # 100 observations uniform on (0.1, 0.25] in both layouts
    def uniform(le):
        return tuple(100.0 * min(1.0, max(0.0, (b - 0.1) / 0.15)) for b in le)

    vllm = Histogram(TTFT_BUCKETS, uniform(TTFT_BUCKETS), 100.0, 17.5)
    tgi = Histogram(tgi_le, uniform(tgi_le), 100.0, 17.5)
    m = merge([vllm, tgi])
    assert m.count == 200.0 and m.counts[-1] == pytest.approx(200.0)
    assert all(c2 >= c1 for c1, c2 in zip(m.counts, m.counts[1:], strict=False))
    assert m.quantile(0.5) == pytest.approx(0.175, rel=0.05)
    assert merge([]) is None


# --- LatencyWindow ------------------------------------------------------------------------------

LE = (0.1, 0.5, 1.0)


def delta(c1: float, c2: float, c3: float, count: float, total: float = 0.0) -> HistogramDelta:
    return HistogramDelta(counts=[c1, c2, c3], count=count, sum=total)


def fill(window: LatencyWindow, n: int, step: float = 15.0, d: HistogramDelta | None = None) -> float:
    ts = T0
    for i in range(1, n + 1):
        ts = T0 + i * step
        window.add(ts, ts - step, d or delta(1, 2, 3, 3, 0.9), LE)
    return ts


def test_window_expires_in_event_time():
    w = LatencyWindow(window_s=300)
    now = fill(w, 30)
    assert len(w.intervals) == 20  # 5 min at 15 s; older ones dropped on add
    assert w.count(now) == 60.0
    assert w.count(now - 150) == 30.0  # a past "now" sees (now-450, now-150]: 10 kept intervals
    assert w.count(now + 150) == 30.0  # nothing new: half the window has expired
    assert w.count(now + 300) == 0.0 and w.quantile(0.95, now + 300) is None and w.mean(now + 300) is None
    assert w.mean(now) == pytest.approx(0.3)
    assert w.quantile(0.5, now) == pytest.approx(0.1 + 0.4 * (30 - 20) / 20)  # rank 30: 20 <= 0.1, 40 <= 0.5


def test_window_is_bounded_by_max_intervals():
    w = LatencyWindow(window_s=3600, max_intervals=8)
    now = fill(w, 50, step=1.0)
    assert len(w.intervals) == 8
    assert w.count(now) == 24.0


def test_window_ignores_first_sight_redelivery_and_non_finite():
    w = LatencyWindow()
    assert not w.add(T0, None, delta(1, 1, 1, 1), LE)
    assert not w.add(T0, T0 - 15, None, LE)
    assert w.add(T0 + 15, T0, delta(1, 1, 1, 1), LE)
    assert not w.add(T0 + 15, T0, delta(1, 1, 1, 1), LE)  # re-delivered
    assert not w.add(T0 + 10, T0 - 5, delta(1, 1, 1, 1), LE)  # older
    # the wire model rejects non-finite bucket deltas; the window still ignores one built without validation
    assert not w.add(T0 + 30, T0 + 15, HistogramDelta.model_construct(counts=[math.inf, 1, 1], count=1, sum=0.0), LE)
    assert w.count(T0 + 15) == 1.0


def test_window_marks_gaps_and_keeps_their_interval():
    w = LatencyWindow()
    w.add(T0 + 15, T0, delta(1, 1, 1, 1), LE)
    w.add(T0 + 60, T0 + 15, delta(3, 3, 3, 3), LE, gap=True)  # missed collections
    w.add(T0 + 90, T0 + 75, delta(2, 2, 2, 2), LE)  # (T0+60, T0+75] never arrived
    assert [iv.gap for iv in w.intervals] == [False, True, True]
    assert [iv.span_s for iv in w.intervals] == [15.0, 45.0, 15.0]
    assert w.gaps(T0 + 90) == 2 and w.count(T0 + 90) == 6.0


def test_window_resets_when_the_bucket_layout_changes():
    w = LatencyWindow()
    fill(w, 3)
    w.add(T0 + 60, T0 + 45, HistogramDelta(counts=[4.0, 4.0], count=4.0, sum=1.0), (0.2, 2.0))
    assert w.le == (0.2, 2.0) and len(w.intervals) == 1 and w.count(T0 + 60) == 4.0


def test_window_clamps_negative_counts():
    w = LatencyWindow()
    # (the wire model rejects a negative bucket delta; the window clamps one built without validation)
    w.add(T0 + 15, T0, HistogramDelta.model_construct(counts=[-3.0, 2.0, 4.0], count=4.0, sum=1.0), LE)
    assert w.intervals[0].counts == (0.0, 2.0, 4.0)
    assert w.quantile(0.95, T0 + 15) == pytest.approx(0.5 + 0.5 * (3.8 - 2) / 2)  # rank 3.8 in (0.5, 1]


def test_window_state_round_trips_through_json():
    w = LatencyWindow(window_s=300)
    fill(w, 25, d=delta(0.1 + 0.2, 2.0000000000001, 3, 3.5, 0.1 + 0.2))  # float noise is rounded away
    w.add(T0 + 26 * 15, T0 + 25 * 15, delta(0, 0, 0, 0), LE, gap=True)
    data = json.loads(json.dumps(w.to_dict()))
    back = LatencyWindow.from_dict(data)
    assert back == w
    assert back.to_dict() == w.to_dict()
    now = T0 + 26 * 15
    assert back.quantile(0.95, now) == w.quantile(0.95, now) and back.mean(now) == w.mean(now)
    assert w.intervals[0].counts == (0.3, 2.0, 3.0)
    assert data["intervals"][-1] == [int(now), 15, 1, 0, 0, []]  # trailing counts equal to count are implied


#: a window as the earlier (object per interval) window wrote it: a fractional interval, a gap, whole counts
#: above 16 and 32 bits, an empty one; the packed window reads it and writes it back byte for byte
STORED_WINDOW = (
    '{"window_s": 120, "max_intervals": 6, "le": [0.1, 0.5, 2.5], "intervals": [[1767225615, 15, 0, 3, 0.9, [1, 2]], '
    "[1767225630, 15, 0, 4, 1.1, [0.5, 2.25, 3]], [1767225645, 15, 1, 70002, 9.5, [70000, 70001, 70001]], "
    "[1767225660, 15, 0, 8589934592, 1000000, []], [1767225675, 15, 0, 0, 0, []]]}"
)


def test_window_reads_and_writes_the_stored_form_unchanged():
    w = LatencyWindow.from_dict(json.loads(STORED_WINDOW))
    assert json.dumps(w.to_dict()) == STORED_WINDOW
    assert [iv.gap for iv in w.intervals] == [False, False, True, False, False]
    assert w.intervals[1].counts == (0.5, 2.25, 3.0) and w.intervals[3].counts == (2.0**33,) * 3
    # (the figures the earlier window gave for this state)
    now = 1767225675.0
    h = w.histogram(now)
    assert (h.counts, h.count, h.sum) == ((8590004593.5, 8590004597.25, 8590004599.0), 8590004601.0, 1000011.5)
    h = w.histogram(now - 30)
    assert (h.counts, h.count, h.sum) == ((70001.5, 70005.25, 70007.0), 70009.0, 11.5)
    assert w.gaps(now) == 1 and w.count(now) == 8590004601.0


def test_window_widens_its_counts_and_sums_them_exactly():
    w = LatencyWindow(window_s=60, max_intervals=64)
    ts = T0
    for big in (3.0, 70_000.0, 2.0**33, 5.0, 6.0, 7.0, 8.0):  # 16 -> 32 bits -> floats, then the big one drops out
        w.add(ts + 15, ts, delta(1, big, big, big, 1.0), LE)
        ts += 15
        inside = w.inside(ts)
        expected = tuple(float(sum(iv.counts[i] for iv in inside)) for i in range(len(LE)))
        assert w.histogram(ts).counts == expected and w.histogram(ts).count == sum(iv.count for iv in inside)
    assert w.histogram(ts).counts == (4.0, 26.0, 26.0)


def test_window_skips_intervals_out_of_order_in_a_stored_form():
    data = json.loads(STORED_WINDOW)
    data["intervals"].insert(2, data["intervals"][0])  # (an edited record: not something add writes)
    w = LatencyWindow.from_dict(data)
    assert json.dumps(w.to_dict()) == STORED_WINDOW


# --- LatencyTracker on hand-made snapshots -------------------------------------------------------


def vllm_ttft(
    ts: float,
    prev_ts: float | None,
    node: str,
    d: HistogramDelta,
    engine: str = "0",
    model: str = MODEL,
    gap: bool = False,
    reset: bool = False,
) -> Snapshot:
    labels = {"model_name": model, "engine": engine}
    sample = HistogramSample(
        name="vllm:time_to_first_token_seconds",
        labels=labels,
        le=list(LE),
        counts=list(d.counts),
        count=d.count,
        sum=d.sum,
        delta=d,
        reset=reset,
    )
    return Snapshot(
        ts=ts, node=node, source="vllm", interval_s=15, labels=labels, samples=[sample], prev_ts=prev_ts, gap=gap
    )


def test_tracker_engine_model_and_fleet_scopes():
    tr = LatencyTracker(window_s=300)
    for i in range(1, 5):
        ts = T0 + 15 * i
        tr.observe(vllm_ttft(ts, ts - 15, "gpu-node-1", delta(5, 10, 10, 10, 2.0)))  # fast
        tr.observe(vllm_ttft(ts, ts - 15, "gpu-node-2", delta(0, 0, 10, 10, 8.0)))  # slow
        tr.observe(vllm_ttft(ts, ts - 15, "gpu-node-3", delta(0, 10, 10, 10, 3.0), model="other"))
    now = T0 + 60
    p = tr.percentiles(now)
    engine, model, fleet = p["engine"], p["model"], p["fleet"]
    assert engine["latency.ttft.window_count"] == {"gpu-node-1/0": 40.0, "gpu-node-2/0": 40.0, "gpu-node-3/0": 40.0}
    assert engine["latency.ttft.p50"]["gpu-node-1/0"] == pytest.approx(0.1)
    assert engine["latency.ttft.p50"]["gpu-node-2/0"] == pytest.approx(0.75)
    assert model["latency.ttft.window_count"] == {MODEL: 80.0, "other": 40.0}
    # MODEL: 20 <= 0.1, 40 <= 0.5, 80 <= 1: rank 76 is 36 of 40 in (0.5, 1]
    assert model["latency.ttft.p95"][MODEL] == pytest.approx(0.5 + 0.5 * 36 / 40)
    assert fleet["latency.ttft.window_count"] == {"": 120.0}
    assert fleet["latency.ttft.p50"][""] == pytest.approx(0.1 + 0.4 * 40 / 60)  # 20 <= 0.1, 80 <= 0.5
    assert tr.engine_values(now, "gpu-node-2")["latency.ttft.p50"] == {"0": pytest.approx(0.75)}


def test_tracker_counter_reset_gives_sane_percentiles():
    tr = LatencyTracker()
    tr.observe(vllm_ttft(T0 + 15, T0, "n1", delta(10, 20, 30, 30, 9.0)))
    # The engine restarted: the agent folds the reset into the delta (the new cumulative values).
    tr.observe(vllm_ttft(T0 + 30, T0 + 15, "n1", delta(1, 4, 5, 5, 1.5), reset=True))
    engine = tr.percentiles(T0 + 30)["engine"]
    assert engine["latency.ttft.window_count"]["n1/0"] == 35.0
    assert 0 < engine["latency.ttft.p95"]["n1/0"] <= 1.0
    window = tr.series[("latency.ttft", "n1", "0")].window
    assert all(c >= 0 for iv in window.intervals for c in (*iv.counts, iv.count))


def test_tracker_keeps_gap_intervals_and_drops_stale_series():
    tr = LatencyTracker(window_s=300)
    tr.observe(vllm_ttft(T0 + 15, T0, "n1", delta(1, 1, 1, 1)))
    tr.observe(vllm_ttft(T0 + 120, T0 + 15, "n1", delta(4, 4, 4, 4), gap=True))
    assert tr.percentiles(T0 + 120)["engine"]["latency.ttft.window_count"]["n1/0"] == 5.0
    assert tr.series[("latency.ttft", "n1", "0")].window.gaps(T0 + 120) == 1
    tr.observe(vllm_ttft(T0 + 600, T0 + 585, "n2", delta(1, 1, 1, 1)))
    assert [k[1] for k in tr.series] == ["n2"]  # n1's newest interval is older than the window


def test_tracker_maps_tgi_by_instance_and_merges_layouts_in_the_fleet():
    tgi_le = [0.9852612304687506, 1.477891845703126, 2.2168377685546886, 3.325256652832033]
    d = HistogramDelta(counts=[10.0, 20.0, 30.0, 40.0], count=40.0, sum=80.0)
    sample = HistogramSample(
        name="tgi_request_duration", labels={}, le=tgi_le, counts=d.counts, count=40.0, sum=80.0, delta=d
    )
    tgi = Snapshot(
        ts=T0 + 15,
        node="tgi-1",
        source="tgi",
        labels={"instance": "tgi-1:80", "model": "mistral"},
        samples=[sample],
        prev_ts=T0,
    )
    e2e_le = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0]
    d2 = HistogramDelta(counts=[0, 0, 0, 10.0, 20.0, 30.0, 40.0, 40.0], count=40.0, sum=60.0)
    vllm = Snapshot(
        ts=T0 + 15,
        node="gpu-node-1",
        source="vllm",
        labels={"model_name": MODEL, "engine": "0"},
        prev_ts=T0,
        samples=[
            HistogramSample(
                name="vllm:e2e_request_latency_seconds",
                labels={},
                le=e2e_le,
                counts=d2.counts,
                count=40.0,
                sum=60.0,
                delta=d2,
            )
        ],
    )
    tr = LatencyTracker()
    assert tr.observe(tgi) == 1 and tr.observe(vllm) == 1
    p = tr.percentiles(T0 + 15)
    assert set(p["engine"]["latency.e2e.p95"]) == {"tgi-1/tgi-1:80", "gpu-node-1/0"}
    assert set(p["model"]["latency.e2e.p50"]) == {"mistral", MODEL}
    assert p["fleet"]["latency.e2e.window_count"] == {"": 80.0}
    assert 1.0 < p["fleet"]["latency.e2e.p50"][""] < 2.2


# --- LatencyTracker on the simulator through the agent pipeline ---------------------------------


def simulated_snapshots(minutes: float, *faults: str):
    sim = FleetSimulator(SimConfig(nodes=1, interval_s=15, sources=("vllm",)), [FaultSpec.parse(f) for f in faults])
    builder = SnapshotBuilder()
    for ts, snapshots in sim.run(minutes * 60):
        for snap in snapshots:
            yield ts, builder.build(snapshot_to_record(snap))


def test_ttft_p95_rises_under_a_traffic_surge():
    tr = LatencyTracker(window_s=300)
    p95: dict[float, float] = {}
    for ts, snap in simulated_snapshots(20, "traffic-surge@10m+10m"):
        tr.observe(snap)
        minute = (ts - T0) / 60
        if minute in (9.75, 19.75):
            values = tr.percentiles(ts)
            p95[minute] = values["engine"]["latency.ttft.p95"]["gpu-node-1/0"]
            assert values["engine"]["latency.ttft.window_count"]["gpu-node-1/0"] > 1000
            assert values["model"]["latency.ttft.p95"][MODEL] == p95[minute]  # one engine: same histogram
            assert values["fleet"]["latency.ttft.p95"][""] == p95[minute]
            assert 100 < values["engine"]["tokens.prompt.mean"]["gpu-node-1/0"] < 10_000
    assert 0.05 < p95[9.75] < 2.0
    assert p95[19.75] > 10 * p95[9.75]


def test_engine_restart_through_the_pipeline_never_gives_negative_counts():
    tr = LatencyTracker(window_s=300)
    resets = 0
    for ts, snap in simulated_snapshots(8, "engine-restart@5m"):
        resets += any(getattr(s, "reset", False) for s in snap.samples)
        tr.observe(snap)
        for signal, by_entity in tr.percentiles(ts)["engine"].items():
            for value in by_entity.values():
                assert value >= 0 and math.isfinite(value), (signal, value)
    assert resets >= 1
    assert tr.percentiles(ts)["engine"]["latency.ttft.p95"]["gpu-node-1/0"] < 5.0


def test_tracker_state_round_trips_mid_stream():
    straight, restored = LatencyTracker(), LatencyTracker()
    now = T0
    for i, (ts, snap) in enumerate(simulated_snapshots(9, "traffic-surge@6m+10m")):
        now = ts
        straight.observe(snap)
        restored.observe(snap)
        if i % 7 == 3:  # a worker restart: state comes back from the changelog
            restored = LatencyTracker.from_dict(json.loads(json.dumps(restored.to_dict())))
    assert restored.to_dict() == straight.to_dict()
    assert restored.percentiles(now) == straight.percentiles(now)


def test_serialized_size_of_a_vllm_ttft_window():
    tr = LatencyTracker(window_s=300)
    for _ts, snap in simulated_snapshots(6):
        tr.observe(snap)
    window = tr.series[("latency.ttft", "gpu-node-1", "0")].window
    assert len(window.intervals) == 20 and len(window.le) == 22
    compact = len(json.dumps(window.to_dict(), separators=(",", ":")))
    spaced = len(json.dumps(window.to_dict()))
    print(f"vLLM TTFT window, 5 min at 15 s: {compact} bytes compact JSON, {spaced} bytes json.dumps")
    assert compact < 2500
