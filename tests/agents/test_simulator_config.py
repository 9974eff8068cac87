"""FaultSpec / SimConfig parsing and validation."""

from __future__ import annotations

import pytest

from tailhound.agents.simulator import FAULT_NAMES, FaultSpec, FleetSimulator, SimConfig, parse_duration


def test_fault_names_cover_the_documented_faults() -> None:
    assert set(FAULT_NAMES) == {
        "thermal-throttle",
        "memory-bandwidth-saturation",
        "traffic-surge",
        "kv-cache-pressure",
        "network-path-degradation",
        "ingress-overflow",
        "nvlink-degraded",
        "short-blip",
        "engine-restart",
        "retry-storm",
        "rolling-deploy",
        "warm-gpu",
        "long-prompt-hol",
        "slow-node",
        "gpu-xid-error",
        "long-prompt-prefill",
        "generation-length-growth",
        "load-imbalance",
        "power-cap",
        "health-check-flap",
        "scale-out",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("thermal-throttle@20m", FaultSpec("thermal-throttle", 1200.0)),
        (
            "thermal-throttle@20m+15m:node=gpu-node-2:gpus=3,5",
            FaultSpec("thermal-throttle", 1200.0, 900.0, node="gpu-node-2", gpus=(3, 5)),
        ),
        ("short-blip@90s", FaultSpec("short-blip", 90.0)),
        ("traffic-surge@1.5h+30", FaultSpec("traffic-surge", 5400.0, 30.0)),
        ("engine-restart@0", FaultSpec("engine-restart", 0.0)),
        ("  nvlink-degraded@5m+1h:gpus=0 ", FaultSpec("nvlink-degraded", 300.0, 3600.0, gpus=(0,))),
        ("traffic-surge@2m:node=*", FaultSpec("traffic-surge", 120.0, node="*")),
    ],
)
def test_parse_good(text: str, expected: FaultSpec) -> None:
    assert FaultSpec.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("", "empty"),
        ("thermal-throttle", "@START"),
        ("bogus@1m", "known faults: thermal-throttle"),
        ("thermal-throttle@abc", "bad duration"),
        ("thermal-throttle@-1m", "bad duration"),
        ("thermal-throttle@1m+0m", "duration"),
        ("thermal-throttle@1m+", "bad duration"),
        ("thermal-throttle@1m:gpus=a", "bad gpus"),
        ("thermal-throttle@1m:gpus=1,1", "duplicate"),
        ("thermal-throttle@1m:color=red", "unknown fault option"),
        ("thermal-throttle@1m:node", "key=value"),
        ("thermal-throttle@1m:node=a:node=b", "twice"),
        ("thermal-throttle@10x", "bad duration"),
    ],
)
def test_parse_bad(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        FaultSpec.parse(text)


def test_unknown_fault_name_lists_known_names() -> None:
    with pytest.raises(ValueError) as err:
        FaultSpec("gpu-on-fire", 0.0)
    for name in FAULT_NAMES:
        assert name in str(err.value)


def test_fault_spec_validation() -> None:
    with pytest.raises(ValueError):
        FaultSpec("short-blip", -1.0)
    with pytest.raises(ValueError):
        FaultSpec("short-blip", 0.0, duration_s=0.0)
    with pytest.raises(ValueError):
        FaultSpec("thermal-throttle", 0.0, gpus=(-1,))
    assert FaultSpec("thermal-throttle", 0.0, gpus=[3, 5]).gpus == (3, 5)  # type: ignore[arg-type]
    assert hash(FaultSpec("thermal-throttle", 0.0, gpus=(3, 5)))


def test_parse_duration() -> None:
    assert parse_duration("15") == 15.0
    assert parse_duration("2m") == 120.0
    assert parse_duration("0.5h") == 1800.0
    with pytest.raises(ValueError):
        parse_duration("5 minutes")


def test_simulator_rejects_unknown_targets() -> None:
    with pytest.raises(ValueError, match="unknown node"):
        FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@1m:node=gpu-node-9")])
    with pytest.raises(ValueError, match="out of range"):
        FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@1m:gpus=8")])


def test_sim_config_validation() -> None:
    with pytest.raises(ValueError):
        SimConfig(nodes=0)
    with pytest.raises(ValueError):
        SimConfig(interval_s=0)
    with pytest.raises(ValueError, match="unknown source"):
        SimConfig(sources=("vllm", "tgi"))
    assert SimConfig(nodes=3).node_names() == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]


def test_active_faults_windows() -> None:
    blip = FaultSpec.parse("short-blip@60s")
    throttle = FaultSpec.parse("thermal-throttle@1m+2m")
    forever = FaultSpec.parse("traffic-surge@3m")
    sim = FleetSimulator(SimConfig(nodes=1), [blip, throttle, forever])
    assert sim.active_faults(45.0) == []
    assert sim.active_faults(60.0) == [blip, throttle]
    assert sim.active_faults(75.0) == [throttle]  # one-shot faults last one tick
    assert sim.active_faults(179.0) == [throttle]
    assert sim.active_faults(180.0) == [forever]
    assert sim.active_faults(10_000.0) == [forever]


def test_engine_dcgm_and_noise_options() -> None:
    assert SimConfig().sources == ("vllm", "dcgm", "node", "blackbox")
    assert SimConfig(engine="tgi").sources == ("tgi", "dcgm", "node", "blackbox")  # "vllm" names the engine
    assert SimConfig(engine="tgi", sources=("tgi", "dcgm")).sources == ("tgi", "dcgm")
    for bad in ({"engine": "llamacpp"}, {"dcgm_fields": "some"}, {"noise": "loud"}):
        with pytest.raises(ValueError, match="unknown"):
            SimConfig(**bad)
    with pytest.raises(ValueError, match="unknown source"):
        SimConfig(engine="tgi", sources=("tgi", "nim"))


def test_client_side_and_rollout_faults_default_to_every_node() -> None:
    from tailhound.agents.simulator.faults import fault_nodes

    names = SimConfig(nodes=3).node_names()
    for fault in ("retry-storm@1m", "rolling-deploy@1m", "traffic-surge@1m", "network-path-degradation@1m:node=*"):
        assert fault_nodes(FaultSpec.parse(fault), names) == names
    for fault in ("warm-gpu@1m", "long-prompt-hol@1m", "network-path-degradation@1m"):
        assert fault_nodes(FaultSpec.parse(fault), names) == ["gpu-node-1"]
    assert fault_nodes(FaultSpec.parse("retry-storm@1m:node=gpu-node-2"), names) == ["gpu-node-2"]
