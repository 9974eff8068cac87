"""The real-GPU benchmarks still run here, against the tests' fake NVML (their numbers come from a GPU
host: BENCHMARKS.md, "NVML collector on a real GPU")."""

from __future__ import annotations

import json

import pytest

from bench import agent_real_gpu, nvml_real
from tests.agents.fake_pynvml import FakeNvml


def test_nvml_real_logs_every_call_and_writes_a_recording(monkeypatch, tmp_path):
    FakeNvml(gpu_count=2).install(monkeypatch)
    assert nvml_real.main(["--out", str(tmp_path), "--phase-s", "2", "--load", "none"]) == 0
    report = json.loads((tmp_path / "nvml_real.json").read_text())
    assert report["calls"]["nvmlDeviceGetNvLinkState"]["outcomes"]["NVMLError_NotSupported"] > 0
    assert report["calls"]["nvmlGpmMetricsGet"]["outcomes"] == {"ok": 4}  # 2 GPUs x the 2nd and 3rd collection
    assert set(report["phases"]["idle"]["dram_bw"]) == {"0", "1"}
    assert len((tmp_path / "nvml_recording.jsonl").read_text().splitlines()) == 2  # the phase's collections


@pytest.mark.broker
def test_agent_real_gpu_publishes_valid_snapshots_with_the_fake(tmp_path):
    assert agent_real_gpu.main(["--out", str(tmp_path), "--duration-s", "6", "--warmup-s", "2", "--fake"]) == 0
    report = json.loads((tmp_path / "agent_real_gpu.json").read_text())
    assert report["exit_code"] == 0 and report["invalid"] == [] and report["sources"] == ["nvml"]
    assert report["messages"] >= 4 and report["samples_per_snapshot"] > 800
