"""The simulator's real-fleet features (issue 12): dcgm-exporter's default field set, a TGI engine, realistic
noise, and the faults retry-storm, rolling-deploy, warm-gpu, long-prompt-hol, long-prompt-prefill,
generation-length-growth and load-imbalance (ground truth: each moves the signals it should)."""

from __future__ import annotations

import statistics
from functools import cache
from pathlib import Path

from tailhound.agents.exposition import parse_exposition
from tailhound.agents.render import render_samples
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.dcgm_fields import DCGM_DEFAULT_COUNTERS, DEFAULT_SERIES
from tailhound.agents.simulator.engine_params import HOL_MAX_WAITING
from tailhound.agents.simulator.faults import ROLLING_DOWN_S, WARM_GPU_EXTRA_C
from tailhound.agents.simulator.gpu import SLOWDOWN_TEMP_C
from tailhound.agents.simulator.histogram import TGI_DURATION_BUCKETS
from tailhound.agents.simulator.recording import snapshot_to_record
from tailhound.agents.simulator.timeseries import Tick, deltas, histograms, interval_means, snapshot_of, values
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.streams.extract import extract

N1, N2 = "gpu-node-1", "gpu-node-2"
FIXTURES = Path(__file__).parent / "fixtures"


@cache
def simulate(faults: tuple[str, ...] = (), minutes: int = 20, **config) -> list[Tick]:
    cfg = SimConfig(**{"nodes": 2, "seed": 3, **config})
    return list(FleetSimulator(cfg, [FaultSpec.parse(f) for f in faults]).run(minutes * 60.0))


def window(series, lo_min: float, hi_min: float) -> list:
    return [x for x in series[int(lo_min * 4) : int(hi_min * 4)] if x is not None]


# --- dcgm-exporter's default counters ---------------------------------------------------------------------------
def test_default_dcgm_fields_are_exactly_the_default_counters():
    ticks = simulate((), 2, dcgm_fields="default")
    snap = snapshot_of(ticks[-1], N1, "dcgm")
    names = {s.name for s in snap.samples}
    assert names == DEFAULT_SERIES
    for absent in (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_DEV_PCIE_LINK_GEN",
    ):
        assert absent not in names
    assert len(snap.samples) == 8 * len(DEFAULT_SERIES)
    assert all(
        s.labels["DCGM_FI_DRIVER_VERSION"] and s.labels["device"] == f"nvidia{s.labels['gpu']}" for s in snap.samples
    )
    got = extract(snap)  # the catalog still reads what the default set has
    assert {"gpu.temperature", "gpu.sm_clock", "gpu.dram_bw_util", "gpu.power"} <= set(got)
    assert "gpu.clock_event_reasons" not in got and "gpu.sm_clock_max" not in got


def test_default_counters_data_follows_the_exporters_csv():
    """The simulator's default profile is the packaged copy of dcgm-exporter's default-counters.csv."""
    csv = Path(__file__).resolve().parents[2] / "tailhound" / "catalog" / "dcgm-default-counters.csv"
    rows = [
        tuple(p.strip() for p in line.split(",")[:2])
        for line in csv.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert sorted(rows) == sorted(DCGM_DEFAULT_COUNTERS)


def test_all_fields_profile_is_unchanged_by_default():
    snap = snapshot_of(simulate((), 2)[-1], N1, "dcgm")
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in {s.name for s in snap.samples}


# --- TGI ---------------------------------------------------------------------------------------------------------
def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in parse_exposition(text)}


def test_tgi_exports_the_fixture_families_with_tgi_buckets():
    ticks = simulate(("retry-storm@5m+5m",), 12, engine="tgi")
    snap = snapshot_of(ticks[-1], N1, "tgi")
    assert snapshot_of(ticks[-1], N1, "vllm") is None
    assert snap.labels == {"model_name": SimConfig().model, "instance": f"{N1}:3000"}
    got = _families(render_samples(snap.samples))
    fixture = _families((FIXTURES / "tgi.prom").read_text())
    assert {k: got.get(k) for k in fixture} == fixture  # every family of the real scrape, same type
    v3 = FIXTURES / "tgi_v3.prom"  # TGI 3.x's families from its source (batch forward passes, token budget)
    if v3.exists():
        fixture = _families(v3.read_text())
        assert {k: got.get(k) for k in fixture} == fixture
    assert not any(n.startswith("vllm") or "first_token" in n for n in got)  # no TTFT, no KV-cache gauge
    assert {
        "tgi_request_inference_duration",
        "tgi_request_validation_duration",
        "tgi_request_failure",
        "tgi_request_max_new_tokens",
        "tgi_batch_inference_duration",
        "tgi_batch_max_total_tokens",
    } <= set(got)
    methods = {s.labels["method"] for s in snap.samples if s.name == "tgi_batch_inference_duration"}
    assert methods == {"decode", "prefill"}
    hists = {s.name: s for s in snap.samples if s.kind == "histogram"}
    assert all(hists[n].le == list(TGI_DURATION_BUCKETS) for n in hists if n.endswith("_duration"))
    assert TGI_DURATION_BUCKETS[:3] == (0.00015000000000000001, 0.00022500000000000002, 0.0003375)  # tgi.prom
    assert len(hists["tgi_request_input_length"].le) == 100 and hists["tgi_request_input_length"].le[-1] == 30720
    failures = {s.labels["err"]: s.value for s in snap.samples if s.name == "tgi_request_failure"}
    assert failures["overloaded"] > 100  # the storm's 429s


def test_tgi_replays_to_canonical_signals():
    ticks = simulate((), 3, engine="tgi")
    builder = SnapshotBuilder()
    snaps = [builder.build(snapshot_to_record(s)) for t in ticks for s in t[1] if s.source == "tgi"]
    got = extract(snaps[-1])
    assert got["engine.requests_running"] and "engine.requests_waiting" in got
    e2e = [s for s in snaps[-1].samples if s.name == "tgi_request_duration"][0]
    assert e2e.delta is not None and e2e.delta.count > 0
    means = interval_means(histograms(ticks, N1, "tgi", "tgi_request_duration"))
    assert 5.0 < statistics.fmean(window(means, 1, 3)) < 20.0  # seconds, like vLLM's e2e


# --- retry storm -------------------------------------------------------------------------------------------------
def _http(ticks: list[Tick], node: str, status: str) -> list[float]:
    raw = values(ticks, node, "vllm", "http_requests_total", status=status)
    return deltas([0.0 if v != v else v for v in raw])  # a label set appears with its first request


def test_retry_storm_rejects_amplifies_and_never_drains():
    ticks = simulate(("retry-storm@10m+10m:node=gpu-node-1",), 25, http_metrics=True)
    ok, c4, c5 = (_http(ticks, N1, s) for s in ("2xx", "4xx", "5xx"))
    total = [a + b + c for a, b, c in zip(ok, c4, c5, strict=True)]
    before = statistics.fmean(window(total, 5, 10))
    during = statistics.fmean(window(total, 13, 20))
    rejected = sum(window(c4, 13, 20)) + sum(window(c5, 13, 20))
    assert rejected / sum(window(total, 13, 20)) > 0.3 and sum(window(c5, 13, 20)) > 0  # 429s and some 503s
    assert during > 1.3 * before  # retries amplify the load
    assert sum(window(c4, 5, 10)) / sum(window(total, 5, 10)) < 0.01  # a background of bad requests only
    waiting = values(ticks, N1, "vllm", "vllm:num_requests_waiting")
    assert min(window(waiting, 13, 20)) > 0  # the queue never drains while clients retry
    assert max(window(waiting, 22, 25)) == 0  # and does once they back off
    e2e = interval_means(histograms(ticks, N1, "vllm", "vllm:e2e_request_latency_seconds"))
    assert statistics.fmean(window(e2e, 14, 20)) > 12.0
    assert sum(window(_http(ticks, N2, "4xx"), 13, 20)) < 20  # the other node's clients behave


def test_http_metrics_only_add_series():
    plain = simulate(("traffic-surge@3m+3m",), 8)
    with_http = simulate(("traffic-surge@3m+3m",), 8, http_metrics=True)
    for a, b in zip(plain, with_http, strict=True):
        for sa, sb in zip(a[1], b[1], strict=True):
            extra = [s for s in sb.samples if s.name == "http_requests_total"]
            assert [s for s in sb.samples if s.name != "http_requests_total"] == sa.samples
            assert sb.source != "vllm" or extra


# --- rolling deploy ----------------------------------------------------------------------------------------------
def test_rolling_deploy_restarts_engines_one_by_one():
    ticks = simulate(("rolling-deploy@5m+12m",), 20, nodes=4)
    names = SimConfig(nodes=4).node_names()
    down = {n: [i for i, t in enumerate(ticks) if snapshot_of(t, n, "vllm").error] for n in names}
    per_node = int(ROLLING_DOWN_S / 15)
    for k, n in enumerate(names):
        start = (5 + 3 * k) * 4
        assert down[n] == list(range(start, start + per_node)), n  # its turn, 90 s, one node at a time
        snap = snapshot_of(ticks[start], n, "vllm")
        assert snap.error == "connection refused" and not snap.samples
        probe = snapshot_of(ticks[start], n, "blackbox")
        assert next(probe.find("probe_success")).value == 0  # connection refused: fails at once, no timeout
        assert next(probe.find("probe_duration_seconds")).value < 0.1
        prompt = values(ticks, n, "vllm", "vllm:prompt_tokens_total")
        assert prompt[start + per_node] < prompt[start - 1]  # back with counters from zero
    # while gpu-node-1 is down, the others take its traffic
    success = values(ticks, N2, "vllm", "vllm:request_success_total", finished_reason="stop")
    d = deltas(success)
    assert statistics.fmean(d[21:26]) > 1.15 * statistics.fmean(d[10:19])


# --- warm GPU ----------------------------------------------------------------------------------------------------
def test_warm_gpu_runs_warmer_without_throttling():
    ticks = simulate(("warm-gpu@5m:node=gpu-node-2",), 15)
    temp = {g: values(ticks, N2, "dcgm", "DCGM_FI_DEV_GPU_TEMP", gpu=str(g)) for g in range(8)}
    rise = {g: statistics.fmean(window(temp[g], 10, 15)) - statistics.fmean(window(temp[g], 1, 5)) for g in range(8)}
    peers = statistics.fmean(rise[g] for g in range(8) if g != 6)  # the load moved them all a little
    assert 5.0 <= rise[6] - peers <= 8.0 and abs(rise[6] - peers - WARM_GPU_EXTRA_C) < 1.0
    assert all(abs(rise[g] - peers) < 1.0 for g in range(8) if g != 6)
    assert max(temp[6]) < SLOWDOWN_TEMP_C - 5
    reasons = values(ticks, N2, "dcgm", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="6")
    clock = values(ticks, N2, "dcgm", "DCGM_FI_DEV_SM_CLOCK", gpu="6")
    assert not any(int(r) & 0x68 for r in reasons) and min(window(clock, 5, 15)) > 1900


# --- head-of-line blocking ---------------------------------------------------------------------------------------
def test_long_prompt_hol_queues_short_requests_while_the_kv_cache_has_room():
    ticks = simulate(("long-prompt-hol@5m+10m:node=gpu-node-1",), 20)
    gen = interval_means(histograms(ticks, N1, "vllm", "vllm:request_generation_tokens"))
    queue = interval_means(histograms(ticks, N1, "vllm", "vllm:request_queue_time_seconds"))
    kv = values(ticks, N1, "vllm", "vllm:kv_cache_usage_perc")
    waiting = values(ticks, N1, "vllm", "vllm:num_requests_waiting")
    running = values(ticks, N1, "vllm", "vllm:num_requests_running")
    assert statistics.fmean(window(gen, 6, 15)) > 1000 and statistics.fmean(window(gen, 0, 5)) < 400
    assert statistics.fmean(window(queue, 7, 15)) > 0.2
    assert max(window(kv, 5, 15)) < 0.85 and statistics.fmean(window(running, 7, 15)) > 230  # slots, not memory
    assert 0 < max(window(waiting, 7, 15)) <= HOL_MAX_WAITING
    assert max(window(values(ticks, N2, "vllm", "vllm:num_requests_waiting"), 5, 15)) == 0


# --- long prompts, longer outputs, an unbalanced balancer ---------------------------------------------------------
def test_long_prompt_prefill_raises_prompts_itl_tail_and_ttft_while_the_kv_cache_has_room():
    ticks = simulate(("long-prompt-prefill@5m+10m:node=gpu-node-1",), 20)
    prompt = interval_means(histograms(ticks, N1, "vllm", "vllm:request_prompt_tokens"))
    ttft = interval_means(histograms(ticks, N1, "vllm", "vllm:time_to_first_token_seconds"))
    itl = histograms(ticks, N1, "vllm", "vllm:inter_token_latency_seconds")
    kv = values(ticks, N1, "vllm", "vllm:kv_cache_usage_perc")
    assert statistics.fmean(window(prompt, 6, 15)) > 1.3 * statistics.fmean(window(prompt, 0, 5))
    assert statistics.fmean(window(ttft, 7, 15)) > 2 * statistics.fmean(window(ttft, 0, 5))

    # the steps that waited for a long prefill: observations past 0.3 s, none before the fault
    def slow_steps(h):
        return h.count - next(c for le, c in zip(h.le, h.counts, strict=True) if le >= 0.3)

    assert slow_steps(itl[5 * 4 - 1]) == 0 and slow_steps(itl[15 * 4 - 1]) - slow_steps(itl[6 * 4]) > 100
    assert max(window(kv, 5, 15)) < 0.95


def test_generation_length_growth_doubles_outputs_at_the_same_arrivals():
    ticks = simulate(("generation-length-growth@5m+10m:node=gpu-node-1",), 20)
    gen = interval_means(histograms(ticks, N1, "vllm", "vllm:request_generation_tokens"))
    prompt = interval_means(histograms(ticks, N1, "vllm", "vllm:request_prompt_tokens"))
    before, during = statistics.fmean(window(gen, 0, 5)), statistics.fmean(window(gen, 6, 15))
    assert 1.7 < during / before < 2.3
    assert abs(statistics.fmean(window(prompt, 6, 15)) / statistics.fmean(window(prompt, 0, 5)) - 1) < 0.2
    n2 = interval_means(histograms(ticks, N2, "vllm", "vllm:request_generation_tokens"))
    assert statistics.fmean(window(n2, 6, 15)) < 1.2 * statistics.fmean(window(n2, 0, 5))


def test_load_imbalance_queues_one_node_while_its_peers_idle():
    ticks = simulate(("load-imbalance@5m+10m:node=gpu-node-2",), 20, nodes=3)
    waiting = {n: values(ticks, n, "vllm", "vllm:num_requests_waiting") for n in (N1, N2, "gpu-node-3")}
    running = {n: values(ticks, n, "vllm", "vllm:num_requests_running") for n in (N1, N2, "gpu-node-3")}
    assert max(window(waiting[N2], 7, 15)) > 0 and max(window(waiting[N1], 5, 15)) == 0
    assert statistics.fmean(window(running[N2], 7, 15)) > 2 * statistics.fmean(window(running["gpu-node-3"], 7, 15))


# --- realistic noise ---------------------------------------------------------------------------------------------
def test_realistic_noise_is_deterministic_and_adds_swings_and_missed_scrapes():
    a = simulate((), 40, nodes=4, noise="realistic")
    b = list(FleetSimulator(SimConfig(nodes=4, seed=3, noise="realistic")).run(10 * 60.0))
    assert [s.model_dump_json() for t in a[:40] for s in t[1]] == [s.model_dump_json() for t in b for s in t[1]]
    errors = [s for t in a for s in t[1] if s.error]
    assert errors and all(s.error == "scrape timed out" and not s.samples for s in errors)
    basic = simulate((), 40, nodes=4)

    def spread(ticks):
        done = deltas(values(ticks, N1, "vllm", "vllm:prompt_tokens_total"))[4:]
        done = [x for x in done if x == x]
        return statistics.pstdev(done) / statistics.fmean(done)

    assert spread(a) > spread(basic)
    waiting = [
        w for n in SimConfig(nodes=4).node_names() for w in values(a, n, "vllm", "vllm:num_requests_waiting") if w == w
    ]
    assert sum(w > 0 for w in waiting) < 0.05 * len(waiting)  # still a healthy fleet
