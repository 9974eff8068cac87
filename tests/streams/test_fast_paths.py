"""The worker's fast paths give exactly what the straightforward code gives.

Each optimisation of the streams step (memoised catalog lookups, one-pass extraction, running window
sums, shared quantile preparation, compiled rules, the lazily computed view) is checked here against
the plain computation it replaces, on simulated fleet data and on random inputs.
"""

from __future__ import annotations

import itertools
import random

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog, parse_catalog
from tailhound.snapshot import HistogramDelta
from tailhound.streams.extract import extract
from tailhound.streams.histograms import Histogram, histogram_quantile
from tailhound.streams.latency_window import LatencyWindow
from tailhound.streams.latest_values import LatestValues
from tailhound.streams.ruleset.condition_eval import EvalContext, entities_of, holds
from tailhound.streams.ruleset.plan import plans_for
from tailhound.streams.ruleset.rulefile import load_rules, parse_rule_text
from tailhound.streams.snapshot_scan import counter_rates, snapshot_values


@pytest.fixture(scope="module")
def fleet_snapshots():
    sim = FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@2m+5m")])
    builder = SnapshotBuilder()
    return [builder.build(r) for r in itertools.islice(iter_records(sim, minutes=10**6), 8 * 20)]


def test_one_pass_extraction_equals_extract_and_counter_rates(fleet_snapshots):
    catalog = default_catalog()
    for snap in fleet_snapshots:
        expected = extract(snap, catalog)
        expected.update(counter_rates(snap, catalog))
        scan = snapshot_values(snap, catalog)
        assert scan.values == expected
        assert list(scan.values) == list(expected)  # same order of signals too
        assert scan.histogram_deltas == any(s.kind == "histogram" and s.delta is not None for s in snap.samples)


def test_memoised_lookup_equals_the_mapping_walk(fleet_snapshots):
    fresh = parse_catalog(
        {
            "signals": {
                "probe.connect": {
                    "kind": "gauge",
                    "unit": "s",
                    "sources": {"blackbox": {"metric": "probe_http_duration_seconds", "match": {"phase": "connect"}}},
                },
                "probe.tls": {
                    "kind": "gauge",
                    "unit": "s",
                    "sources": {"blackbox": {"metric": "probe_http_duration_seconds", "match": {"phase": "tls"}}},
                },
            }
        }
    )
    for phase in ("connect", "tls", "resolve", None, "connect"):
        labels = {"phase": phase} if phase else {}
        found = fresh.lookup("blackbox", "probe_http_duration_seconds", labels)
        walked = next(
            (
                (spec, sm.scale)
                for spec, sm in fresh.by_metric[("blackbox", "probe_http_duration_seconds")]
                if sm.matches(labels)
            ),
            None,
        )
        assert found == walked
    catalog = default_catalog()
    for snap in fleet_snapshots[:16]:
        for s in snap.samples:
            walked = next(
                (
                    (spec, sm.scale)
                    for spec, sm in catalog.by_metric.get((snap.source, s.name), ())
                    if sm.matches(s.labels)
                ),
                None,
            )
            assert catalog.lookup(snap.source, s.name, s.labels) == walked


def _reference_histogram(window: LatencyWindow, now: float) -> Histogram | None:
    inside = window.inside(now)
    if not inside:
        return None
    counts = [0.0] * len(window.le)
    count = total = 0.0
    for iv in inside:
        for i, c in enumerate(iv.counts):
            counts[i] += c
        count += iv.count
        total += iv.sum
    return Histogram(window.le, tuple(counts), count, total)


@pytest.mark.parametrize("whole", [True, False])
def test_window_histogram_equals_the_interval_loop(whole):
    rng = random.Random(7)
    le = [0.1, 0.5, 1.0, 2.5, 10.0]
    window = LatencyWindow(window_s=120.0, max_intervals=6)
    ts = 1_767_225_600.0
    for _ in range(60):
        step_s = rng.choice([15.0, 15.0, 15.0, 45.0])
        increments = [rng.randint(0, 40) if whole or rng.random() < 0.8 else rng.random() * 40 for _ in le]
        counts = list(itertools.accumulate(float(x) for x in increments))
        window.add(
            ts + step_s,
            ts,
            HistogramDelta(counts=counts, count=counts[-1] + rng.randint(0, 3), sum=rng.random() * 100),
            le,
            gap=step_s > 15,
        )
        ts += step_s
        for now in (ts, ts - 20.0, ts + 70.0):
            assert window.histogram(now) == _reference_histogram(window, now)
            assert window.histogram(now) == _reference_histogram(window, now)  # cached answer


def test_quantiles_equal_histogram_quantile_on_random_histograms():
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(1, 8)
        le = sorted(rng.sample(range(1, 50), n)) if rng.random() < 0.8 else [rng.randint(1, 9) for _ in range(n)]
        counts = [float(rng.randint(0, 30)) for _ in range(n)]
        if rng.random() < 0.7:
            counts = list(itertools.accumulate(counts))
        if rng.random() < 0.2:
            counts = [c + rng.random() for c in counts]
        count = max(counts) + rng.randint(0, 5)
        if len(set(le)) == len(le) and le == sorted(le):
            h = Histogram(tuple(float(b) for b in le), tuple(counts), count)
            for q in (0.0, 0.5, 0.95, 0.99, 1.0, -0.1, 1.1):
                assert _same(h.quantile(q), histogram_quantile(q, le, counts, count))
        for q in (0.5, 0.99):
            assert _same(histogram_quantile(q, le, counts, count), _reference_quantile(q, le, counts, count))


def _same(a: float | None, b: float | None) -> bool:
    return a == b or (a != a and b != b)  # NaN == NaN here


def _reference_quantile(q, le, counts, count):
    """histogram_quantile as it was before the shared preparation (sort, coalesce, monotonic, interpolate)."""
    import math
    from bisect import bisect_left

    from tailhound.streams.histograms import ensure_monotonic

    pairs = sorted(zip((float(b) for b in le), (float(c) for c in counts), strict=True), key=lambda p: p[0])
    pairs.append((math.inf, float(count)))
    bounds, cum = [], []
    for bound, c in pairs:
        if bounds and bound == bounds[-1]:
            cum[-1] += c
        else:
            bounds.append(bound)
            cum.append(c)
    ensure_monotonic(cum)
    if len(cum) < 2 or cum[-1] == 0:
        return None
    rank = q * cum[-1]
    b = bisect_left(cum, rank, 0, len(cum) - 1)
    if b == len(cum) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, in_bucket = 0.0, bounds[b], cum[b]
    if b > 0:
        start = bounds[b - 1]
        in_bucket -= cum[b - 1]
        rank -= cum[b - 1]
    if in_bucket == 0:
        return math.nan if rank == 0 else math.inf
    return start + (end - start) * (rank / in_bucket)


def test_lazy_view_reads_as_the_full_view(fleet_snapshots):
    catalog = default_catalog()
    latest = LatestValues()
    for snap in fleet_snapshots:
        latest.update(snapshot_values(snap, catalog).values, snap.ts, snap.interval_s)
        for now in (snap.ts, snap.ts + 50.0, snap.ts + 400.0):
            full, lazy = latest.view(now), latest.current(now)
            assert lazy.to_dict() == full
            assert all(lazy.get(name) == values for name, values in full.items())
            assert lazy.get("no.such.signal") is None and "no.such.signal" not in lazy
        seen, last_seen = latest.seen(), latest.last_seen()
        assert all(seen.get(name) == per for name, per in last_seen.items())


EXTRA_RULES = """
groups:
  - name: extra
    rules:
      - name: gone
        scope: gpu
        when: {absent: gpu.temperature, for: 1m}
        root_cause: gpu-thermal-throttle
      - name: mixed
        scope: engine
        when:
          any:
            - not: {signal: engine.kv_cache_usage, below: 0.5}
            - all:
                - signal: engine.requests_waiting
                  reduce: sum
                  at_most: {signal: engine.requests_running, reduce: max, times: 0.1}
                - {signal: gpu.temperature, reduce: mean, at_least: 60}
                - {signal: gpu.temperature, reduce: count, above: 4}
        root_cause: capacity
      - name: peers-or-missing
        scope: gpu
        when:
          any:
            - {signal: gpu.sm_clock, below: {peers: 0.97}}
            - {signal: gpu.temperature, above: {peers: 1.02}}
            - {signal: gpu.pcie_link_gen, below: 9}   # a signal the fleet never reports
        root_cause: gpu-thermal-throttle
"""


def _baseline(_signal: str, entity: str) -> tuple[float, str] | None:
    return (0.3, "rolling") if entity in ("0", "2") else None


def test_compiled_rules_answer_as_holds_and_entities_of(fleet_snapshots):
    catalog = default_catalog()
    rules = load_rules("rules")
    extra = parse_rule_text(EXTRA_RULES, "extra.yaml")
    ruleset = type(rules)(rules=[*rules.rules, *extra])
    latest = LatestValues()
    history = {}
    checked = 0
    for i, snap in enumerate(fleet_snapshots):
        latest.update(snapshot_values(snap, catalog).values, snap.ts, snap.interval_s)
        now = snap.ts + (0.0 if i % 3 else 100.0)
        for values, seen in ((latest.view(now), latest.last_seen()), (latest.current(now), latest.seen())):
            ctx = EvalContext(
                now=now,
                values=values,
                last_seen=seen,
                catalog=catalog,
                baseline=_baseline,
                history=lambda s, e: history.get((s, e), []),
            )
            for plan in plans_for(ruleset, catalog):
                entities = entities_of(plan.rule.leaves(), ctx, plan.scope)
                assert plan.entities(ctx) == entities, plan.name
                for e in [*entities, "7", ""]:
                    assert plan.check(ctx, e) == holds(plan.rule.when, ctx, e, plan.scope), (plan.name, e)
                    checked += 1
    assert checked > 1000
