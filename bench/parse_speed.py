"""Exposition parse speed: tailhound's parser vs prometheus_client's own, on the same texts.

Inputs are real shapes: a simulated node's vLLM V1 page, its dcgm-exporter page, and the native NVML
collector's page for 8 (fake) GPUs. Each timing is the median of `reps` runs of parsing the text
`loops` times; throughput counts sample lines. "tailhound parse" is text -> families (first scrape:
label cache cleared before every parse; steady state: the label sets of the previous scrape are
cached, which is what repeated scrapes of one target see); "tailhound
samples" adds the conversion to validated wire samples (pydantic), which is what the agent does;
prometheus_client's ``text_string_to_metric_families`` is text -> families with samples.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailhound.agents.collectors.nvml import NvmlCollector, NvmlConfig
from tailhound.agents.exposition import _parse_label_text, parse_exposition, to_samples
from tailhound.agents.render import render_samples
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord
from tests.agents.fake_pynvml import FakeNvml


def inputs() -> dict[str, str]:
    _ts, snaps = next(FleetSimulator(SimConfig(nodes=1, interval_s=1.0)).run(60))
    pages = {f"{s.source} (simulated)": render_samples(s.samples) for s in snaps if s.source in ("vllm", "dcgm")}
    mp = pytest.MonkeyPatch()
    FakeNvml.fleet().install(mp)
    try:
        c = NvmlCollector(NvmlConfig())
        [rec] = asyncio.run(c.collect())
        pages["nvml (8 GPUs)"] = rec.body
        asyncio.run(c.close())
    finally:
        mp.undo()
    return pages


def sample_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


def timed(fn, text: str, loops: int, reps: int) -> float:
    runs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn(text)
        runs.append((time.perf_counter() - t0) / loops)
    return statistics.median(runs)


def run(reps: int = 7, loops: int = 20) -> list[dict]:
    out = []
    for name, text in inputs().items():
        n = sample_lines(text)
        builder = SnapshotBuilder()
        ts = iter(range(1, 10**9))
        t_ref = timed(lambda t: list(text_string_to_metric_families(t)), text, loops, reps)
        t_parse = timed(parse_exposition, text, loops, reps)
        t_cold = timed(lambda t: (_parse_label_text.cache_clear(), parse_exposition(t)), text, loops, reps)
        t_samples = timed(lambda t: to_samples(parse_exposition(t)), text, loops, reps)
        t_build = timed(
            lambda t, b=builder, clock=ts: b.build(ScrapeRecord(ts=next(clock), node="n", job="vllm", body=t)),
            text,
            loops,
            reps,
        )
        out.append(
            {
                "input": name,
                "lines": n,
                "bytes": len(text),
                "prometheus_client": n / t_ref,
                "parse": n / t_parse,
                "cold": n / t_cold,
                "samples": n / t_samples,
                "snapshot": n / t_build,
            }
        )
    return out


def report(rows: list[dict]) -> str:
    lines = [
        "| input | sample lines | prometheus_client (samples/s) | tailhound parse, first scrape "
        "(samples/s, ratio) | tailhound parse, steady state | tailhound -> wire samples | "
        "full snapshot incl. deltas |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        ref = r["prometheus_client"]
        lines.append(
            f"| {r['input']} | {r['lines']} | {ref:,.0f} | {r['cold']:,.0f} ({r['cold'] / ref:.2f}x) | "
            f"{r['parse']:,.0f} ({r['parse'] / ref:.2f}x) | "
            f"{r['samples']:,.0f} ({r['samples'] / ref:.2f}x) | "
            f"{r['snapshot']:,.0f} ({r['snapshot'] / ref:.2f}x) |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
