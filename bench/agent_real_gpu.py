"""The whole agent on a real GPU: ``tailhound agent`` with the NVML collector at 1 Hz, publishing to the
bundled broker, while the GPU runs a decode-shaped load; its CPU and memory, and every snapshot it
published read back from the topic and validated.

Not part of ``make bench`` (it needs an NVIDIA driver and PyTorch for the load); on a GPU host:

    python -m bench.agent_real_gpu --out DIR [--duration-s 30] [--warmup-s 5] [--fake]

``--fake`` runs the agent against the fake 8-GPU NVML of the tests instead (a smoke run anywhere).
Writes ``DIR/agent_real_gpu.json``. Results: BENCHMARKS.md, "NVML collector on a real GPU".
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tailhound.broker import EmbeddedBroker
from tailhound.errors import MalformedMessage
from tailhound.kafka import ensure_topics, make_consumer
from tailhound.settings import Settings
from tailhound.snapshot import Snapshot
from tailhound.wire import TelemetryReader

ROOT = Path(__file__).resolve().parent.parent
_CHILD = r"""
import asyncio, json, logging, sys
sys.path.insert(0, sys.argv[4])
if sys.argv[3] == "fake":
    from tests.agents.fake_pynvml import FakeNvml
    class _SetAttr:
        def setattr(self, target, name, value): setattr(target, name, value)
    FakeNvml.fleet().install(_SetAttr())
from tailhound.agents.config import load_agent_config
from tailhound.agents.main import run_agent
from tailhound.settings import Settings
logging.basicConfig(level=logging.INFO)
settings = Settings(**json.loads(sys.argv[1]))
asyncio.run(run_agent(settings, load_agent_config(sys.argv[2]), duration_s=float(sys.argv[5])))
"""


def _cpu_s(pid: int) -> float:
    """utime + stime of a running process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _read_back(settings: Settings, expected_min: int) -> list[bytes]:
    consumer = make_consumer(settings, settings.telemetry_topic, group_id=None)
    await consumer.start()
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            got = [r.value for records in batch.values() for r in records]
            values += got
            if not got and len(values) >= expected_min:
                break
    finally:
        await consumer.stop()
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--duration-s", type=float, default=30.0)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--fake", action="store_true", help="the tests' fake 8-GPU NVML instead of a driver")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    config = args.out / "agent.yaml"
    config.write_text("node: gpu-host\nlisten: null\nnvml: {interval_s: 1.0}\n")
    load = None
    if not args.fake:
        from bench.nvml_real import _start_load

        load = _start_load("decode16", args.duration_s + 15)
    report: dict = {"fake": args.fake, "duration_s": args.duration_s, "warmup_s": args.warmup_s}
    try:
        with EmbeddedBroker() as broker:
            settings = Settings(broker=broker.url, topic_prefix="gpu.")
            asyncio.run(ensure_topics(settings))
            log = open(args.out / "agent.log", "wb")  # noqa: SIM115 - closed below
            child = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _CHILD,
                    settings.model_dump_json(),
                    str(config),
                    "fake" if args.fake else "real",
                    str(ROOT),
                    str(args.duration_s),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
            time.sleep(args.warmup_s)
            t0, c0 = time.monotonic(), _cpu_s(child.pid)
            rss = []
            while child.poll() is None and time.monotonic() - t0 < args.duration_s - args.warmup_s - 1:
                rss.append(_rss_mb(child.pid))
                time.sleep(1.0)
            t1, c1 = time.monotonic(), _cpu_s(child.pid)
            child.wait(timeout=60)
            log.close()
            report.update(
                exit_code=child.returncode,
                window_s=t1 - t0,
                cpu_pct=100 * (c1 - c0) / (t1 - t0),
                rss_mb_median=statistics.median(rss) if rss else None,
            )
            values = asyncio.run(_read_back(settings, expected_min=int(args.duration_s) - 2))
    finally:
        if load is not None:
            load.kill()
            load.wait()
    snapshots: list[Snapshot] = []
    errors: list[str] = []
    reader = TelemetryReader()  # any wire version the agent publishes
    for raw in values:
        try:
            snapshots.extend(reader.read(raw))
        except MalformedMessage as exc:
            errors.append(str(exc)[:200])
    report.update(
        messages=len(values),
        invalid=errors,
        sources=sorted({s.source for s in snapshots}),
        samples_per_snapshot=statistics.median(len(s.samples) for s in snapshots) if snapshots else 0,
        bytes_median=statistics.median(map(len, values)) if values else 0,
    )
    if snapshots:
        from tailhound.streams.extract import extract

        last = extract(snapshots[-1])
        names = ("gpu.util", "gpu.dram_bw_util", "gpu.power", "gpu.sm_clock_ratio")
        report["last_signals"] = {k: last[k] for k in names if k in last}
    (args.out / "agent_real_gpu.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 0 if report.get("exit_code") == 0 and snapshots and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
