"""`tailhound simulate` publishes one message per snapshot, keyed by node, to the telemetry topic."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from tailhound.wire import is_v3, read_telemetry
from tests.kafka_helpers import consume

pytestmark = pytest.mark.broker


async def test_simulate_publishes_every_snapshot_keyed_by_node(settings):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    env.update(
        TAILHOUND_BROKER=settings.broker,
        TAILHOUND_TOPIC_PREFIX=settings.topic_prefix,
        TAILHOUND_PARTITIONS=str(settings.partitions),
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tailhound",
            "simulate",
            "--minutes",
            "5",
            "--nodes",
            "2",
            "--fault",
            "thermal-throttle@1m",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    expected = 2 * 4 * 20  # nodes x sources x ticks
    assert f"published {expected} snapshots" in proc.stdout
    records = await consume(settings, settings.telemetry_topic, lambda rs: len(rs) >= expected, timeout=30)
    assert len(records) == expected
    assert all(is_v3(r.value) for r in records)  # the default wire version
    snaps = read_telemetry(r.value for r in records)
    assert all(r.key == s.node.encode() for r, s in zip(records, snaps, strict=True))
    assert Counter(s.source for s in snaps) == {"vllm": 40, "dcgm": 40, "node": 40, "blackbox": 40}
    # one partition per node: per-node order is kept
    by_node: dict[str, set[int]] = {}
    for r, s in zip(records, snaps, strict=True):
        by_node.setdefault(s.node, set()).add(r.partition)
    assert all(len(p) == 1 for p in by_node.values())
