"""CPU and memory of one agent process: all collectors at 1 Hz vs the bare runtime (baseline).

Method: the harness (this process) runs the bundled broker and the local endpoints; the agent runs as
its own process (``bench.agent_process``), so only the agent's own work is measured. After a warm-up
the harness reads the agent's utime+stime from /proc/<pid>/stat over a window and its RSS (VmRSS) and
peak RSS (VmHWM) from /proc/<pid>/status at the end. Each variant runs `reps` times interleaved with
the other; medians are reported.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

from bench.endpoints import COLLECTOR_GROUPS, agent_yaml, serve_endpoints
from tailhound.broker import EmbeddedBroker
from tailhound.kafka import ensure_topics
from tailhound.settings import Settings

TICK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parent.parent


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def memory_mb(pid: int) -> tuple[float, float]:
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(status["VmRSS"].split()[0]) / 1024, int(status["VmHWM"].split()[0]) / 1024


async def measure_once(config: Path, env: dict[str, str], warmup_s: float, window_s: float) -> dict[str, float]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.agent_process",
        str(config),
        str(warmup_s + window_s + 30),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await asyncio.sleep(warmup_s)
        c0, t0 = cpu_seconds(proc.pid), asyncio.get_running_loop().time()
        await asyncio.sleep(window_s)
        c1, t1 = cpu_seconds(proc.pid), asyncio.get_running_loop().time()
        rss, hwm = memory_mb(proc.pid)
    finally:
        proc.terminate()
        _, err = await proc.communicate()
    if proc.returncode not in (0, -15):
        raise RuntimeError(f"agent exited {proc.returncode}: {err.decode()[-2000:]}")
    return {"cpu_pct": 100 * (c1 - c0) / (t1 - t0), "rss_mb": rss, "hwm_mb": hwm}


async def run(
    reps: int = 3, warmup_s: float = 8.0, window_s: float = 30.0, breakdown: bool = False
) -> dict[str, dict[str, float]]:
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        settings = Settings(broker=broker.url, topic_prefix=f"bench{uuid.uuid4().hex[:6]}.", partitions=1)
        await ensure_topics(settings)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
        env.update(TAILHOUND_BROKER=broker.url, TAILHOUND_TOPIC_PREFIX=settings.topic_prefix, PYTHONPATH=str(ROOT))
        async with serve_endpoints() as urls:
            variants: dict[str, tuple[dict | None, tuple[str, ...] | None]] = {
                "baseline: runtime + sender + /metrics, no collectors": (None, None),
                "all collectors at 1 Hz": (urls, None),
            }
            if breakdown:
                variants.update({f"only {name}": (urls, only) for name, only in COLLECTOR_GROUPS.items()})
            results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
            for rep in range(reps):
                for name, (u, only) in variants.items():
                    cfg = Path(tmp) / f"agent-{rep}.yaml"
                    cfg.write_text(agent_yaml(u, "127.0.0.1:0", Path(tmp) / f"spill-{rep}.jsonl", only))
                    results[name].append(await measure_once(cfg, env, warmup_s, window_s))
                    print(f"  rep {rep + 1}/{reps} {name}: {results[name][-1]}", file=sys.stderr)
    return {name: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for name, runs in results.items()}


def report(medians: dict[str, dict[str, float]]) -> str:
    lines = ["| variant | CPU (% of one core) | RSS (MB) | peak RSS (MB) |", "|---|---:|---:|---:|"]
    for name, m in medians.items():
        lines.append(f"| {name} | {m['cpu_pct']:.2f} | {m['rss_mb']:.1f} | {m['hwm_mb']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(asyncio.run(run())))
