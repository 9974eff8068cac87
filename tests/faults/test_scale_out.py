"""Scale-out drills (issue 16): three workers share the partitions of one consumer group.

- **kill**: the worker that runs the hot node's partition is SIGKILLed for good in the middle of the incident;
  a survivor takes the partition over (from the changelog, or its standby copy), the incident goes on under its
  id and resolves, and it is paged exactly once and resolved exactly once (the notifier runs in every worker,
  one of them active, and recovers what was sent from its state topic wherever it moves);
- **join**: a third worker joins two while snapshots flow: the group rebalances, no incident is opened twice,
  nothing is paged twice, and the group catches up.

Figures: time from the kill (the join) until the group has committed everything sent before it, incident ids,
pages. Short in CI; ``TAILHOUND_LONG_DRILLS=1`` runs the fault longer and with the default session timeout.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
import urllib.request
from collections import Counter

import pytest
from aiokafka.partitioner import DefaultPartitioner

from tests.faults.conftest import scale
from tests.faults.rig import Rig
from tests.worker_group import port_of

pytestmark = [pytest.mark.broker, pytest.mark.slow]

NODES = tuple(f"gpu-node-{i}" for i in range(1, 7))
PARTITIONS = 6
HOT_NODE = "gpu-node-2"  # the rig's fleet heats GPUs 3 and 5 of this node
HOT_TICKS_AFTER = scale(12, 240)
SESSION_TIMEOUT_S = scale(6, 10)


def owner_of(rig: Rig, node: str):
    """The worker whose /metrics reports the telemetry partition `node` is sent to."""
    parts = list(range(PARTITIONS))
    partition = DefaultPartitioner()(node.encode(), parts, parts)
    needle = re.compile(
        rf'tailhound_consumer_lag_messages\{{partition="{partition}",topic="'
        rf'{re.escape(rig.settings.telemetry_topic)}"\}}'
    )
    for w in rig.workers:
        port = port_of(w)
        if port is None:
            continue
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                if needle.search(resp.read().decode()):
                    return w
        except OSError as exc:
            print(f"{w.log_path.name} (alive: {w.alive()}): {exc}")
    return None


async def incident_figures(rig: Rig) -> dict:
    events = await rig.incidents()
    pages = rig.pages()
    per_event = Counter((e.incident_id, e.sequence, e.event) for e in events)
    return {
        "incident_ids": len({e.incident_id for e in events}),
        "opened_ids": len({e.incident_id for e in events if e.event == "opened"}),
        "resolved_ids": len({e.incident_id for e in events if e.event == "resolved"}),
        "events": len(events),
        "redelivered_events": sum(n - 1 for n in per_event.values()),
        "pages": len(pages),
        "opened_pages": sum("resolved" not in p.lower() for p in pages),
        "resolved_pages": sum("resolved" in p.lower() for p in pages),
        "paged_by": sorted({w.log_path.name for w in [*rig.retired, *rig.workers] if _paged(w)}),
    }


def _paged(worker) -> bool:
    try:
        return any(line.startswith("notify ") for line in worker.log_path.read_text(errors="replace").splitlines())
    except OSError:
        return False


async def cool_down_and_resolve(rig: Rig) -> None:
    rig.fleet.hot = False

    async def resolved() -> bool:
        return any(e.event == "resolved" for e in await rig.incidents(timeout=5))

    await rig.wait_for("incident resolved", resolved, timeout=90)
    await rig.wait_for("resolved page", lambda: any("resolved" in p.lower() for p in rig.pages()), timeout=30)
    await asyncio.sleep(2.0)  # late duplicates


async def open_incident(rig: Rig) -> None:
    await rig.group.ready(timeout=120)
    rig.fleet.hot = True

    async def opened() -> bool:
        return any(e.event == "opened" for e in await rig.incidents(timeout=5))

    await rig.wait_for("incident opened", opened, timeout=90)
    await rig.wait_for("first page", lambda: rig.pages(), timeout=30)
    await asyncio.sleep(1.5)  # more than a commit interval: offsets, changelogs and the notifier state land


async def test_kill_one_of_three_workers_mid_incident(tmp_path, drill_report):
    async with asyncio.timeout(scale(240, 600)):
        async with Rig(
            tmp_path, notifier=True, partitions=PARTITIONS, workers=3, nodes=NODES, session_timeout_s=SESSION_TIMEOUT_S
        ) as rig:
            await open_incident(rig)
            victim = await asyncio.to_thread(owner_of, rig, HOT_NODE)
            assert victim is not None, "no worker reports the hot node's partition"
            rig.retire(victim)  # killed for good: the survivors must take over
            t_kill = time.monotonic()
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.wait(10)
            ticks = rig.fleet.ticks
            recover_s = await rig.wait_caught_up("survivors caught up", timeout=120)
            while rig.fleet.ticks < ticks + HOT_TICKS_AFTER:
                await asyncio.sleep(0.1)
            new_owner = await asyncio.to_thread(owner_of, rig, HOT_NODE)
            await cool_down_and_resolve(rig)
            figures = drill_report(
                workers=3,
                partitions=PARTITIONS,
                nodes=len(NODES),
                session_timeout_s=SESSION_TIMEOUT_S,
                kill_to_caught_up_s=round(recover_s, 1),
                kill_at_s=round(t_kill - rig.t_start, 1),
                killed=victim.log_path.name,
                taken_over_by=new_owner.log_path.name if new_owner else None,
                **await incident_figures(rig),
            )
            print("\n".join(rig.pages()))

    assert figures["taken_over_by"] is not None, figures
    assert figures["opened_ids"] == 1 and figures["resolved_ids"] == 1, figures
    assert figures["opened_pages"] == 1 and figures["resolved_pages"] == 1, figures


async def test_a_worker_joins_while_snapshots_flow(tmp_path, drill_report):
    async with asyncio.timeout(scale(240, 600)):
        async with Rig(
            tmp_path, notifier=True, partitions=PARTITIONS, workers=2, nodes=NODES, session_timeout_s=SESSION_TIMEOUT_S
        ) as rig:
            await open_incident(rig)
            t_join = time.monotonic()
            joined = rig.group.add()
            await rig.group.ready(timeout=120, workers=[joined])
            ready_s = time.monotonic() - t_join
            recover_s = await rig.wait_caught_up("group caught up after the join", timeout=120)
            joined_runs = await asyncio.to_thread(_reports_telemetry, rig, joined)
            ticks = rig.fleet.ticks
            while rig.fleet.ticks < ticks + HOT_TICKS_AFTER:
                await asyncio.sleep(0.1)
            await cool_down_and_resolve(rig)
            figures = drill_report(
                workers=3,
                partitions=PARTITIONS,
                nodes=len(NODES),
                join_to_ready_s=round(ready_s, 1),
                join_to_caught_up_s=round(ready_s + recover_s, 1),
                joined_runs_partitions=joined_runs,
                **await incident_figures(rig),
            )

    assert figures["joined_runs_partitions"], figures
    assert figures["opened_ids"] == 1 and figures["resolved_ids"] == 1, figures
    assert figures["opened_pages"] == 1 and figures["resolved_pages"] == 1, figures


def _reports_telemetry(rig: Rig, worker) -> bool:
    port = port_of(worker)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return f'topic="{rig.settings.telemetry_topic}"' in resp.read().decode()
