"""Broker outage drill: the bundled broker is paused (SIGSTOP) while an agent and a worker run, then resumed
(SIGCONT). A paused broker keeps its data (unlike a restart, test_broker_restart.py), so nothing may be lost:
the agent buffers what it collects during the outage and sends it when the broker answers again; the worker
waits and catches up, and a fault that starts after the outage is detected.

Figures: snapshots collected during the outage, lost, duplicated, the agent's outbox at the end of the pause,
time after SIGCONT until the agent's outbox is empty and until the worker has caught up.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.faults.conftest import scale
from tests.faults.rig import Rig, duplicates

pytestmark = [pytest.mark.broker, pytest.mark.slow]

PAUSE_S = scale(8, 30)
HOT_TICKS = 10


async def test_broker_paused_loses_nothing_and_both_recover(tmp_path, drill_report):
    async with asyncio.timeout(scale(120, 300)):
        async with Rig(tmp_path) as rig:
            await rig.wait_for("agent sending", lambda: rig.sent >= 20, timeout=30)
            await rig.wait_caught_up("worker caught up before the outage", timeout=60)

            t_pause = time.monotonic()
            rig.broker.pause()
            try:
                await asyncio.sleep(PAUSE_S)
                waiting = len(rig.sender.outbox)
            finally:
                rig.broker.resume()
            t_resume = time.monotonic()
            agent_s = await rig.wait_for(
                "agent outbox drained", lambda: len(rig.sender.outbox) <= 2, timeout=60, poll_s=0.05
            )
            worker_s = await rig.wait_caught_up("worker caught up after the outage", timeout=90)
            await rig.fleet.run_hot(HOT_TICKS)

            async def opened() -> bool:
                return any(e.event == "opened" for e in await rig.incidents(timeout=5))

            incident_s = await rig.wait_for("thermal incident after the outage", opened, timeout=60)
            await rig.fleet.stop()
            assert await rig.sender.flush(30), f"{len(rig.sender.outbox)} snapshot(s) never left the outbox"
            found = await rig.telemetry()
            emitted = rig.fleet.ids()
            lost = sorted(set(emitted) - set(found))
            events = await rig.incidents()
            figures = drill_report(
                pause_s=PAUSE_S,
                collected=len(emitted),
                collected_during_pause=len(rig.fleet.ids(t_pause, t_resume)),
                outbox_at_resume=waiting,
                lost=len(lost),
                duplicated=duplicates(found),
                dropped=rig.sender.outbox.dropped,
                agent_recover_s=round(agent_s, 2),
                worker_recover_s=round(worker_s, 2),
                incident_after_hot_s=round(incident_s, 2),
                send_errors=int(rig.metrics.send_errors._value.get()),
                worker_restarts=rig.worker.restarts,
                worker_exits=rig.worker.exits,
            )

    assert not lost, f"{len(lost)} snapshot(s) never reached the broker: {lost[:5]}"
    assert figures["outbox_at_resume"] >= PAUSE_S / 0.25, figures  # the agent kept collecting into its outbox
    assert [e.root_cause for e in events if e.event == "opened"] == ["gpu-thermal-throttle"], events
    assert figures["worker_restarts"] == 0, "the worker rides out an outage shorter than its commit retry limit"
