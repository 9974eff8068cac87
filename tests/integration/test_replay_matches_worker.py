"""The same recording gives the same incidents offline (`tailhound replay`) and through the real broker
and Faust worker (`tailhound agent --from-recording` -> worker)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.main import run_replay
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.incident import IncidentEvent
from tailhound.kafka import ensure_topics
from tailhound.streams.replay import replay_files
from tailhound.streams.ruleset import load_rules
from tailhound.worker_process import WorkerProcess
from tests.kafka_helpers import consume

pytestmark = [pytest.mark.broker, pytest.mark.slow]
RULES = Path(__file__).resolve().parents[2] / "rules"


SCENARIOS = {
    # GPU gauges only
    "thermal": (30, ["thermal-throttle@8m+10m:node=gpu-node-2:gpus=3,5",
                     "thermal-throttle@12m+6m:node=gpu-node-3:gpus=0"], {"gpu-node-2", "gpu-node-3"}),
    # latency windows, counter rates, rolling baselines, correlation (needs the 20-minute warm-up)
    "kv+network": (34, ["kv-cache-pressure@24m+8m:node=gpu-node-1", "network-path-degradation@24m+8m:node=gpu-node-3"],
                   {"gpu-node-1", "gpu-node-3"}),
    # the model stage: every node's queue grows; one model-scope incident (scope node None) on top
    "surge": (16, ["traffic-surge@8m+6m"], {"gpu-node-1", "gpu-node-2", "gpu-node-3", None}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_replay_and_worker_agree(settings, tmp_path, name):
    minutes, faults, nodes = SCENARIOS[name]
    sim = FleetSimulator(SimConfig(nodes=3, seed=5), [FaultSpec.parse(f) for f in faults])
    recording = tmp_path / "fleet.jsonl"
    write_recording(sim, minutes, recording)
    offline = replay_files([recording], load_rules(RULES), None).events
    assert {e.scope.node for e in offline} == nodes and sum(e.event == "opened" for e in offline) == len(nodes)

    await ensure_topics(settings)
    worker = WorkerProcess(settings, tmp_path / "worker.log")
    worker.start()
    try:
        assert await run_replay(settings, recording, speed=0) > 0
        records = await consume(settings, settings.incidents_topic, lambda rs: len(rs) >= len(offline),
                                timeout=120, alive=worker.alive)
    finally:
        worker.stop()
    online = [IncidentEvent.model_validate_json(r.value) for r in records]

    def key(e: IncidentEvent):
        return e.incident_id, e.sequence

    assert sorted(online, key=key) == sorted(offline, key=key), worker.log_tail()
