"""Every mapped source, in its real exposition format, lands on the same canonical signals."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog, parse_catalog
from tailhound.errors import ConfigError
from tailhound.recording import ScrapeRecord
from tailhound.streams.extract import extract

FIXTURES = Path(__file__).parent / "fixtures"


def snapshot(fixture: str, job: str, labels: dict[str, str] | None = None):
    body = (FIXTURES / fixture).read_text()
    return SnapshotBuilder().build(
        ScrapeRecord(
            ts=1_764_400_000,
            node="gpu-node-1",
            job=job,
            body=body,
            labels=labels or {"instance": "10.0.0.5:8000"},
            interval_s=5,
        )
    )


def canonical(snap) -> dict[str, dict[str, str]]:
    """signal -> {entity: sample kind} for every sample the catalog maps."""
    cat = default_catalog()
    out: dict[str, dict[str, str]] = {}
    for s in snap.samples:
        found = cat.lookup(snap.source, s.name, s.labels)
        if found:
            spec, _ = found
            assert spec.kind == s.kind, f"{s.name}: catalog says {spec.kind}, sample is {s.kind}"
            out.setdefault(spec.name, {})[spec.entity(s.labels, snap.labels)] = s.kind
    return out


ENGINE_CORE = {"engine.requests_running", "engine.requests_waiting", "latency.e2e"}


@pytest.mark.parametrize(
    ("fixture", "job", "expected"),
    [
        (
            "vllm_v1.prom",
            "vllm",
            ENGINE_CORE - {"latency.e2e"} | {"engine.kv_cache_usage", "latency.ttft", "engine.prompt_tokens"},
        ),
        (
            "vllm_v0.prom",
            "vllm",
            ENGINE_CORE
            | {
                "engine.kv_cache_usage",
                "latency.ttft",
                "latency.tpot",
                "engine.preemptions",
                "engine.generation_tokens",
            },
        ),
        (
            "nim.prom",
            "nim",
            ENGINE_CORE | {"engine.kv_cache_usage", "latency.ttft", "latency.tpot", "engine.max_requests"},
        ),
        (
            "tgi.prom",
            "tgi",
            ENGINE_CORE
            | {
                "latency.queue",
                "latency.tpot",
                "tokens.prompt",
                "tokens.generation",
                "engine.requests_received",
                "engine.batch_max_tokens",
            },
        ),
        (
            "sglang_docs_2024.prom",
            "sglang",
            ENGINE_CORE
            | {
                "engine.kv_cache_usage",
                "latency.ttft",
                "latency.tpot",
                "engine.prompt_tokens",
                "engine.generation_tokens",
            },
        ),
        (
            "sglang.prom",
            "sglang",
            ENGINE_CORE
            | {
                "engine.kv_cache_usage",
                "latency.ttft",
                "latency.tpot",
                "latency.queue",
                "engine.requests_finished",
                "tokens.prompt",
            },
        ),
    ],
)
def test_engines_map_to_the_same_signals(fixture, job, expected):
    got = canonical(snapshot(fixture, job))
    assert expected <= got.keys(), expected - got.keys()


def test_vllm_v1_entities_are_engines_and_v0_falls_back_to_the_instance():
    assert set(canonical(snapshot("vllm_v1.prom", "vllm"))["engine.requests_waiting"]) == {"0"}
    assert set(canonical(snapshot("vllm_v0.prom", "vllm"))["engine.requests_waiting"]) == {"10.0.0.5:8000"}
    v0 = extract(snapshot("vllm_v0.prom", "vllm"))
    assert v0["engine.kv_cache_usage"] == {"10.0.0.5:8000": pytest.approx(0.9612)}
    assert extract(snapshot("tgi.prom", "tgi"))["engine.requests_waiting"] == {"10.0.0.5:8000": 5.0}
    sgl = extract(snapshot("sglang_docs_2024.prom", "sglang"))  # SGLang's own docs example (2024)
    assert sgl["engine.requests_waiting"] == {"10.0.0.5:8000": 2826.0}
    assert sgl["engine.kv_cache_usage"] == {"10.0.0.5:8000": pytest.approx(0.28)}


@pytest.mark.parametrize("fixture", ["dcgm_exporter.prom", "dcgm_exporter_3x.prom", "dcgm_exporter_legacy.prom"])
def test_both_dcgm_naming_generations(fixture):
    values = extract(snapshot(fixture, "dcgm"))
    assert "gpu.temperature" in values and "gpu.sm_clock" in values
    assert all(0 < v < 150 for v in values["gpu.temperature"].values())


def test_dcgm_legacy_values_and_sentinels():
    snap = snapshot("dcgm_exporter_legacy.prom", "dcgm")
    values = extract(snap)
    assert values["gpu.temperature"] == {"0": 58.0, "1": 86.0}
    assert values["gpu.util"] == {"0": pytest.approx(0.97), "1": pytest.approx(0.99)}
    assert not list(snap.find("dcgm_memory_temp"))  # NOT_SUPPORTED sentinel: absent, never 0


def test_dcgm_3x_throttle_reasons_int32_blank_and_rate_typed_as_counter():
    snap = snapshot("dcgm_exporter_3x.prom", "dcgm")
    values = extract(snap)
    assert values["gpu.clock_event_reasons"] == {"0": 4.0}
    assert values["gpu.dram_bw_util"] == {"0": pytest.approx(0.912345)}
    assert not list(snap.find("DCGM_FI_DEV_VGPU_LICENSE_STATUS"))  # 0x7ffffff2 = DCGM_INT32 NOT_SUPPORTED
    # dcgm-exporter types PCIE_TX_BYTES as a counter, but it is a rate: the catalog makes it a gauge
    assert values["gpu.pcie_tx_rate"] == {"0": 1438210455.0}


def test_node_exporter_untyped_counters_become_counters():
    snap = snapshot("node_exporter.prom", "node")
    kinds = canonical(snap)
    assert kinds["net.listen_overflows"] == {"": "counter"}
    assert kinds["net.tcp_retrans_segs"] == {"": "counter"}
    assert extract(snap)["net.time_wait"] == {"": 28114.0}
    assert extract(snap)["net.tcp_established"] == {"": 412.0}


def test_blackbox_phases():
    values = extract(snapshot("blackbox.prom", "blackbox"))
    assert values["probe.success"] == {"": 1.0}
    assert values["probe.http_connect_duration"] == {"": pytest.approx(0.002113)}  # `match: {phase: connect}`
    assert set(values["probe.http_phase_duration"]) == {"processing", "resolve", "tls", "transfer"}


def test_match_selects_by_label():
    cat = default_catalog()
    found = cat.lookup("nvml", "tailhound_gpu_ecc_errors_total", {"type": "uncorrected"})
    assert found[0].name == "gpu.ecc_uncorrected"
    assert cat.lookup("nvml", "tailhound_gpu_ecc_errors_total", {"type": "other"}) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"signals": {"a": {"kind": "gauge", "sources": {"x": "m"}}, "b": {"kind": "gauge", "sources": {"x": "m"}}}},
            "mapped twice",
        ),
        (
            {
                "signals": {
                    "a": {"kind": "gauge", "sources": {"x": "m"}},
                    "b": {"kind": "counter", "sources": {"x": {"metric": "m", "match": {"t": "1"}}}},
                }
            },
            "mapped as gauge and as counter",
        ),
        ({"signals": {"a": {"kind": "meter"}}}, "kind must be one of"),
        ({"signals": {"a": {"kind": "gauge", "sources": {"x": {"metric": "m", "scael": 1}}}}}, "unknown mapping keys"),
    ],
)
def test_catalog_errors(data, message):
    with pytest.raises(ConfigError, match=message):
        parse_catalog(data)


def test_dcgm_hardware_error_fields_of_the_default_counters():
    """XID code, remapped rows and the remap-failure flag (issue 27) land on the signals gpu-hardware-error reads."""
    snap = snapshot("dcgm_exporter_hw_errors.prom", "dcgm")
    kinds = canonical(snap)
    assert kinds["gpu.remapped_rows_uncorrectable"] == {"1": "counter", "2": "counter"}
    values = extract(snap)
    assert values["gpu.last_xid"] == {"1": 0.0, "2": 48.0}
    rows = {s.labels["gpu"]: s.value for s in snap.find("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")}
    assert rows == {"1": 0.0, "2": 1.0}  # a counter: rules read its rate (the first scrape has no delta yet)
    assert values["gpu.row_remap_failure"] == {"1": 0.0, "2": 0.0}
