"""The NVML collector on a real GPU: which calls the driver answers, what each costs, and whether the
signals the rules read move the right way under a memory-bound and a compute-bound load.

Not part of ``make bench`` (it needs an NVIDIA driver); run on a GPU host with

    python -m bench.nvml_real --out DIR [--phase-s 8] [--load torch]

It writes ``DIR/nvml_real.json`` (the call matrix, per-call latency, per-collection CPU and wall time,
per-phase medians of the GPU signals), ``DIR/nvml_recording.jsonl`` (every collection, a scrape
recording ``tailhound replay`` reads), ``DIR/nvml_exposition.txt`` (the last collection as Prometheus
text) and ``DIR/nvidia-smi.txt``. The loads need PyTorch with CUDA; with ``--load none`` only the idle
phase runs; ``--decode-batches 1,64,256`` adds decode-shaped loads (a batch of activations times 32
bf16 8192x8192 weights, 4 GiB, streamed as a decode step streams the weights). Results:
BENCHMARKS.md, "NVML collector on a real GPU".
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tailhound.agents.collectors.nvml import NvmlCollector, NvmlConfig

_LOAD = r"""
import sys, time, torch
kind, seconds = sys.argv[1], float(sys.argv[2])
dev = torch.device("cuda")
if kind == "pcie":
    h = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    step = lambda: (d.copy_(h, non_blocking=True), h.copy_(d, non_blocking=True))
elif kind.startswith("decode"):  # LLM decode's shape: a small batch times weights far larger than L2
    batch = int(kind.removeprefix("decode"))
    ws = [torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16) for _ in range(32)]  # 4 GiB
    x = torch.randn(batch, 8192, device=dev, dtype=torch.bfloat16)
    step = lambda: [torch.mm(x, w) for w in ws]
elif kind == "memory":
    a = torch.empty(4 << 30, dtype=torch.uint8, device=dev); b = torch.empty_like(a)
    step = lambda: b.copy_(a)
else:
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16); b = torch.randn_like(a)
    step = lambda: torch.mm(a, b)
print("ready", flush=True)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        step()
    torch.cuda.synchronize()
"""

_SIGNALS = {
    "tailhound_gpu_utilization_ratio": "util",
    "tailhound_gpu_memory_busy_ratio": "mem_busy",
    "tailhound_gpu_dram_bw_util_ratio": "dram_bw",
    "tailhound_gpu_power_watts": "power_w",
    "tailhound_gpu_sm_clock_mhz": "sm_mhz",
    "tailhound_gpu_temperature_celsius": "temp_c",
    "tailhound_gpu_clock_event_reasons": "reasons",
    "tailhound_gpu_pcie_link_gen": "pcie_gen",
    "tailhound_nvml_collect_seconds": "collect_s",
}


class CallLog:
    """Wraps pynvml: every ``nvml*`` call is counted with its outcome (ok / exception name), latency and
    CPU time (this thread's)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.latency_s: dict[str, list[float]] = defaultdict(list)
        self.cpu_s: dict[str, list[float]] = defaultdict(list)
        self.examples: dict[str, str] = {}

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._nvml, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr

        def call(*args: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                result = attr(*args)
            except Exception as exc:
                self.outcomes[name][type(exc).__name__] += 1
                raise
            finally:
                self.latency_s[name].append(time.perf_counter() - t0)
                self.cpu_s[name].append(time.thread_time() - c0)
            self.outcomes[name]["ok"] += 1
            self.examples.setdefault(name, repr(result)[:120])
            return result

        return call


def _values(record: Any) -> dict[str, dict[str, float]]:
    """{short signal: {gpu: value}} from one collection."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for family in record.families(entries_as_samples=True):
        for name, labels, value in family.samples:
            short = _SIGNALS.get(name)
            if short is not None:
                out[short][labels.get("gpu", "-")] = value
    return out


def _phase(collector: NvmlCollector, name: str, n: int, interval_s: float, cost: list[dict], recording: Any) -> dict:
    series: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    record = None
    for _ in range(n):
        t0, c0 = time.perf_counter(), time.process_time()
        [record] = collector._collect()
        cost.append({"phase": name, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0})
        recording.write(record.to_line() + "\n")
        for short, by_gpu in _values(record).items():
            for gpu, value in by_gpu.items():
                series[short][gpu].append(value)
        time.sleep(interval_s)
    return {
        "record": record,
        "medians": {s: {g: statistics.median(v) for g, v in by.items()} for s, by in series.items()},
    }


def _start_load(kind: str, seconds: float) -> subprocess.Popen | None:
    proc = subprocess.Popen([sys.executable, "-c", _LOAD, kind, str(seconds)], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if "ready" not in line:
        proc.kill()
        print(f"load {kind}: did not start", file=sys.stderr)
        return None
    time.sleep(1.5)
    return proc


def _pcie_sources(nv: Any, n: int) -> list[dict]:
    """Three ways to read PCIe traffic, side by side, once a second on GPU 0: the sampling call
    (KB/s over 20 ms), the byte-counter fields (delta / delta of their timestamps) and GPM's PCIe
    metrics (MiB/s between two samples)."""
    from tailhound.agents.collectors.nvml_fields import read_field_values

    h = nv.nvmlDeviceGetHandleByIndex(0)
    fields = [(nv.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0), (nv.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0)]
    samples = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
    rows, prev = [], None
    try:
        nv.nvmlGpmSampleGet(h, samples[0])
        for _ in range(n):
            time.sleep(1.0)
            row: dict[str, Any] = {}
            t0, c0 = time.perf_counter(), time.thread_time()
            row["throughput_kb_s"] = [
                nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES),
                nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES),
            ]
            row["throughput_cpu_ms"] = 1e3 * (time.thread_time() - c0)
            row["throughput_wall_ms"] = 1e3 * (time.perf_counter() - t0)
            c0 = time.thread_time()
            values = nv.nvmlDeviceGetFieldValues(h, fields)
            row["fields_cpu_ms"] = 1e3 * (time.thread_time() - c0)
            now = [
                (fid, ret, value, int(values[i].timestamp))
                for i, (fid, _scope, ret, value) in enumerate(read_field_values(values))
            ]
            row["fields_raw"] = now
            if prev is not None and all(r[1] == 0 for r in now + prev):
                dt_us = [b[3] - a[3] for a, b in zip(prev, now, strict=True)]
                row["fields_kb_s"] = [
                    (b[2] - a[2]) / 1024 / (d / 1e6) if d > 0 else None
                    for a, b, d in zip(prev, now, dt_us, strict=True)
                ]
            prev = now
            try:
                nv.nvmlGpmSampleGet(h, samples[1])
                req = nv.c_nvmlGpmMetricsGet_t()
                req.version, req.numMetrics = nv.NVML_GPM_METRICS_GET_VERSION, 2
                req.sample1, req.sample2 = samples[0], samples[1]
                req.metrics[0].metricId = nv.NVML_GPM_METRIC_PCIE_TX_PER_SEC
                req.metrics[1].metricId = nv.NVML_GPM_METRIC_PCIE_RX_PER_SEC
                nv.nvmlGpmMetricsGet(req)
                row["gpm_kb_s"] = [
                    req.metrics[i].value * 1024
                    if req.metrics[i].nvmlReturn == 0
                    else f"ret {req.metrics[i].nvmlReturn}"
                    for i in range(2)
                ]
                samples.reverse()
            except nv.NVMLError as exc:
                row["gpm_kb_s"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
    finally:
        for sample in samples:
            nv.nvmlGpmSampleFree(sample)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--phase-s", type=int, default=8, help="collections per phase (1 s apart)")
    ap.add_argument("--load", choices=["torch", "none"], default="torch")
    ap.add_argument(
        "--decode-batches",
        type=lambda v: [int(b) for b in v.split(",") if b],
        default=[],
        help="also phases of decode-shaped loads: batch x 8192 times 32 bf16 8192^2 weights",
    )
    ap.add_argument("--skip-pcie", action="store_true", help="leave out the PCIe sources comparison")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True, timeout=30).stdout
        (args.out / "nvidia-smi.txt").write_text(smi)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"nvidia-smi: {exc}", file=sys.stderr)

    import pynvml

    log = CallLog(pynvml)
    collector = NvmlCollector(NvmlConfig(interval_s=1.0), node="gpu-host", nvml=log)
    cost: list[dict] = []
    t0, c0 = time.perf_counter(), time.process_time()
    collector._collect()  # start: handles, static info, GPM buffers, event set
    start = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}
    with (args.out / "nvml_recording.jsonl").open("w") as recording:
        phases = {"idle": _phase(collector, "idle", args.phase_s, 1.0, cost, recording)}
        if args.load == "torch":
            for kind in ("memory", "compute", *(f"decode{b}" for b in args.decode_batches)):
                proc = _start_load(kind, args.phase_s + 4)
                if proc is not None:
                    phases[kind] = _phase(collector, kind, args.phase_s, 1.0, cost, recording)
                    proc.kill()
                    proc.wait()
    pcie: list[dict] | str = []
    if args.load == "torch" and not args.skip_pcie:
        proc = _start_load("pcie", args.phase_s + 4)
        try:
            pcie = _pcie_sources(pynvml, args.phase_s) if proc is not None else "no load"
        except Exception as exc:  # a probe, not the product: report what broke
            pcie = f"{type(exc).__name__}: {exc}"
        finally:
            if proc is not None:
                proc.kill()
                proc.wait()
    last = list(phases.values())[-1]["record"]
    (args.out / "nvml_exposition.txt").write_text(last.body)
    collector._close()

    steady = cost
    report = {
        "start": start,
        "collection": {
            "n": len(steady),
            "wall_s_median": statistics.median(c["wall_s"] for c in steady),
            "cpu_s_median": statistics.median(c["cpu_s"] for c in steady),
            "cpu_s_max": max(c["cpu_s"] for c in steady),
        },
        "calls": {
            name: {
                "outcomes": dict(out),
                "latency_ms_median": 1e3 * statistics.median(log.latency_s[name]),
                "latency_ms_max": 1e3 * max(log.latency_s[name]),
                "cpu_ms_median": 1e3 * statistics.median(log.cpu_s[name]),
                "example": log.examples.get(name),
            }
            for name, out in sorted(log.outcomes.items())
        },
        "phases": {name: p["medians"] for name, p in phases.items()},
        "pcie_sources": pcie,
    }
    (args.out / "nvml_real.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    print(json.dumps({k: report[k] for k in ("start", "collection", "phases", "pcie_sources")}, indent=1))
    unsupported = {n: c["outcomes"] for n, c in report["calls"].items() if set(c["outcomes"]) - {"ok"}}
    print("calls with errors:", json.dumps(unsupported, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
