"""Each injected fault moves the signals it should (and leaves the others alone)."""

from __future__ import annotations

import statistics
from functools import cache

import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.timeseries import Tick, deltas, histograms, interval_means, snapshot_of, values

N1, N2 = "gpu-node-1", "gpu-node-2"
START_K, END_K = 40, 100  # default window of the per-fault runs: 10 min -> 25 min (ticks of 15 s)
WINDOW = "@10m+15m"


NO_DCGM = ("vllm", "node", "blackbox")


@cache
def simulate(
    faults: tuple[str, ...] = (),
    minutes: int = 40,
    nodes: int = 2,
    per_link: bool = False,
    sources: tuple[str, ...] = NO_DCGM,
) -> list[Tick]:
    """A cached run (`faults` in CLI form) of `nodes` nodes for `minutes` (no DCGM unless asked)."""
    cfg = SimConfig(nodes=nodes, nvlink_per_link=per_link, sources=sources)
    return list(FleetSimulator(cfg, [FaultSpec.parse(f) for f in faults]).run(minutes * 60.0))


def gpu_series(ticks: list[Tick], node: str, name: str, gpu: int) -> list[float]:
    return values(ticks, node, "dcgm", name, gpu=str(gpu))


def mean_over(series: list[float | None], lo: int, hi: int) -> float:
    xs = [x for x in series[lo:hi] if x is not None]
    assert xs, "no observations in the window"
    return statistics.fmean(xs)


def itl_means(ticks: list[Tick], node: str) -> list[float | None]:
    return interval_means(histograms(ticks, node, "vllm", "vllm:inter_token_latency_seconds"))


def vllm_dumps(ticks: list[Tick], node: str) -> list[str]:
    return [snapshot_of(t, node, "vllm").model_dump_json() for t in ticks]  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------- thermal


@pytest.fixture(scope="module")
def thermal() -> list[Tick]:
    fault = FaultSpec("thermal-throttle", start_s=20 * 60, duration_s=15 * 60, node=N2, gpus=(3, 5))
    return list(FleetSimulator(SimConfig(), [fault]).run(3600.0))


def throttled(ticks: list[Tick], node: str, gpu: int) -> list[bool]:
    temp = gpu_series(ticks, node, "DCGM_FI_DEV_GPU_TEMP", gpu)
    clock = gpu_series(ticks, node, "DCGM_FI_DEV_SM_CLOCK", gpu)
    max_clock = gpu_series(ticks, node, "DCGM_FI_DEV_MAX_SM_CLOCK", gpu)
    return [t >= 85 and c < 0.8 * m for t, c, m in zip(temp, clock, max_clock, strict=True)]


def test_thermal_throttle_hits_the_target_gpus(thermal: list[Tick]) -> None:
    start, end = 80, 140  # 20 min and 35 min
    for gpu in (3, 5):
        hot = throttled(thermal, N2, gpu)
        assert not any(hot[:start])
        assert all(hot[start + 8 : end]), f"GPU {gpu} not throttled continuously from 2 min into the fault"
        reasons = gpu_series(thermal, N2, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu)
        assert all(int(r) & 0x60 == 0x60 for r in reasons[start + 8 : end])
        temps = gpu_series(thermal, N2, "DCGM_FI_DEV_GPU_TEMP", gpu)
        assert max(temps) <= 91 and min(temps[start + 8 : end]) >= 86
        clocks = gpu_series(thermal, N2, "DCGM_FI_DEV_SM_CLOCK", gpu)
        assert all(1000 <= c <= 1200 for c in clocks[start + 8 : end])
        # Recovery: cooled down and at full clock within 2 minutes of the fault's end.
        assert not any(hot[end + 2 :])
        assert all(t < 80 for t in temps[end + 8 :])
        assert all(c > 0.9 * 1980 for c in clocks[end + 8 :])


def test_thermal_throttle_spares_other_gpus_and_nodes(thermal: list[Tick]) -> None:
    for node in ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"):
        for gpu in range(8):
            if node == N2 and gpu in (3, 5):
                continue
            assert not any(throttled(thermal, node, gpu)), (node, gpu)
            reasons = gpu_series(thermal, node, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu)
            assert all(int(r) & 0x60 == 0 for r in reasons)


def test_thermal_throttle_slows_the_whole_engine(thermal: list[Tick]) -> None:
    itl = itl_means(thermal, N2)
    before, during = mean_over(itl, 40, 80), mean_over(itl, 88, 140)
    assert during > 1.8 * before, (before, during)
    e2e = interval_means(histograms(thermal, N2, "vllm", "vllm:e2e_request_latency_seconds"))
    assert mean_over(e2e, 88, 140) > 1.8 * mean_over(e2e, 40, 80)
    # Other nodes keep their latency, and the node recovers after the fault.
    other = itl_means(thermal, N1)
    assert mean_over(other, 88, 140) < 1.25 * mean_over(other, 40, 80)
    assert mean_over(itl, 225, 240) < 1.25 * before


# ----------------------------------------------------------------------------- engine-side faults


def test_traffic_surge_builds_a_persistent_queue() -> None:
    ticks = simulate(("traffic-surge" + WINDOW,))  # fleet-wide by default
    for node in (N1, N2):
        waiting = values(ticks, node, "vllm", "vllm:num_requests_waiting")
        assert max(waiting[:START_K]) == 0
        assert all(w > 0 for w in waiting[START_K + 1 : END_K])
        assert waiting[END_K - 1] > waiting[START_K + 4] > 0
        assert max(waiting) > 500
        queue = interval_means(histograms(ticks, node, "vllm", "vllm:request_queue_time_seconds"))
        assert mean_over(queue, START_K + 8, END_K) > 10 * mean_over(queue, 0, START_K)
        kv = values(ticks, node, "vllm", "vllm:kv_cache_usage_perc")
        assert min(kv[START_K + 2 : END_K]) > max(kv[:START_K])
        assert waiting[-1] < 0.5 * waiting[END_K - 1]  # draining after the surge


def test_kv_cache_pressure() -> None:
    ticks = simulate(("kv-cache-pressure" + WINDOW,))
    kv = values(ticks, N1, "vllm", "vllm:kv_cache_usage_perc")
    assert max(kv[:START_K]) < 0.9
    assert all(k >= 0.95 for k in kv[START_K + 1 : END_K])
    preempt = deltas(values(ticks, N1, "vllm", "vllm:num_preemptions_total"))
    assert sum(preempt[:START_K]) == 0
    assert sum(p > 0 for p in preempt[START_K:END_K]) > 40
    ttft = interval_means(histograms(ticks, N1, "vllm", "vllm:time_to_first_token_seconds"))
    assert mean_over(ttft, START_K + 4, END_K) > 5 * mean_over(ttft, 0, START_K)
    # The other node is untouched.
    assert max(values(ticks, N2, "vllm", "vllm:kv_cache_usage_perc")) < 0.9


def test_memory_bandwidth_saturation() -> None:
    ticks = simulate(("memory-bandwidth-saturation" + WINDOW,), sources=("vllm", "dcgm"))
    for gpu in range(8):
        dram = gpu_series(ticks, N1, "DCGM_FI_PROF_DRAM_ACTIVE", gpu)
        assert all(0.77 < d < 0.85 for d in dram[START_K:END_K])  # what decode reads on a real H200
        assert all(0.15 < d < 0.65 for d in dram[:START_K])
        assert max(gpu_series(ticks, N2, "DCGM_FI_PROF_DRAM_ACTIVE", gpu)) < 0.65
    itl = itl_means(ticks, N1)
    ratio = mean_over(itl, START_K + 4, END_K) / mean_over(itl, 0, START_K)
    assert 1.8 < ratio < 4.0, ratio
    waiting = values(ticks, N1, "vllm", "vllm:num_requests_waiting")
    assert waiting[END_K - 1] > waiting[START_K + 8] > 0


def test_nvlink_degraded() -> None:
    ticks = simulate(("nvlink-degraded" + WINDOW,), nodes=1, per_link=True, sources=("vllm", "dcgm"))
    for gpu in range(8):
        tx = gpu_series(ticks, N1, "DCGM_FI_PROF_NVLINK_TX_BYTES", gpu)
        assert max(tx[START_K:END_K]) < 0.25 * statistics.fmean(tx[:START_K])
        assert min(tx[END_K + 1 :]) > 0.5 * statistics.fmean(tx[:START_K])
        dead = deltas(gpu_series(ticks, N1, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", gpu))
        alive = deltas(gpu_series(ticks, N1, "DCGM_FI_DEV_NVLINK_BANDWIDTH_L1", gpu))
        assert all(d < 1e6 for d in dead[START_K + 1 : END_K])
        assert all(a > 1e9 for a in alive[1:])
    itl = itl_means(ticks, N1)
    ratio = mean_over(itl, START_K, END_K) / mean_over(itl, 0, START_K)
    assert 1.05 < ratio < 2.0, ratio


def test_short_blip_is_one_tick() -> None:
    ticks = simulate(("short-blip@10m",))
    itl = itl_means(ticks, N1)
    base = mean_over(itl, 0, START_K)
    assert itl[START_K] is not None and itl[START_K] > 2 * base
    assert mean_over(itl, START_K + 3, START_K + 40) < 1.2 * base
    waiting = values(ticks, N1, "vllm", "vllm:num_requests_waiting")
    assert all(w == 0 for w in waiting[START_K + 3 :])


def test_engine_restart_resets_vllm_counters_once() -> None:
    ticks = simulate(("engine-restart@10m",))
    for name, labels in (
        ("vllm:prompt_tokens_total", {}),
        ("vllm:generation_tokens_total", {}),
        ("vllm:request_success_total", {"finished_reason": "stop"}),
        ("vllm:prefix_cache_queries_total", {}),
    ):
        series = values(ticks, N1, "vllm", name, **labels)
        drops = [k for k in range(1, len(series)) if series[k] < series[k - 1]]
        assert drops == [START_K], (name, drops)
        assert series[START_K] == 0 and series[START_K - 1] > 0
        assert all(b > a for a, b in zip(series[START_K:], series[START_K + 1 :], strict=False))
        other = values(ticks, N2, "vllm", name, **labels)
        assert other == sorted(other)
    e2e = histograms(ticks, N1, "vllm", "vllm:e2e_request_latency_seconds")
    assert e2e[START_K].count == 0 and e2e[START_K].sum == 0 and e2e[START_K - 1].count > 0
    assert e2e[-1].count > 0
    assert values(ticks, N1, "vllm", "vllm:num_requests_running")[START_K] == 0
    assert values(ticks, N1, "vllm", "vllm:num_requests_waiting")[START_K] == 0
    assert values(ticks, N1, "vllm", "vllm:num_requests_running")[START_K + 2] > 0
    itl = itl_means(ticks, N1)
    assert mean_over(itl, START_K + 1, len(itl)) < 1.3 * mean_over(itl, 0, START_K)
    out_segs = values(ticks, N1, "node", "node_netstat_Tcp_OutSegs")
    assert out_segs == sorted(out_segs)  # only the engine restarted


# ---------------------------------------------------------------------------- network-side faults


def probe_phase(ticks: list[Tick], node: str, phase: str) -> list[float]:
    return values(ticks, node, "blackbox", "probe_http_duration_seconds", phase=phase)


def test_network_path_degradation_is_outside_the_engine() -> None:
    ticks = simulate(("network-path-degradation@10m+25m",))
    base = simulate()
    duration = values(ticks, N1, "blackbox", "probe_duration_seconds")
    success = values(ticks, N1, "blackbox", "probe_success")
    connect = probe_phase(ticks, N1, "connect")
    end = START_K + 100
    assert all(c < 0.005 for c in connect[:START_K])
    assert all(c >= 0.02 for c in connect[START_K:end])
    assert statistics.median(duration[START_K:end]) > 5 * statistics.median(duration[:START_K])
    assert all(s == 1 for s in success[:START_K] + success[end:])
    assert 0 < success[START_K:end].count(0.0) < 10  # occasional probe failures
    retrans = deltas(values(ticks, N1, "node", "node_netstat_Tcp_RetransSegs"))
    out = deltas(values(ticks, N1, "node", "node_netstat_Tcp_OutSegs"))
    ratio_before = sum(retrans[1:START_K]) / sum(out[1:START_K])
    ratio_during = sum(retrans[START_K + 1 : end]) / sum(out[START_K + 1 : end])
    assert ratio_during > 10 * ratio_before
    # Engine-side telemetry is exactly what the healthy run produced.
    assert vllm_dumps(ticks, N1) == vllm_dumps(base, N1)
    assert all(c < 0.005 for c in probe_phase(ticks, N2, "connect"))


def test_ingress_overflow() -> None:
    ticks = simulate(("ingress-overflow" + WINDOW,))
    base = simulate()
    overflows = deltas(values(ticks, N1, "node", "node_netstat_TcpExt_ListenOverflows"))
    drops = values(ticks, N1, "node", "node_netstat_TcpExt_ListenDrops")
    ovf_total = values(ticks, N1, "node", "node_netstat_TcpExt_ListenOverflows")
    assert sum(overflows[:START_K]) == 0 and sum(overflows[END_K + 1 :]) == 0
    assert all(o > 0 for o in overflows[START_K:END_K])
    assert all(d >= o for d, o in zip(drops, ovf_total, strict=True))
    tw = values(ticks, N1, "node", "node_sockstat_TCP_tw")
    assert max(tw[:START_K]) < 2000 and min(tw[START_K:END_K]) > 10_000
    success = values(ticks, N1, "blackbox", "probe_success")
    assert success[START_K:END_K].count(0.0) >= 3 and all(s == 1 for s in success[:START_K])
    assert vllm_dumps(ticks, N1) == vllm_dumps(base, N1)
    assert max(deltas(values(ticks, N2, "node", "node_netstat_TcpExt_ListenOverflows"))) == 0


# ------------------------------------------------------------------------------ GPU hardware error (issue 27)


def test_gpu_xid_error_reports_xid_48_a_remapped_row_and_takes_the_engine_down() -> None:
    """XID 48 and one uncorrectable remapped row on the faulty GPU only, the node's engine scrapes fail for
    the fault, the other node takes its traffic, and a reset at the end clears the XID (the row stays)."""
    ticks = simulate((f"gpu-xid-error{WINDOW}:node={N1}:gpus=2",), sources=("vllm", "dcgm", "node", "blackbox"))
    xid = gpu_series(ticks, N1, "DCGM_FI_DEV_XID_ERRORS", 2)
    rows = gpu_series(ticks, N1, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 2)
    assert set(xid[:START_K]) == {0.0} and set(xid[START_K:END_K]) == {48.0} and set(xid[END_K:]) == {0.0}
    assert set(rows[:START_K]) == {0.0} and set(rows[START_K:]) == {1.0}
    for gpu in (0, 1, 3):
        assert set(gpu_series(ticks, N1, "DCGM_FI_DEV_XID_ERRORS", gpu)) == {0.0}
    assert set(gpu_series(ticks, N2, "DCGM_FI_DEV_XID_ERRORS", 2)) == {0.0}
    engine = [snapshot_of(t, N1, "vllm") for t in ticks]
    assert all(s is not None and s.error for s in engine[START_K:END_K])
    assert not any(s is not None and s.error for s in engine[:START_K] + engine[END_K + 1 :])

    def finished(run: list[Tick]) -> float:
        counts = deltas([h.count for h in histograms(run, N2, "vllm", "vllm:e2e_request_latency_seconds")])
        return mean_over(counts, START_K + 8, END_K)

    healthy = simulate((), sources=("vllm", "dcgm", "node", "blackbox"))
    assert finished(ticks) > 1.25 * finished(healthy)  # two nodes' traffic on one, up to its capacity


def test_power_cap_lowers_clocks_with_sw_power_cap_and_normal_temperatures() -> None:
    """A 500 W limit under load: SM clock down, reason sw_power_cap and never a thermal one, power at the
    limit, temperatures cooler than uncapped, the engine
    less than a fifth slower (decode is memory-bound: the clock costs little)."""
    sources = ("vllm", "dcgm")
    capped = simulate(("power-cap@10m",), minutes=25, sources=sources)
    free = simulate((), minutes=25, sources=sources)
    for node in (N1, N2):  # every node: a fleet-wide setting by default
        for gpu in (0, 7):
            clock = gpu_series(capped, node, "DCGM_FI_DEV_SM_CLOCK", gpu)
            reasons = [int(r) for r in gpu_series(capped, node, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu)]
            power = gpu_series(capped, node, "DCGM_FI_DEV_POWER_USAGE", gpu)
            temps = gpu_series(capped, node, "DCGM_FI_DEV_GPU_TEMP", gpu)
            assert all(r & 0x60 == 0 for r in reasons)
            assert not any(r & 0x4 for r in reasons[:40])
            busy = range(42, 100)
            assert sum(bool(reasons[k] & 0x4) for k in busy) > 0.8 * len(busy)
            assert statistics.fmean(clock[k] for k in busy) < 0.98 * 1980  # the clock gives way at busy ticks
            assert min(clock[k] for k in busy) < 0.92 * 1980
            assert max(power[k] for k in busy) <= 500.0
            free_temps = gpu_series(free, node, "DCGM_FI_DEV_GPU_TEMP", gpu)
            assert max(temps[k] for k in busy) < 75 and statistics.fmean(temps[k] for k in busy) < statistics.fmean(
                free_temps[k] for k in busy
            )
        itl, free_itl = itl_means(capped, node), itl_means(free, node)
        assert 1.0 < mean_over(itl, 44, 100) / mean_over(free_itl, 44, 100) < 1.2


def test_health_check_flap_removes_and_readds_the_node_every_cycle() -> None:
    """Every 2 minutes: /health near the timeout (~2.5 s) for 3 ticks, timing out for 2 (probe fails), then 3
    ticks out of the load balancer: no running requests while the engine still scrapes fine, the other node
    takes the traffic, /health fast again. Before the fault nothing of it."""
    ticks = simulate((f"health-check-flap{WINDOW}:node={N1}",))
    running = values(ticks, N1, "vllm", "vllm:num_requests_running")
    success = values(ticks, N1, "blackbox", "probe_success")
    duration = values(ticks, N1, "blackbox", "probe_duration_seconds")
    assert min(running[:START_K]) > 0 and set(success[:START_K]) == {1.0} and max(duration[:START_K]) < 0.5
    for cycle in range(START_K, END_K - 8, 8):
        slow, failing, removed = range(cycle, cycle + 3), range(cycle + 3, cycle + 5), range(cycle + 5, cycle + 8)
        assert all(success[k] == 1.0 and 2.0 < duration[k] < 3.0 and running[k] > 0 for k in slow)
        assert all(success[k] == 0.0 and duration[k] == 5.0 for k in failing)
        assert all(success[k] == 1.0 and duration[k] < 0.5 and running[k] == 0 for k in removed)
    assert not any(snapshot_of(t, N1, "vllm").error for t in ticks)  # type: ignore[union-attr]
    other = values(ticks, N2, "vllm", "vllm:num_requests_running")
    healthy = values(simulate(), N2, "vllm", "vllm:num_requests_running")
    removed_ticks = [k for k in range(START_K, END_K) if (k - START_K) % 8 >= 5]
    assert statistics.fmean(other[k] for k in removed_ticks) > 1.3 * statistics.fmean(healthy[k] for k in removed_ticks)
    assert min(running[END_K + 1 :]) > 0 and set(success[END_K + 1 :]) == {1.0}


def test_scale_out_adds_a_node_that_serves_nothing_until_it_has_loaded() -> None:
    """Before the fault the added node sends nothing; for COLD_START_S it is scraped with nothing running or
    finished and its /health refused; then it takes its share (every node (N-1)/N of its traffic)."""
    from tailhound.agents.simulator.scale_out import COLD_START_S

    ticks = simulate((f"scale-out@10m:node={N2}",))
    cold_k = START_K + int(COLD_START_S // 15)
    assert all(snapshot_of(t, N2, "vllm") is None and snapshot_of(t, N2, "blackbox") is None for t in ticks[:START_K])
    running = values(ticks, N2, "vllm", "vllm:num_requests_running")
    success = values(ticks, N2, "blackbox", "probe_success")
    finished = values(ticks, N2, "vllm", "vllm:request_success_total", finished_reason="stop")
    assert set(running[START_K:cold_k]) == {0.0} and set(success[START_K:cold_k]) == {0.0}
    assert set(finished[START_K:cold_k]) == {0.0}
    assert min(running[cold_k + 1 :]) > 0 and set(success[cold_k:]) == {1.0}
    before = statistics.fmean(values(ticks, N1, "vllm", "vllm:num_requests_running")[START_K - 20 : START_K])
    after = statistics.fmean(values(ticks, N1, "vllm", "vllm:num_requests_running")[cold_k + 4 : cold_k + 24])
    assert after < 0.75 * before  # the first node hands half its traffic to the new one
