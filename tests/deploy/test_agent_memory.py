"""The agent's memory limits (the DaemonSet's `limits.memory`, the systemd unit's `MemoryMax`) hold the agent at
its worst: the RSS it has with NVML on a real GPU plus a full memory outbox, with room for peaks.

What a full outbox costs is measured here (tracemalloc over a real `Outbox` filled with small snapshots, the
worst case per byte), not assumed; the idle RSS is the one measured on an H200 (BENCHMARKS.md)."""

from __future__ import annotations

import os
import tracemalloc

import pytest
import yaml

from tailhound.agents.buffer import Message, Outbox
from tailhound.agents.config import parse_agent_config

from .helpers import K8S_DIR, ROOT, quantity
from .test_systemd_keda import SYSTEMD, unit

MIB = 1 << 20
#: RSS of `tailhound agent` with NVML on a real H200 (BENCHMARKS.md: 90 MB, the driver's +22 MB included)
IDLE_RSS_MIB = 90e6 / MIB
#: room for collection and GC peaks over the worst steady state
HEADROOM = 1.5
#: a small snapshot (procnet, tcp_connect): the most per-message overhead per byte of max_bytes
SMALL_SNAPSHOT = 600


@pytest.fixture(scope="module")
def outbox_cost() -> float:
    """Bytes of Python heap a full memory outbox takes per byte of its max_bytes."""
    max_bytes = 4 * MIB
    box = Outbox(max_bytes=max_bytes, max_messages=1_000_000)
    payload = os.urandom(SMALL_SNAPSHOT)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(max_bytes // (SMALL_SNAPSHOT + 13)):  # bounded: as many as fit (13: the key)
            box.append(Message(key=b"gpu-node-%04d" % (i % 1000), value=payload[:-4] + i.to_bytes(4, "big")))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert box.dropped == 0 and box.bytes > 0.95 * max_bytes
    return held / box.bytes


def needed_mib(max_bytes: int, cost: float) -> float:
    return HEADROOM * (IDLE_RSS_MIB + cost * max_bytes / MIB)


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S_DIR / name).read_text(encoding="utf-8")) if d]


def test_a_full_outbox_costs_more_than_its_max_bytes(outbox_cost):
    assert 1.0 < outbox_cost < 2.0, outbox_cost


def test_the_daemonset_limit_holds_nvml_and_a_full_outbox(outbox_cost, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    monkeypatch.setenv("NODE_IP", "10.0.0.11")
    (cm,) = _docs("agent-configmap.yaml")
    cfg = parse_agent_config(cm["data"]["agent.yaml"], origin="agent-configmap.yaml")
    (ds,) = _docs("agent-daemonset.yaml")
    (c,) = ds["spec"]["template"]["spec"]["containers"]
    limit = quantity(c["resources"]["limits"]["memory"]) / MIB
    need = needed_mib(cfg.publish.buffer.max_bytes, outbox_cost)
    assert limit >= need, f"limits.memory {limit:.0f} MiB < {need:.0f} MiB (RSS + full outbox, x {HEADROOM})"
    assert limit <= 2 * need, f"limits.memory {limit:.0f} MiB is far above what the agent needs ({need:.0f} MiB)"
    # what does not fit the memory outbox goes to the spill file, which must fit its emptyDir
    tmp = {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}["tmp"]["emptyDir"]
    assert cfg.publish.buffer.spill_file is not None
    assert cfg.publish.buffer.spill_max_bytes <= quantity(tmp["sizeLimit"])


def test_the_systemd_limit_holds_nvml_and_a_full_default_outbox(outbox_cost, monkeypatch):
    """The unit runs `tailhound example agent` (docs: deploy/systemd/README.md), whose outbox is the default."""
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    cfg = parse_agent_config(
        (ROOT / "tailhound" / "examples" / "agent.yaml").read_text(encoding="utf-8"), origin="agent.yaml"
    )
    (memory_max,) = unit(SYSTEMD / "tailhound-agent.service")["Service"]["MemoryMax"]
    limit = quantity(memory_max.replace("G", "Gi").replace("M", "Mi")) / MIB
    need = needed_mib(cfg.publish.buffer.max_bytes, outbox_cost)
    assert need <= limit <= 2 * need, f"MemoryMax {limit:.0f} MiB for {need:.0f} MiB needed"
