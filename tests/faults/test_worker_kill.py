"""Worker kill drill: the streams worker (with its notifier) is SIGKILLed in the middle of an incident and its
supervisor starts it again (:meth:`WorkerProcess.supervise`, back-off 1 s).

The incident must not be lost (the new worker recovers the node's state from the changelog and resolves the
same incident id when the GPUs cool down) and must not be paged twice (the notifier recovers what it sent
from its state topic). Figures: incident events (opened events under distinct ids, re-deliveries of the same
event), pages, time from the kill until the new worker has caught up with the telemetry sent before the kill.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter

import pytest

from tests.faults.conftest import scale
from tests.faults.rig import Rig

pytestmark = [pytest.mark.broker, pytest.mark.slow]

HOT_AFTER_KILL_TICKS = scale(12, 240)  # the fault goes on while the worker is down and restarting (fleet ticks)
#: A SIGKILLed worker cannot leave its group: the broker waits for its session to time out before the new worker
#: gets the partitions, so the recovery takes about back-off (1 s) + start (~4 s) + session timeout + rebalance
#: (~5 s). The short variant runs with a 6 s session (to stay near 40 s), the long one with the default (10 s).
SESSION_TIMEOUT_S = scale(6, 10)


async def test_worker_killed_mid_incident_keeps_the_incident_and_pages_once(tmp_path, drill_report):
    async with asyncio.timeout(scale(150, 400)):
        async with Rig(tmp_path, notifier=True, session_timeout_s=SESSION_TIMEOUT_S) as rig:
            rig.fleet.hot = True  # from the start: the incident opens as soon as the worker is up

            async def opened() -> bool:
                return any(e.event == "opened" for e in await rig.incidents(timeout=5))

            await rig.wait_for("incident opened", opened, timeout=60)
            await rig.wait_for("first page", lambda: rig.pages(), timeout=30)
            await asyncio.sleep(1.5)  # more than a commit interval: offsets and changelog land

            killed = rig.worker.proc
            t_kill = time.monotonic()
            killed.send_signal(signal.SIGKILL)
            killed.wait(10)
            # from the kill: the supervisor's back-off, the start, the rejoin (the dead member's session times
            # out first), the changelog recovery, the telemetry sent meanwhile
            hot_ticks = rig.fleet.ticks
            recover_s = await rig.wait_caught_up("restarted worker caught up", timeout=90)
            while rig.fleet.ticks < hot_ticks + HOT_AFTER_KILL_TICKS:
                await asyncio.sleep(0.1)
            rig.fleet.hot = False

            async def resolved() -> bool:
                return any(e.event == "resolved" for e in await rig.incidents(timeout=5))

            await rig.wait_for("incident resolved", resolved, timeout=90)
            await rig.wait_for("resolved page", lambda: len(rig.pages()) >= 2, timeout=30)
            await asyncio.sleep(1.5)  # late duplicates
            events = await rig.incidents()
            pages = rig.pages()
            per_event = Counter((e.incident_id, e.sequence, e.event) for e in events)
            opened_ids = sorted({e.incident_id for e in events if e.event == "opened"})
            figures = drill_report(
                session_timeout_s=SESSION_TIMEOUT_S,
                kill_to_caught_up_s=round(recover_s, 1),
                kill_at_s=round(t_kill - rig.t_start, 1),
                incident_ids=len({e.incident_id for e in events}),
                opened_ids=len(opened_ids),
                events=len(events),
                redelivered_events=sum(n - 1 for n in per_event.values()),
                pages=len(pages),
                opened_pages=sum("resolved" not in p.lower() for p in pages),
                worker_restarts=rig.worker.restarts,
                worker_exits=rig.worker.exits,
            )
            print("\n".join(pages))

    assert figures["worker_restarts"] == 1 and figures["worker_exits"] == [-signal.SIGKILL], figures
    assert len(opened_ids) == 1, f"the incident was opened under {len(opened_ids)} ids: {events}"
    assert [e.event for e in events if e.incident_id == opened_ids[0]][-1] == "resolved", events
    assert figures["opened_pages"] == 1, pages
