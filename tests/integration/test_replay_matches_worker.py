"""The same recording gives the same incidents offline (`tailhound replay`) and through the real broker
and Faust worker (`tailhound agent --from-recording` -> worker), with the agent publishing telemetry version 1
or 3."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.config import AgentConfig
from tailhound.agents.main import run_replay
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset.rulefile import load_rules
from tailhound.worker.process import WorkerProcess
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
RULES = Path(__file__).resolve().parents[2] / "rules"


SCENARIOS = {
    # GPU gauges only; the same cause on two nodes of the model 4 minutes apart rolls up into one incident
    "thermal": (
        30,
        ["thermal-throttle@8m+10m:node=gpu-node-2:gpus=3,5", "thermal-throttle@12m+6m:node=gpu-node-3:gpus=0"],
        {"gpu-node-2", "gpu-node-3"},
        1,
    ),
    # latency windows, counter rates, rolling baselines, correlation (needs the 20-minute warm-up); two causes
    "kv+network": (
        34,
        ["kv-cache-pressure@24m+8m:node=gpu-node-1", "network-path-degradation@24m+8m:node=gpu-node-3"],
        {"gpu-node-1", "gpu-node-3"},
        2,
    ),
    # the model stage and the roll-up (after the 20-minute warm-up: node-level capacity needs the demand
    # baseline): every node's queue grows; one model-scope incident lists the nodes
    "surge": (30, ["traffic-surge@22m+6m"], {"gpu-node-1", "gpu-node-2", "gpu-node-3"}, 1),
}


#: agent configs the worker is fed with: the default (telemetry version 3, one message per snapshot), and version 2,
#: version-1 snapshots bundled per node and tick, which the worker still reads (only for the scenario with the model
#: stage and histograms; plain version 1 against a real worker: tests/hostile/test_pills_worker.py)
WIRES = [(name, None) for name in sorted(SCENARIOS)] + [
    ("surge", AgentConfig(listen=None, publish={"wire": 1, "bundle": True}))
]


@pytest.mark.parametrize(("name", "config"), WIRES, ids=[f"{n}-v{2 if c else 3}" for n, c in WIRES])
async def test_replay_and_worker_agree(settings, tmp_path, name, config):
    minutes, faults, nodes, incidents = SCENARIOS[name]
    sim = FleetSimulator(SimConfig(nodes=3, seed=5), [FaultSpec.parse(f) for f in faults])
    recording = tmp_path / "fleet.jsonl"
    write_recording(sim, minutes, recording)
    offline = replay_files([recording], load_rules(RULES), None).events
    covered = {n for e in offline for n in ([e.scope.node] if e.scope.node else e.scope.nodes)}
    assert covered == nodes and sum(e.event == "opened" for e in offline) == incidents

    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    try:
        assert await run_replay(settings, recording, speed=0, config=config) > 0
        records = await consume(
            settings, settings.incidents_topic, lambda rs: len(rs) >= len(offline), timeout=120, alive=worker.alive
        )
    finally:
        worker.stop()
    online = [IncidentEvent.model_validate_json(r.value) for r in records]

    assert outcome(online) == outcome(offline), worker.log_tail()
    # an incident of one node is the same event for event; a rolled-up one (several nodes) gets the same
    # opening and ending, while its updates in between follow the order its members' events arrived in
    assert alone(online) == alone(offline), worker.log_tail()


def by_incident(events: list[IncidentEvent]) -> dict[str, list[IncidentEvent]]:
    out: dict[str, list[IncidentEvent]] = {}
    for e in sorted(events, key=lambda e: (e.incident_id, e.sequence)):
        out.setdefault(e.incident_id, []).append(e)
    return out


def outcome(events: list[IncidentEvent]) -> list[tuple]:
    """Per incident: its first event, and how it ended (cause, severity, scope), in a stable order."""
    out = []
    for evs in by_incident(events).values():
        first, last = evs[0], evs[-1]
        out.append((first.model_dump_json(), last.event, last.root_cause, last.severity, last.scope.model_dump_json()))
    return sorted(out)


def alone(events: list[IncidentEvent]) -> list[IncidentEvent]:
    return [e for evs in by_incident(events).values() if not any(e.scope.nodes for e in evs) for e in evs]
