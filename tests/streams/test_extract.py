from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.recording import ScrapeRecord
from tailhound.streams.extract import decode_clock_event_reasons, extract, signal_per
from tailhound.streams.ruleset.condition_eval import value_of
from tailhound.streams.ruleset.conditions import Reduce
from tailhound.streams.snapshot_scan import snapshot_values
from tests.factories import dcgm_snapshot


def test_extract_maps_dcgm_names_to_canonical_signals_per_gpu():
    values = extract(dcgm_snapshot(1.0e9, hot={3: (88.0, 990.0)}))
    assert values["gpu.temperature"]["3"] == 88.0
    assert values["gpu.sm_clock"]["3"] == 990.0
    assert values["gpu.sm_clock_ratio"]["3"] == 990.0 / 1980.0
    assert len(values["gpu.temperature"]) == 8


def test_decode_clock_event_reasons():
    assert decode_clock_event_reasons(0x60) == ["sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert decode_clock_event_reasons(0) == []


# --- MIG: instance lines never overwrite whole-GPU values ---------------------------------------------------

FIXTURES = Path(__file__).resolve().parents[1] / "agents" / "fixtures"


def _snap(body: str, job: str = "dcgm"):
    return SnapshotBuilder().build(
        ScrapeRecord(
            ts=1_764_400_000, node="gpu-node-1", job=job, body=body, labels={"instance": "10.0.0.5:8000"}, interval_s=5
        )
    )


def _fixture(name: str, job: str = "dcgm"):
    return _snap((FIXTURES / name).read_text(encoding="utf-8"), job)


def test_mig_flex_mode_device_fields_count_for_the_gpu_instance_fields_stay_apart():
    """Real A30 scrape, dcgm-exporter flex mode: a MIG GPU has instance lines only."""
    values = extract(_fixture("dcgm_exporter_mig_a30.prom"))
    assert values["gpu.temperature"] == {"0": 35.0, "1": 35.0}  # device-wide: every instance repeats the GPU's
    assert "gpu.dram_bw_util" not in values  # per-instance DRAM activity is no whole-GPU value
    assert values["mig.dram_bw_util"] == {e: 0.0 for e in ("0/mig3", "0/mig4", "0/mig5", "0/mig6", "1/mig3", "1/mig4")}


def test_mig_mixed_node_keeps_whole_gpus_and_instances_apart():
    """Real mixed node: GPU 1 without MIG, GPUs 0 and 2 with MIG instances."""
    values = extract(_fixture("dcgm_exporter_mig_mixed.prom"))
    assert values["gpu.temperature"] == {"0": 50.0, "1": 44.0, "2": 45.0}
    assert values["mig.memory_used"] == {"0/mig6": 3744.0}
    assert "gpu.memory_used" not in values


def _whole_and_instances(instance_last: bool) -> str:
    """dcgm-exporter with `-d g,i` (handleGPUOptions: all GPUs and all GPU instances): the whole GPU and its
    instances share gpu="0". Label sets as in the real A30 scrape (dcgm_exporter_mig_a30.prom)."""
    base = 'gpu="0",UUID="GPU-265c9814-6156-355b-e589-ff2064894f16",device="nvidia0",modelName="NVIDIA A30"'
    inst = base + ',GPU_I_PROFILE="1g.6gb",GPU_I_ID="{i}"'
    lines = {
        "DCGM_FI_PROF_DRAM_ACTIVE": (
            [f"{{{base}}} 0.810000"],
            [f"{{{inst.format(i=3)}}} 0.120000", f"{{{inst.format(i=4)}}} 0.950000"],
        ),
        "DCGM_FI_DEV_FB_USED": (
            [f"{{{base}}} 20511"],
            [f"{{{inst.format(i=3)}}} 3744", f"{{{inst.format(i=4)}}} 5800"],
        ),
        "DCGM_FI_DEV_GPU_TEMP": ([f"{{{base}}} 71"], [f"{{{inst.format(i=3)}}} 71", f"{{{inst.format(i=4)}}} 71"]),
        "DCGM_FI_DEV_GPU_UTIL": ([f"{{{base}}} 64"], [f"{{{inst.format(i=3)}}} 0"]),
    }
    out = []
    for metric, (whole, instances) in lines.items():
        out.append(f"# TYPE {metric} gauge")
        for series in whole + instances if instance_last else instances + whole:
            out.append(metric + series)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("instance_last", [True, False])
def test_mig_instance_lines_do_not_overwrite_the_whole_gpu(instance_last):
    snap = _snap(_whole_and_instances(instance_last))
    values = extract(snap)
    assert values["gpu.dram_bw_util"] == {"0": pytest.approx(0.81)}  # not the last instance's 0.95
    assert values["gpu.memory_used"] == {"0": 20511.0}
    assert values["gpu.util"] == {"0": pytest.approx(0.64)}  # GPU_UTIL on an instance line is dropped
    assert values["gpu.temperature"] == {"0": 71.0}
    assert values["mig.dram_bw_util"] == {"0/mig3": pytest.approx(0.12), "0/mig4": pytest.approx(0.95)}
    assert values["mig.memory_used"] == {"0/mig3": 3744.0, "0/mig4": 5800.0}
    # the worker's one-pass scan (per-metric plans) agrees
    assert snapshot_values(snap, default_catalog()).values == values


def test_mig_reduce_over_the_node_sees_whole_gpus_and_a_gpu_rule_reads_its_instances_explicitly():
    values = extract(_snap(_whole_and_instances(True)))
    ctx = SimpleNamespace(values=values, per=signal_per)
    assert value_of(ctx, "gpu.dram_bw_util", Reduce.MAX, "", "engine") == pytest.approx(0.81)
    assert value_of(ctx, "gpu.dram_bw_util", None, "0", "gpu") == pytest.approx(0.81)
    assert signal_per("mig.dram_bw_util") == ("gpu", "GPU_I_ID")
    assert value_of(ctx, "mig.dram_bw_util", Reduce.MAX, "0", "gpu") == pytest.approx(0.95)
    assert value_of(ctx, "mig.dram_bw_util", Reduce.COUNT, "0", "gpu") == 2.0


def test_tgi_kv_cache_reserved_is_derived_from_the_token_budget():
    values = extract(_fixture("tgi_v3.prom", "tgi"))
    assert values["engine.kv_cache_reserved"] == {"10.0.0.5:8000": pytest.approx(21504 / 65536)}
    assert "engine.kv_cache_usage" not in values
    assert signal_per("engine.kv_cache_reserved") == ("engine",)
