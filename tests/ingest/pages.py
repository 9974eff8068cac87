"""Pages in the real exporters' format, served to a real Prometheus by the end-to-end tests.

- dcgm-exporter with its **default** counters file (the fields and their HELP/TYPE from
  tailhound/catalog/dcgm-default-counters.csv, dcgm-exporter's etc/default-counters.csv), one line per GPU with
  the labels dcgm-exporter 3.x/4.x puts on them (``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, as in
  tests/agents/fixtures/dcgm_exporter.prom); 4 H100s. ``hot_gpu``: that GPU at 88 C with its SM clock at
  1095 MHz while the others run 1980 MHz at 61 C (the playbook's thermal throttle; the values of the fixture).
- vLLM V1: tests/agents/fixtures/vllm_v1.prom, its counters and histograms growing with every scrape.
"""

from __future__ import annotations

from pathlib import Path

from tailhound.catalog.dcgm_counters import default_counters
from tests.ingest.capture_fixture import grow

VLLM_PAGE = Path(__file__).resolve().parents[1] / "agents" / "fixtures" / "vllm_v1.prom"
GPUS = 4
#: gauge values of a busy, healthy H100 (dcgm-exporter units)
HEALTHY = {
    "DCGM_FI_DEV_SM_CLOCK": 1980,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_MEMORY_TEMP": 58,
    "DCGM_FI_DEV_GPU_TEMP": 61,
    "DCGM_FI_DEV_POWER_USAGE": 612.5,
    "DCGM_FI_DEV_GPU_UTIL": 96,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 71,
    "DCGM_FI_DEV_ENC_UTIL": 0,
    "DCGM_FI_DEV_DEC_UTIL": 0,
    "DCGM_FI_DEV_XID_ERRORS": 0,
    "DCGM_FI_DEV_FB_FREE": 2301,
    "DCGM_FI_DEV_FB_USED": 78920,
    "DCGM_FI_DEV_FB_RESERVED": 498,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1.2e8,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 3.4e8,
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.93,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.41,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.62,
}
HOT = {"DCGM_FI_DEV_GPU_TEMP": 88, "DCGM_FI_DEV_SM_CLOCK": 1095, "DCGM_FI_DEV_MEMORY_TEMP": 79}
#: counter growth per scrape
RATES = {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 612_000, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 9_400_000}
UUIDS = [
    "GPU-6c0b7a5e-3b0a-7c5f-1a2b-0c9d8e7f6a5b",
    "GPU-2a4f7d1c-8e3b-4c6a-9d0e-5f1b2c3d4e5f",
    "GPU-8b9c0d1e-2f3a-4b5c-6d7e-8f9a0b1c2d3e",
    "GPU-1d2e3f4a-5b6c-7d8e-9f0a-1b2c3d4e5f6a",
]


def dcgm_page(host: str, k: int, hot_gpu: int | None = None) -> str:
    """dcgm-exporter's page on `host` at scrape `k`."""
    lines: list[str] = []
    for field, counter in default_counters().items():
        if not counter.enabled or counter.kind not in ("gauge", "counter"):
            continue
        lines += [f"# HELP {field} {counter.help}", f"# TYPE {field} {counter.kind}"]
        for gpu in range(GPUS):
            labels = (
                f'gpu="{gpu}",UUID="{UUIDS[gpu]}",device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",'
                f'Hostname="{host}"'
            )
            if counter.kind == "counter":
                value: float = 10_000_000 * (gpu + 1) + RATES.get(field, 0) * k
            else:
                value = (HOT if gpu == hot_gpu else {}).get(field, HEALTHY.get(field, 0))
            text = f"{value:g}" if isinstance(value, float) else str(value)
            lines.append(f"{field}{{{labels}}} {text}")
    return "\n".join(lines) + "\n"


def vllm_page(k: int) -> str:
    return grow(VLLM_PAGE.read_text(), k)
