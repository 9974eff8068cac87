from __future__ import annotations

import logging

import pynvml
import pytest

from tailhound.agents.collectors import Collector, CollectorUnavailable
from tailhound.agents.collectors.nvml import NvmlCollector, NvmlConfig
from tailhound.agents.collectors.nvml_fields import (
    FI_NVLINK_GET_SPEED,
    FI_NVLINK_THROUGHPUT_DATA_TX,
    GpuInfo,
    GpuReading,
    NvLinkReading,
    apply_nvlink_fields,
    render_gpu,
)
from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.agents.render import ExpositionWriter
from tailhound.snapshot import Snapshot
from tailhound.streams.extract import extract
from tests.agents.fake_pynvml import FakeNvml

NODE = "gpu-node-1"
ALL_GPUS = {str(i) for i in range(8)}


@pytest.fixture
def fake(monkeypatch) -> FakeNvml:
    return FakeNvml.fleet().install(monkeypatch)


@pytest.fixture
async def collector(fake):
    c = NvmlCollector(NvmlConfig(), node=NODE)
    yield c
    await c.close()


async def scrape(c: NvmlCollector):
    [record] = await c.collect()
    return record, to_samples(parse_exposition(record.body))


def per_gpu(samples, name: str, **labels: str) -> dict[str, float]:
    return {
        s.labels["gpu"]: s.value
        for s in samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    }


async def test_one_record_per_collection_with_the_fake_values(fake, collector):
    fake.gpus[1].sm_clock_mhz = 990
    fake.gpus[4].memory_used = 10 * 2**30 + 2**19
    record, samples = await scrape(collector)
    assert (record.job, record.node, record.interval_s, record.error) == ("nvml", NODE, 1.0, None)
    assert per_gpu(samples, "tailhound_gpu_temperature_celsius") == {str(i): 40.0 + i for i in range(8)}
    assert per_gpu(samples, "tailhound_gpu_slowdown_temperature_celsius") == dict.fromkeys(ALL_GPUS, 87.0)
    assert per_gpu(samples, "tailhound_gpu_sm_clock_mhz")["1"] == 990
    assert per_gpu(samples, "tailhound_gpu_sm_clock_max_mhz") == dict.fromkeys(ALL_GPUS, 1980.0)
    assert per_gpu(samples, "tailhound_gpu_utilization_ratio") == dict.fromkeys(ALL_GPUS, 0.9)
    assert per_gpu(samples, "tailhound_gpu_memory_busy_ratio") == dict.fromkeys(ALL_GPUS, 0.4)
    assert per_gpu(samples, "tailhound_gpu_power_watts") == dict.fromkeys(ALL_GPUS, 450.0)
    assert per_gpu(samples, "tailhound_gpu_power_limit_watts") == dict.fromkeys(ALL_GPUS, 700.0)
    assert per_gpu(samples, "tailhound_gpu_memory_total_mib") == dict.fromkeys(ALL_GPUS, 81559.0)
    assert per_gpu(samples, "tailhound_gpu_memory_used_mib")["4"] == 10 * 1024 + 0.5
    assert per_gpu(samples, "tailhound_gpu_pcie_link_gen") == per_gpu(samples, "tailhound_gpu_pcie_link_gen_max")
    assert per_gpu(samples, "tailhound_gpu_pcie_link_width_max") == dict.fromkeys(ALL_GPUS, 16.0)
    assert per_gpu(samples, "tailhound_gpu_pcie_rx_bytes_per_second")["0"] == 2_000_000 * 1024
    assert per_gpu(samples, "tailhound_gpu_up") == dict.fromkeys(ALL_GPUS, 1.0)
    temp0 = next(s for s in samples if s.name == "tailhound_gpu_temperature_celsius")
    assert temp0.labels == {"gpu": "0"}
    [up0] = [s for s in samples if s.name == "tailhound_gpu_up" and s.labels["gpu"] == "0"]
    assert up0.labels == {"gpu": "0", "uuid": fake.gpus[0].uuid, "model": "NVIDIA H100 80GB HBM3"}
    [took] = [s for s in samples if s.name == "tailhound_nvml_collect_seconds"]
    assert took.labels == {} and 0 < took.value < 1
    assert isinstance(collector, Collector) and collector.job == "nvml"


async def test_fake_state_changes_show_in_the_next_collection(fake, collector):
    await scrape(collector)
    fake.gpus[0].temperature_c, fake.gpus[0].power_mw = 83, 699_500
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_temperature_celsius")["0"] == 83
    assert per_gpu(samples, "tailhound_gpu_power_watts")["0"] == 699.5


async def test_not_supported_is_absent_not_zero_and_logged_once(fake, collector, caplog):
    caplog.set_level(logging.INFO, logger="tailhound.agent.nvml")
    for _ in range(3):
        _, samples = await scrape(collector)
    ecc = per_gpu(samples, "tailhound_gpu_ecc_errors_total", type="uncorrected")
    assert set(ecc) == ALL_GPUS - {"3"} and set(ecc.values()) == {0.0}
    assert set(per_gpu(samples, "tailhound_gpu_pcie_tx_bytes_per_second")) == ALL_GPUS - {"5"}
    assert set(per_gpu(samples, "tailhound_gpu_pcie_link_gen")) == ALL_GPUS  # only the throughput call fails
    ecc_logs = [r for r in caplog.records if "nvmlDeviceGetTotalEccErrors" in r.getMessage()]
    pcie_logs = [r for r in caplog.records if "nvmlDeviceGetPcieThroughput" in r.getMessage()]
    assert len(ecc_logs) == 1 and ecc_logs[0].levelno == logging.INFO and "gpu 3" in ecc_logs[0].getMessage()
    assert len(pcie_logs) == 1 and "gpu 5" in pcie_logs[0].getMessage()
    assert fake.calls[("nvmlDeviceGetTotalEccErrors", 3)] == 1  # not asked again once unsupported
    assert fake.calls[("nvmlDeviceGetTotalEccErrors", 0)] == 6


async def test_dram_bandwidth_from_gpm_on_hopper_and_the_proxy_elsewhere(fake, collector):
    _, first = await scrape(collector)
    assert set(per_gpu(first, "tailhound_gpu_dram_bw_util_ratio")) == {"6", "7"}  # GPM needs two samples
    fake.gpus[0].dram_bw_util_pct = 81.0
    _, second = await scrape(collector)
    gpm = per_gpu(second, "tailhound_gpu_dram_bw_util_ratio", measure="gpm_dram_bw_util")
    proxy = per_gpu(second, "tailhound_gpu_dram_bw_util_ratio", measure="memory_busy_time")
    assert gpm == {"0": 0.81, **{str(i): 0.55 for i in range(1, 6)}}
    assert proxy == {"6": 0.4, "7": 0.4}


async def test_pcie_traffic_from_gpm_once_it_has_two_samples_and_the_sampling_call_elsewhere(fake, collector):
    """Measured on an H200: nvmlDeviceGetPcieThroughput costs 21 ms and ~0.75 ms of CPU per direction, so
    where GPM answers PCIE_TX/RX_PER_SEC (MiB/s, averaged over the interval) the call is not made."""
    fake.gpus[0].gpm_pcie = False  # GPM without the PCIe metrics: the sampling call stays
    _, first = await scrape(collector)  # no previous GPM sample yet: the sampling call everywhere it works
    assert per_gpu(first, "tailhound_gpu_pcie_tx_bytes_per_second") == dict.fromkeys(ALL_GPUS - {"5"}, 1_000_000 * 1024)
    for g in fake.gpus:
        g.pcie_tx_kb_s, g.pcie_rx_kb_s = 3 * 1024 * 1024, 512 * 1024  # 3 GiB/s out, 512 MiB/s in
    for _ in range(2):
        _, later = await scrape(collector)
    tx = per_gpu(later, "tailhound_gpu_pcie_tx_bytes_per_second")
    rx = per_gpu(later, "tailhound_gpu_pcie_rx_bytes_per_second")
    assert tx == dict.fromkeys(ALL_GPUS - {"5"}, 3 * 2**30) and rx == dict.fromkeys(ALL_GPUS - {"5"}, 512 * 2**20)
    calls = {i: fake.calls[("nvmlDeviceGetPcieThroughput", i)] for i in range(8)}
    assert calls == {0: 6, 1: 2, 2: 2, 3: 2, 4: 2, 5: 1, 6: 6, 7: 6}  # GPUs 1-4: the first collection only


async def test_gpm_switched_off_uses_the_proxy_everywhere(fake):
    c = NvmlCollector(NvmlConfig(gpm=False, nvlink=False), node=NODE)
    try:
        _, samples = await scrape(c)
    finally:
        await c.close()
    assert per_gpu(samples, "tailhound_gpu_dram_bw_util_ratio", measure="memory_busy_time") == dict.fromkeys(
        ALL_GPUS, 0.4
    )
    assert not [s for s in samples if s.name.startswith("tailhound_gpu_nvlink")]
    assert fake.calls[("nvmlGpmQueryDeviceSupport", 0)] == 0


async def test_clock_event_reasons_are_decoded(fake, collector):
    fake.gpus[1].clock_event_reasons = 0x40 | 0x20
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_clock_event_reasons")["1"] == 0x60
    reasons = {
        s.labels["reason"]: s.value
        for s in samples
        if s.name == "tailhound_gpu_clock_event_reason" and s.labels["gpu"] == "1"
    }
    assert reasons["sw_thermal_slowdown"] == 1 and reasons["hw_thermal_slowdown"] == 1
    assert reasons["gpu_idle"] == 0 and sum(reasons.values()) == 2 and len(reasons) == 9


async def test_clock_event_reasons_fall_back_to_the_old_call(fake, collector, monkeypatch):
    fake.gpus[0].not_supported.add("nvmlDeviceGetCurrentClocksEventReasons")
    monkeypatch.delattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")  # an older pynvml lacks the name
    fake.gpus[2].clock_event_reasons = 0x4
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_clock_event_reasons")["2"] == 0x4
    assert fake.calls[("nvmlDeviceGetCurrentClocksThrottleReasons", 2)] == 1


async def test_nvlink_down_link_and_monotonic_counters(fake, collector):
    _, first = await scrape(collector)
    _, second = await scrape(collector)

    def by_link(samples, name):
        return {(s.labels["gpu"], s.labels["link"]): s.value for s in samples if s.name == name}

    up = by_link(second, "tailhound_gpu_nvlink_up")
    assert len(up) == 8 * 18 and {link for _, link in up} == {str(n) for n in range(18)}
    assert [key for key, v in up.items() if v == 0] == [("2", "7")]
    assert by_link(second, "tailhound_gpu_nvlink_speed_mbps")[("0", "0")] == 26_562 * 8  # NVML MB/s -> Mbit/s
    for name in ("tailhound_gpu_nvlink_tx_kib_total", "tailhound_gpu_nvlink_rx_kib_total"):
        before, after = by_link(first, name), by_link(second, name)
        assert all(after[k] >= before[k] for k in before)
        assert after[("0", "3")] > before[("0", "3")] and after[("2", "7")] == before[("2", "7")]
        assert {s.kind for s in second if s.name == name} == {"counter"}


async def test_xid_events_are_counted_per_gpu(fake, collector):
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_xid_errors_total") == dict.fromkeys(ALL_GPUS, 0.0)
    assert not per_gpu(samples, "tailhound_gpu_last_xid")
    fake.inject_xid(4, 48)
    fake.inject_xid(4, 79)
    fake.inject_xid(1, 13)
    _, samples = await scrape(collector)
    xids = per_gpu(samples, "tailhound_gpu_xid_errors_total")
    assert xids["4"] == 2 and xids["1"] == 1 and xids["0"] == 0
    assert per_gpu(samples, "tailhound_gpu_last_xid") == {"4": 79, "1": 13}
    _, samples = await scrape(collector)  # drained: nothing counted twice
    assert per_gpu(samples, "tailhound_gpu_xid_errors_total")["4"] == 2


async def test_a_lost_gpu_is_absent_and_the_others_report(fake, collector, caplog):
    await scrape(collector)
    fake.gpus[3].lost = True
    for _ in range(2):
        _, samples = await scrape(collector)
    assert set(per_gpu(samples, "tailhound_gpu_temperature_celsius")) == ALL_GPUS - {"3"}
    assert not [s for s in samples if s.labels.get("gpu") == "3" and s.name != "tailhound_gpu_up"]
    assert per_gpu(samples, "tailhound_gpu_up")["3"] == 0
    assert len([r for r in caplog.records if "GpuIsLost" in r.getMessage()]) == 1
    fake.gpus[3].lost = False
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_temperature_celsius")["3"] == 43


async def test_a_gpu_lost_before_the_first_collection_reports_later(fake, collector):
    fake.gpus[6].lost = True
    _, samples = await scrape(collector)
    [up6] = [s for s in samples if s.name == "tailhound_gpu_up" and s.labels["gpu"] == "6"]
    assert up6.value == 0 and up6.labels == {"gpu": "6"}
    fake.gpus[6].lost = False
    _, samples = await scrape(collector)
    assert per_gpu(samples, "tailhound_gpu_temperature_celsius")["6"] == 46
    assert per_gpu(samples, "tailhound_gpu_xid_errors_total")["6"] == 0


async def test_no_driver_makes_the_collector_unavailable(monkeypatch):
    FakeNvml(driver=False).install(monkeypatch)
    c = NvmlCollector(NvmlConfig(), node=NODE)
    with pytest.raises(CollectorUnavailable) as exc:
        await c.collect()
    assert str(exc.value) == "nvml: no NVIDIA driver (NVML Shared Library Not Found); GPU collector off"
    await c.close()  # nothing to shut down


async def test_configured_gpus_only(fake, caplog):
    c = NvmlCollector(NvmlConfig(gpus=[2, 0, 9]), node=NODE)
    try:
        _, samples = await scrape(c)
    finally:
        await c.close()
    assert set(per_gpu(samples, "tailhound_gpu_temperature_celsius")) == {"0", "2"}
    assert any("[9]" in r.getMessage() for r in caplog.records)
    assert fake.calls[("nvmlDeviceGetTemperature", 1)] == 0


async def test_close_frees_what_it_took(fake):
    c = NvmlCollector(NvmlConfig(), node=NODE)
    await scrape(c)
    assert fake.initialised == 1 and fake._event_sets and fake._gpm_samples
    await c.close()
    assert fake.initialised == 0 and not fake._event_sets and not fake._gpm_samples


def test_config_rejects_unknown_keys_and_bad_interval():
    with pytest.raises(ValueError):
        NvmlConfig(interval=1)
    with pytest.raises(ValueError):
        NvmlConfig(interval_s=0)


async def test_catalog_signals_come_out(fake, collector):
    fake.gpus[5].sm_clock_mhz = 990
    await scrape(collector)
    record, samples = await scrape(collector)
    snap = Snapshot(ts=record.ts, node=record.node, source="nvml", samples=samples)
    signals = extract(snap)
    assert signals["gpu.temperature"] == {str(i): 40.0 + i for i in range(8)}
    assert signals["gpu.sm_clock_ratio"]["5"] == 0.5 and signals["gpu.sm_clock_ratio"]["0"] == 1.0
    assert signals["gpu.dram_bw_util"]["0"] == 0.55 and signals["gpu.dram_bw_util"]["6"] == 0.4
    assert signals["gpu.util"]["3"] == 0.9 and signals["gpu.memory_used"]["3"] == 40960
    assert signals["gpu.slowdown_temperature"]["7"] == 87
    assert signals["gpu.nvlink_up"]["2/7"] == 0 and signals["gpu.nvlink_up"]["2/6"] == 1


def test_render_gpu_leaves_unknown_values_out():
    w = ExpositionWriter()
    info = GpuInfo(index=0, uuid="GPU-x", model="m", gpm=True)
    render_gpu(
        w, GpuReading(info=info, temperature_c=50, utilization_memory_pct=30, nvlinks=[NvLinkReading(link=0, up=False)])
    )
    names = {s.name for s in to_samples(parse_exposition(w.text()))}
    assert names == {"tailhound_gpu_temperature_celsius", "tailhound_gpu_memory_busy_ratio", "tailhound_gpu_nvlink_up"}


def test_nvlink_fields_are_checked_one_by_one():
    values = (pynvml.c_nvmlFieldValue_t * 3)()
    values[0].fieldId, values[0].scopeId, values[0].valueType = FI_NVLINK_THROUGHPUT_DATA_TX, 1, 3
    values[0].value.ullVal = 2**40
    values[1].fieldId, values[1].scopeId = FI_NVLINK_GET_SPEED, 1
    values[1].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    values[2].fieldId, values[2].scopeId = FI_NVLINK_GET_SPEED, 5  # a link nobody asked for
    readings = {1: NvLinkReading(link=1)}
    failed = apply_nvlink_fields(readings, values)
    assert failed == [(FI_NVLINK_GET_SPEED, pynvml.NVML_ERROR_NOT_SUPPORTED)]
    assert readings[1].tx_kib == 2**40 and readings[1].speed_mbyte_s is None


async def test_nvlink_state_comes_with_the_field_values_call(fake, collector):
    await scrape(collector)
    probed = fake.calls[("nvmlDeviceGetNvLinkState", 0)]  # finding the links at start
    for _ in range(3):
        _, samples = await scrape(collector)
    assert fake.calls[("nvmlDeviceGetNvLinkState", 0)] == probed  # no per-link calls while collecting
    assert fake.calls[("nvmlDeviceGetFieldValues", 0)] == 4  # one call per GPU and collection
    up = {(s.labels["gpu"], s.labels["link"]): s.value for s in samples if s.name == "tailhound_gpu_nvlink_up"}
    assert len(up) == 8 * 18 and [k for k, v in up.items() if v == 0] == [("2", "7")]


async def test_nvlink_state_per_link_without_the_field_or_for_a_sleeping_link(fake, collector, caplog):
    caplog.set_level(logging.INFO, logger="tailhound.agent.nvml")
    fake.gpus[2].nvlink_state_field = False  # a driver that predates NVML_FI_DEV_NVLINK_GET_STATE
    fake.gpus[5].nvlink_sleeping.add(4)  # SLEEP: nvmlDeviceGetNvLinkState decides (it says ENABLED)
    await scrape(collector)
    probed = {gpu: fake.calls[("nvmlDeviceGetNvLinkState", gpu)] for gpu in (0, 2, 5)}
    _, samples = await scrape(collector)
    _, samples = await scrape(collector)
    up = {(s.labels["gpu"], s.labels["link"]): s.value for s in samples if s.name == "tailhound_gpu_nvlink_up"}
    assert len(up) == 8 * 18 and [k for k, v in up.items() if v == 0] == [("2", "7")]
    assert up[("5", "4")] == 1
    assert fake.calls[("nvmlDeviceGetNvLinkState", 2)] == probed[2] + 2 * 18
    assert fake.calls[("nvmlDeviceGetNvLinkState", 5)] == probed[5] + 2
    assert fake.calls[("nvmlDeviceGetNvLinkState", 0)] == probed[0]
    assert fake.calls[("nvmlDeviceGetFieldValues", 2)] == 3
    logged = [r.getMessage() for r in caplog.records if "NVML_FI_DEV_NVLINK_GET_STATE" in r.getMessage()]
    assert len(logged) == 1 and "gpu 2" in logged[0]


def test_field_values_read_in_bulk_equal_element_by_element():
    from tailhound.agents.collectors.nvml_fields import field_value, read_field_values

    values = (pynvml.c_nvmlFieldValue_t * 5)()
    for i, (vtype, member, value) in enumerate(
        [(0, "dVal", 2.5), (1, "uiVal", 26_562), (3, "ullVal", 2**40 + 7), (4, "sllVal", -5), (6, "usVal", 65_535)]
    ):
        values[i].fieldId, values[i].scopeId, values[i].valueType = 138 + i, i, vtype
        setattr(values[i].value, member, value)
    values[2].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
    bulk = read_field_values(values)
    assert bulk == read_field_values(list(values))  # a plain sequence is read element by element
    assert [v for *_, v in bulk] == [field_value(fv) for fv in values] == [2.5, 26_562, 2**40 + 7, -5, 65_535]
    assert [(fid, scope, ret) for fid, scope, ret, _ in bulk][2] == (140, 2, pynvml.NVML_ERROR_NOT_SUPPORTED)
