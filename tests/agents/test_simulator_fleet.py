"""Healthy-fleet properties of the simulator: shape, validity, determinism, monotonic counters, speed."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.timeseries import Tick, histograms, interval_means, values
from tailhound.snapshot import CounterSample, HistogramSample, Snapshot

HOUR = 3600.0
SOURCES = ("vllm", "dcgm", "node", "blackbox")


@pytest.fixture(scope="module")
def healthy() -> tuple[list[Tick], float]:
    """One healthy hour of the default 4-node fleet (kept in memory), and its generation CPU time."""
    t0 = time.process_time()
    ticks = list(FleetSimulator(SimConfig()).run(HOUR))
    return ticks, time.process_time() - t0


def test_generation_is_fast(healthy: tuple[list[Tick], float]) -> None:
    """A guard, not a benchmark: streaming 4 nodes x 1 h at 15 s takes well under a second here."""
    t0 = time.process_time()
    n = sum(len(snaps) for _, snaps in FleetSimulator(SimConfig(seed=11)).run(HOUR))
    cpu_s = time.process_time() - t0
    assert n == 240 * 4 * 4
    assert cpu_s < 3.0, f"4 nodes x 1 h took {cpu_s:.2f} s of CPU"
    assert healthy[1] < 6.0  # also keeping every snapshot alive (garbage-collector pressure)


def test_run_yields_one_tick_per_interval(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    cfg = SimConfig()
    assert len(ticks) == 240
    assert [ts for ts, _ in ticks] == [cfg.start_ts + 15.0 * k for k in range(240)]


def test_one_snapshot_per_source_per_node_per_tick(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    nodes = [f"gpu-node-{i}" for i in range(1, 5)]
    for ts, snaps in ticks:
        keys = sorted((s.node, s.source) for s in snaps)
        assert keys == sorted((n, src) for n in nodes for src in SOURCES)
        for s in snaps:
            assert s.ts == ts
            assert s.interval_s == 15.0


def test_snapshots_round_trip(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    for _, snaps in ticks[::12]:
        for s in snaps:
            assert Snapshot.model_validate_json(s.model_dump_json()) == s


def test_labels(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    uuids: dict[tuple[str, str], set[str]] = defaultdict(set)
    for _, snaps in ticks[:3]:
        for s in snaps:
            if s.source == "vllm":
                assert s.labels == {"model_name": "meta-llama/Llama-3.1-70B-Instruct", "engine": "0"}
                for sample in s.samples:
                    assert sample.labels["model_name"] == s.labels["model_name"]
                    assert sample.labels["engine"] == "0"
            elif s.source == "dcgm":
                gpus = {x.labels["gpu"] for x in s.samples}
                assert gpus == {str(i) for i in range(8)}
                for x in s.samples:
                    assert x.labels["Hostname"] == s.node
                    assert x.labels["modelName"] == "NVIDIA H100 80GB HBM3"
                    assert x.labels["UUID"].startswith("GPU-")
                    uuids[(s.node, x.labels["gpu"])].add(x.labels["UUID"])
            elif s.source == "blackbox":
                assert s.labels == {"target": f"http://{s.node}:8000/health", "module": "http_2xx"}
                phases = {x.labels["phase"] for x in s.find("probe_http_duration_seconds")}
                assert phases == {"resolve", "connect", "tls", "processing", "transfer"}
    assert all(len(v) == 1 for v in uuids.values())  # stable per GPU
    assert len({next(iter(v)) for v in uuids.values()}) == 32  # and unique


def test_expected_metric_names_present(healthy: tuple[list[Tick], float]) -> None:
    _, snaps = healthy[0][0]
    names = {(s.source, x.name) for s in snaps for x in s.samples}
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
        "vllm:request_success_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_queue_time_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
        assert ("vllm", name) in names, name
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_SLOWDOWN_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    ):
        assert ("dcgm", name) in names, name
    for name in (
        "node_netstat_Tcp_RetransSegs",
        "node_netstat_Tcp_OutSegs",
        "node_netstat_TcpExt_ListenOverflows",
        "node_netstat_TcpExt_ListenDrops",
        "node_network_receive_bytes_total",
        "node_network_transmit_bytes_total",
        "node_sockstat_TCP_tw",
        "node_sockstat_TCP_inuse",
        "node_netstat_Tcp_CurrEstab",
    ):
        assert ("node", name) in names, name
    for name in ("probe_success", "probe_duration_seconds", "probe_http_duration_seconds"):
        assert ("blackbox", name) in names, name


def test_real_vllm_bucket_bounds(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    ttft = histograms(ticks[:1], "gpu-node-1", "vllm", "vllm:time_to_first_token_seconds")[0]
    itl = histograms(ticks[:1], "gpu-node-1", "vllm", "vllm:inter_token_latency_seconds")[0]
    e2e = histograms(ticks[:1], "gpu-node-1", "vllm", "vllm:e2e_request_latency_seconds")[0]
    assert ttft.le[:4] == [0.001, 0.005, 0.01, 0.02] and ttft.le[-1] == 2560.0 and len(ttft.le) == 22
    assert itl.le[:3] == [0.01, 0.025, 0.05] and itl.le[-1] == 80.0 and len(itl.le) == 19
    assert e2e.le[:3] == [0.3, 0.5, 0.8] and e2e.le[-1] == 7680.0 and len(e2e.le) == 21


def test_counters_and_histograms_monotonic_over_a_healthy_hour(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    last: dict[tuple, float | tuple] = {}
    first_count: dict[tuple, float] = {}
    for _, snaps in ticks:
        for s in snaps:
            for x in s.samples:
                key = (s.node, s.source, x.name, tuple(sorted(x.labels.items())))
                if isinstance(x, CounterSample):
                    assert x.value >= last.get(key, 0.0), key
                    last[key] = x.value
                elif isinstance(x, HistogramSample):
                    assert x.counts == sorted(x.counts) and x.counts[-1] <= x.count
                    prev = last.get(key)
                    if prev is not None:
                        p_count, p_sum, p_counts = prev
                        assert x.count >= p_count and x.sum >= p_sum
                        assert all(c >= pc for c, pc in zip(x.counts, p_counts, strict=True))
                    first_count.setdefault(key, x.count)
                    last[key] = (x.count, x.sum, x.counts)
    grown = [k for k, c0 in first_count.items() if last[k][0] > c0]  # type: ignore[index]
    assert len(grown) == len(first_count) == 4 * 7


def test_healthy_fleet_stays_healthy(healthy: tuple[list[Tick], float]) -> None:
    ticks, _ = healthy
    for _, snaps in ticks:
        for s in snaps:
            if s.source == "dcgm":
                by_gpu: dict[str, dict[str, float]] = defaultdict(dict)
                for x in s.samples:
                    if x.kind != "histogram":
                        by_gpu[x.labels["gpu"]][x.name] = x.value
                for g in by_gpu.values():
                    temp, clock, max_clock = (
                        g["DCGM_FI_DEV_GPU_TEMP"],
                        g["DCGM_FI_DEV_SM_CLOCK"],
                        g["DCGM_FI_DEV_MAX_SM_CLOCK"],
                    )
                    assert not (temp >= 85 and clock < 0.8 * max_clock)
                    assert 45 <= temp < 80
                    assert clock > 0.9 * max_clock
                    assert int(g["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]) & 0x60 == 0
                    assert 0.15 <= g["DCGM_FI_PROF_DRAM_ACTIVE"] <= 0.65  # healthy: below the 0.75 of the rules
                    assert 0 <= g["DCGM_FI_DEV_GPU_UTIL"] <= 100
            elif s.source == "vllm":
                kv = next(s.find("vllm:kv_cache_usage_perc")).value
                assert 0.0 <= kv < 0.9
            elif s.source == "blackbox":
                assert next(s.find("probe_success")).value == 1.0
                assert next(s.find("probe_duration_seconds")).value < 0.05
    for node in ("gpu-node-1", "gpu-node-4"):
        waiting = values(ticks, node, "vllm", "vllm:num_requests_waiting")
        assert sum(w > 0 for w in waiting) <= 5
        itl = [m for m in interval_means(histograms(ticks, node, "vllm", "vllm:inter_token_latency_seconds")) if m]
        assert min(itl) > 0.015 and max(itl) < 0.06


def test_determinism() -> None:
    cfg = SimConfig(nodes=2)
    faults = [FaultSpec.parse("thermal-throttle@2m+3m:node=gpu-node-2"), FaultSpec.parse("engine-restart@4m")]

    def dump(seed: int) -> list[str]:
        sim = FleetSimulator(SimConfig(nodes=cfg.nodes, seed=seed), faults)
        return [s.model_dump_json() for _, snaps in sim.run(600) for s in snaps]

    a, b = dump(7), dump(7)
    assert a == b
    assert dump(8) != a


def test_step_and_run_continue_the_same_timeline() -> None:
    a = FleetSimulator(SimConfig(nodes=1))
    b = FleetSimulator(SimConfig(nodes=1))
    ticks_a = list(a.run(150))
    ticks_b = [b.step() for _ in range(4)] + list(b.run(90))
    assert len(ticks_a) == len(ticks_b) == 10
    assert [[s.model_dump_json() for s in snaps] for _, snaps in ticks_a] == [
        [s.model_dump_json() for s in snaps] for _, snaps in ticks_b
    ]
    assert a.node_names == ["gpu-node-1"]


def test_sources_can_be_restricted() -> None:
    sim = FleetSimulator(SimConfig(nodes=2, sources=("vllm", "blackbox")))
    _, snaps = sim.step()
    assert sorted((s.node, s.source) for s in snaps) == [
        ("gpu-node-1", "blackbox"),
        ("gpu-node-1", "vllm"),
        ("gpu-node-2", "blackbox"),
        ("gpu-node-2", "vllm"),
    ]
