from __future__ import annotations

import json

import pytest

from tailhound.streams.baseline import MAX_RAW, BaselineStore, RollingBaseline, bench_memory

T0 = 5_666_700 * 300.0  # bucket-aligned event time


def feed(b: RollingBaseline, start: float, seconds: float, value, step: float = 10.0, in_incident: bool = False):
    k = 0
    while k * step < seconds:
        ts = start + k * step
        b.observe(ts, value(ts) if callable(value) else value, in_incident)
        k += 1
    return start + k * step


def test_expected_is_none_until_20_minutes_of_history():
    b = RollingBaseline()
    end = feed(b, T0, 1190, 0.2)
    assert b.expected() is None and b.ratio(0.4) is None
    assert end == T0 + 1190
    b.observe(T0 + 1200, 0.2)  # t = 20 min: the 4th bucket closes
    exp = b.expected()
    assert exp is not None and exp.n_buckets == 4 and exp.median == pytest.approx(0.2)
    assert b.ratio(0.5) == pytest.approx(2.5)


def test_unaligned_start_is_usable_in_at_most_20_minutes():
    b = RollingBaseline()
    feed(b, T0 + 290, 1200 - 290 + 10 + 1, 0.2)
    assert b.expected() is not None


def test_robust_to_a_few_outlier_buckets():
    b = RollingBaseline()
    end = feed(b, T0, 3600, 0.1)
    end = feed(b, end, 600, 5.0)  # two odd buckets, not flagged as an incident
    feed(b, end, 301, 0.1)
    exp = b.expected()
    assert exp.median == pytest.approx(0.1) and exp.mad == pytest.approx(0.0)
    assert exp.n_buckets == 15


def test_values_inside_an_incident_are_not_learned():
    b = RollingBaseline()
    end = feed(b, T0, 3600, 0.1)
    assert len(b.bucket_medians()) == 11  # buckets 0-10 closed, 11 filling
    end = feed(b, end, 150, 0.9)  # onset: the rule was pending, not yet an incident
    end = feed(b, end, 1800, 1.0, in_incident=True)
    feed(b, end, 301, 0.1)
    assert max(b.bucket_medians()) == pytest.approx(0.1)  # the onset bucket was dropped too
    # 0-11 and the incident's last bucket (its tail after the incident ended); 12-17 learned nothing
    assert len(b.bucket_medians()) == 13
    assert b.expected().median == pytest.approx(0.1)


def test_duplicates_and_late_values_are_ignored_and_state_is_deterministic():
    clean, noisy = RollingBaseline(), RollingBaseline()
    for k in range(400):
        ts, v = T0 + 10 * k, 0.1 + (k % 5) * 0.01
        clean.observe(ts, v)
        assert noisy.observe(ts, v)
        assert not noisy.observe(ts, 99.0)  # re-delivered
        assert not noisy.observe(ts - 700, 99.0)  # older than the newest bucket
    assert noisy.to_dict() == clean.to_dict()


def test_old_buckets_leave_the_horizon_and_a_long_gap_forgets_everything():
    b = RollingBaseline(horizon_s=3600, warmup_s=1200)
    end = feed(b, T0, 3600, 1.0)
    end = feed(b, end, 3600, 2.0)
    assert b.expected().median == pytest.approx(2.0)
    assert b.expected().n_buckets == 11
    b.observe(end + 4 * 3600, 2.0)
    assert b.expected() is None


def test_round_trip_is_exact_and_compact():
    b = RollingBaseline()
    end = feed(b, T0, 4 * 3600, lambda ts: 0.123456789 + (ts % 3000) / 1e5)
    feed(b, end, 170, 0.3)
    text = b.to_json()
    assert len(text) == b.nbytes() <= 1024
    c = RollingBaseline.from_dict(json.loads(text))
    assert c.expected() == b.expected() and c.to_dict() == b.to_dict()
    for k in range(100):  # and they keep evolving identically
        assert c.observe(end + 170 + 10 * k, 0.2) == b.observe(end + 170 + 10 * k, 0.2)
    assert c.to_dict() == b.to_dict()


#: a baseline as the float32 ring wrote it (before the ring kept its written values), with what it gave then
STORED_BASELINE = (
    '{"v":1,"b":300.0,"w":600.0,"f":0.001,"i":5890767,"t":1767230100.0,"r":[0.1158,0.1164,0.1145,null,0.1165,'
    '0.1232,0.1178,0.1116,0.1139,0.1253,0.1205,0.1191],"c":[0.1131],"n":1,"s":1}'
)


def test_a_stored_baseline_reads_back_as_it_was_written_and_expects_the_same():
    b = RollingBaseline.from_dict(json.loads(STORED_BASELINE))
    assert json.dumps(b.to_dict(), separators=(",", ":")) == STORED_BASELINE
    e = b.expected()
    assert (e.median, e.mad, e.p90, e.n_buckets) == (0.1165, 0.0026, 0.1232, 11)
    assert b.bucket_medians()[:2] == [0.11580000072717667, 0.11640000343322754]  # float32 values, as before


def test_the_ring_writes_each_median_as_its_float32_value_rounded():
    b = RollingBaseline(horizon_s=3600, bucket_s=300, warmup_s=600)
    for i, value in enumerate((1e-40, 3.3e38, 1e39, 0.123456)):  # subnormal, near the top, past it, usual
        b.observe(T0 + 300 * i, value)
    b.observe(T0 + 1200, 1.0)
    assert b.to_dict()["r"][:4] == [1e-40, 3.3e38, float("inf"), 0.1235]
    back = RollingBaseline.from_dict(json.loads(json.dumps(b.to_dict())))
    assert back.to_dict() == b.to_dict() and back.bucket_medians() == b.bucket_medians()


def test_worst_case_state_fits_in_1kb():
    b = RollingBaseline()
    feed(b, T0, 4 * 3600 - 10, lambda ts: -1.2345678e-5 * (1 + (ts % 130) / 1000), step=10)
    assert len(b.to_dict()["c"]) == 29
    assert b.nbytes() <= 1024


def test_fast_cadence_is_thinned_not_truncated():
    b = RollingBaseline()
    end = feed(b, T0, 300, lambda ts: ts - T0, step=1.0)  # 0..299 in one bucket
    assert len(b.to_dict()["c"]) <= MAX_RAW
    feed(b, end, 1200, 0.0, step=1.0)
    assert b.bucket_medians()[0] == pytest.approx(150, abs=10)


def test_ratio_floors_a_zero_median():
    b = RollingBaseline(median_floor=0.005)
    end = feed(b, T0, 1200, 0.0)
    b.observe(end, 0.0)
    assert b.expected().median == 0.0
    assert b.ratio(0.02) == pytest.approx(4.0)


def test_from_dict_rejects_unknown_state_version():
    with pytest.raises(ValueError, match="version"):
        RollingBaseline.from_dict({"v": 99})


def test_store_evicts_least_recently_observed_series():
    store = BaselineStore(max_series=2)
    store.observe("latency.tpot.p95", "e1", T0, 0.1)
    store.observe("latency.tpot.p95", "e2", T0, 0.1)
    store.observe("latency.tpot.p95", "e1", T0 + 10, 0.1)
    store.observe("gpu.dram_bw_util", "0", T0, 0.5)
    assert ("latency.tpot.p95", "e1") in store and ("latency.tpot.p95", "e2") not in store
    assert len(store) == 2 and store.evicted == 1
    assert store.state_bytes() == sum(
        store.get(*k).nbytes() for k in [("latency.tpot.p95", "e1"), ("gpu.dram_bw_util", "0")]
    )
    assert store.expected("latency.tpot.p95", "e1") is None


def test_bench_memory_stays_under_1kb_per_series():
    result = bench_memory(2000)
    assert result["in_memory_bytes_per_series"] <= 1024
    assert result["serialized_bytes_per_series"] <= 1024
