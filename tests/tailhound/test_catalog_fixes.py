"""The fix data: dcgm-exporter's counters files and fixes.yaml agree with the catalog."""

from __future__ import annotations

from pathlib import Path

from tailhound.catalog import default_catalog
from tailhound.catalog.dcgm_counters import (
    counter_line,
    default_counters,
    default_fields,
    known_counters,
    parse_counters,
)
from tailhound.catalog.fixes import default_fixbook, fixes_for

ROOT = Path(__file__).resolve().parents[2]
CATALOG = default_catalog()


def test_the_packaged_default_counters_are_the_exporters_file():
    packaged = (ROOT / "tailhound" / "catalog" / "dcgm-default-counters.csv").read_text(encoding="utf-8")
    reference = ROOT.parent / "shared" / "reference" / "dcgm_default-counters.csv"
    if reference.is_file():  # the copy keeps the exporter's lines exactly, after its provenance comment
        assert packaged.endswith(reference.read_text(encoding="utf-8"))
    assert packaged.startswith("# dcgm-exporter's default field list: etc/default-counters.csv")


def test_default_fields():
    fields = default_fields()
    assert {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_DEV_DEC_UTIL",
    } <= fields
    # off in the file (commented out), a label, or not there at all
    assert not fields & {
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_DEV_MAX_SM_CLOCK",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
    }
    # the enabled gauge line wins over the commented-out counter line of the same field
    assert default_counters()["DCGM_FI_PROF_PCIE_TX_BYTES"].kind == "gauge"


def test_parse_counters_reads_dcgm_exporters_format():
    parsed = parse_counters(
        "# Format\nDCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n"
        "# DCGM_FI_DEV_RETIRED_SBE,     counter, Total number of retired pages.\nnot a line\n"
    )
    assert parsed["DCGM_FI_DEV_DEC_UTIL"].line == "DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %)."
    assert parsed["DCGM_FI_DEV_RETIRED_SBE"].enabled is False and len(parsed) == 2


def test_every_dcgm_field_the_catalog_maps_has_a_counters_line():
    fields = {
        m.metric
        for spec in CATALOG.signals.values()
        for m in spec.sources.get("dcgm", ())
        if m.metric.startswith("DCGM_FI_")
    }
    assert fields - known_counters().keys() == set()
    for field in fields:
        line = counter_line(field)
        assert line.count(",") == 2, line  # dcgm-exporter splits on commas: none in the help text


def test_fixes_yaml_names_only_what_the_catalog_maps():
    book = default_fixbook()
    assert set(CATALOG.sources()) <= book.sources.keys()
    assert {key for key in book.metrics if key not in CATALOG.by_metric} == set()
    assert set(book.signals) <= CATALOG.signals.keys()


def test_fixes_for_orders_seen_sources_first_and_says_what_cannot_work():
    on_nvml = fixes_for("gpu.sm_clock_max", CATALOG, seen={"nvml"})
    assert [f.source for f in on_nvml] == ["nvml", "dcgm"]
    assert on_nvml[0].action == "the nvml collector sent no tailhound_gpu_sm_clock_max_mhz"
    assert on_nvml[1].line == counter_line("DCGM_FI_DEV_MAX_SM_CLOCK")
    assert "and scrape dcgm-exporter as job `dcgm`" in on_nvml[1].action
    nvlink = fixes_for("gpu.nvlink_tx_rate", CATALOG, seen={"dcgm"})
    assert "a profiling field" in nvlink[0].action
    reasons = fixes_for("gpu.clock_event_reasons", CATALOG, seen={"dcgm"})[0]
    assert "older releases name it DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" in reasons.action
    assert fixes_for("no.such", CATALOG)[0].unavailable


def test_on_the_prometheus_path_fixes_name_prometheus_yml_and_agent_only_sources_last():
    clock = fixes_for("gpu.sm_clock_max", CATALOG, path="prometheus")
    assert [f.source for f in clock] == ["dcgm", "nvml"]
    assert "in prometheus.yml as job `dcgm`" in clock[0].action and clock[0].line
    assert clock[1].action.startswith("no exporter sends this; only the tailhound agent does")
    (waiting, *_) = fixes_for("engine.requests_waiting", CATALOG, path="prometheus")
    assert "in prometheus.yml as job `vllm`" in waiting.action and "agent.yaml" not in waiting.action
    assert "remote_write.grouping.sources: {<job>: vllm}" in waiting.action
    agent = fixes_for("engine.requests_waiting", CATALOG)[0]
    assert "agent.yaml" in agent.action and "prometheus.yml" not in agent.action


def test_a_flag_the_exporter_needs_is_the_fix_on_both_paths():
    book = default_fixbook()
    (netstat,) = book.flags["node"]
    for path in ("agent", "prometheus"):
        seen = fixes_for("net.tcp_attempt_fails", CATALOG, seen={"node"}, path=path)[0]
        assert seen.line == netstat.line and seen.into == "node_exporter's command line"
        assert "AttemptFails" in netstat.value and "AttemptFails" not in netstat.default
    assert book.flag_for("node", "node_netstat_Tcp_RetransSegs") is None  # in the default regexp
