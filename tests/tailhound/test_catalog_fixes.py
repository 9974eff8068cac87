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
    assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_DEV_DEC_UTIL"} <= fields
    # off in the file (commented out), a label, or not there at all
    assert not fields & {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_DEV_MAX_SM_CLOCK",
                         "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_PROF_NVLINK_TX_BYTES"}
    # the enabled gauge line wins over the commented-out counter line of the same field
    assert default_counters()["DCGM_FI_PROF_PCIE_TX_BYTES"].kind == "gauge"


def test_parse_counters_reads_dcgm_exporters_format():
    parsed = parse_counters("# Format\nDCGM_FI_DEV_DEC_UTIL ,     gauge, Decoder utilization (in %).\n"
                            "# DCGM_FI_DEV_RETIRED_SBE,     counter, Total number of retired pages.\nnot a line\n")
    assert parsed["DCGM_FI_DEV_DEC_UTIL"].line == "DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %)."
    assert parsed["DCGM_FI_DEV_RETIRED_SBE"].enabled is False and len(parsed) == 2


def test_every_dcgm_field_the_catalog_maps_has_a_counters_line():
    fields = {m.metric for spec in CATALOG.signals.values() for m in spec.sources.get("dcgm", ())
              if m.metric.startswith("DCGM_FI_")}
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
