"""Several workers in one consumer group give the incidents offline replay gives (issue 16).

Scenarios of the real-fleet suite (tests/scenarios/suite.py) are recorded, replayed offline, and sent through
the real broker to 1, 2 or 3 worker processes sharing 4 or 8 partitions. Node rules run where a node's
partition lives, the model stage where its model's partition lives, and the roll-up on one partition, fed
by every worker; its event-time order (tailhound.streams.rollup.order) makes the result independent of which
worker ran ahead. Compared: every incident event (id, sequence, cause, severity, scope, evidence ...), not
only the outcome.

CI runs three cases (short); ``TAILHOUND_LONG_DRILLS=1`` runs the whole suite with every worker and
partition count.
"""

from __future__ import annotations

import os

import pytest

from tailhound.agents.main import run_replay
from tailhound.agents.simulator import FleetSimulator
from tailhound.agents.simulator.recording import write_recording
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset.rulefile import load_rules
from tests.kafka_helpers import consume
from tests.scenarios.suite import RULES, SCENARIOS
from tests.worker_group import WorkerGroup

pytestmark = [pytest.mark.broker, pytest.mark.slow]

LONG = os.environ.get("TAILHOUND_LONG_DRILLS", "") not in ("", "0", "false")
#: (scenario, workers, partitions): a fleet-wide surge (model stage + roll-up over every node), a fleet-wide
#: network path (fleet roll-up) and two faults on two nodes, spread over 2 and 3 workers
SHORT = [("surge-fleet", 3, 8), ("network-path-fleet", 2, 4), ("two-faults", 3, 4)]
CASES = [(name, w, p) for name in sorted(SCENARIOS) for w in (1, 2, 3) for p in (4, 8)] if LONG else SHORT


@pytest.mark.parametrize(("name", "workers", "partitions"), CASES)
async def test_workers_agree_with_replay(settings, tmp_path, name, workers, partitions):
    scenario = SCENARIOS[name]
    settings = settings.model_copy(update={"partitions": partitions}, deep=True)
    settings.streams.rollup_max_delay_s = 10.0  # the last events wait for it once the recording has been sent
    settings.sinks.console.enabled = False
    sim = FleetSimulator(scenario.sim_config(), [f.fault for f in scenario.faults])
    recording = tmp_path / "fleet.jsonl"
    write_recording(sim, scenario.minutes, recording)
    offline = replay_files([recording], load_rules(RULES), None).events

    await ensure_topics(settings)
    group = WorkerGroup(settings, tmp_path, workers)
    group.start()
    try:
        await group.ready(timeout=120)
        assert await run_replay(settings, recording, speed=0) > 0
        records = await consume(
            settings,
            settings.incidents_topic,
            lambda rs: len(rs) >= len(offline),
            timeout=120,
            alive=lambda: all(w.alive() for w in group.workers),
        )
        more = await consume(settings, settings.incidents_topic, lambda rs: False, timeout=4)  # nothing extra
    finally:
        group.stop()
    online = [IncidentEvent.model_validate_json(r.value) for r in more or records]
    assert events(online) == events(offline), "\n".join(differences(online, offline)) + "\n" + group.log_tails(4)
    late = [line for line in group.logs().splitlines() if "roll-up order:" in line]
    assert not late, late


def events(evs: list[IncidentEvent]) -> list[str]:
    """Every event, in a stable order (incident, sequence); JSON without the wall-clock-free fields aside."""
    return [e.model_dump_json() for e in sorted(evs, key=lambda e: (e.incident_id, e.sequence))]


def differences(online: list[IncidentEvent], offline: list[IncidentEvent]) -> list[str]:
    """The events that differ, one line each, field by field."""
    a, b = events(online), events(offline)
    out = [f"{len(a)} events online, {len(b)} offline"]
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            ex, ey = IncidentEvent.model_validate_json(x), IncidentEvent.model_validate_json(y)
            fields = [k for k in ex.model_fields if getattr(ex, k) != getattr(ey, k)]
            out.append(
                f"#{i} {ex.incident_id}/{ex.sequence} vs {ey.incident_id}/{ey.sequence}: "
                + "; ".join(f"{k}: {getattr(ex, k)!r:.300} != {getattr(ey, k)!r:.300}" for k in fields)
            )
    return out[:12]
