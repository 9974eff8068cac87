"""How active faults change the models of one node at one tick.

:func:`node_effects` folds every fault active on a node into one :class:`NodeEffects`; the engine,
GPU and network models read it. Slowdowns caused by GPU clocks (thermal throttling) are not here:
the GPU model derives them from its own temperature, so a fault's ramp-up and recovery follow the
thermal dynamics instead of switching instantly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .config import ALL_NODES, FaultSpec

#: Default GPUs of a thermal-throttle fault (as in the playbook: 2 of 8 GPUs throttle).
DEFAULT_THERMAL_GPUS: tuple[int, ...] = (3, 5)
#: Arrival-rate multiplier of a traffic surge.
SURGE_FACTOR = 3.0
#: Decode (TPOT/ITL) and prefill slowdowns of the non-thermal engine faults.
MEMBW_DECODE_SLOWDOWN = 1.55
MEMBW_PREFILL_SLOWDOWN = 1.15
NVLINK_SLOWDOWN = 1.15
NVLINK_BANDWIDTH_FACTOR = 0.18
BLIP_SLOWDOWN = 3.0
#: Long-context burst of a KV-cache-pressure fault: prompts this many times longer.
KV_PRESSURE_PROMPT_SCALE = 8.0
#: Network path degradation: extra round-trip time (s) and packet loss ratio.
NET_EXTRA_RTT_S = 0.022
NET_LOSS = 0.01


@dataclass
class NodeEffects:
    """Everything the active faults change on one node during one tick."""

    arrival_scale: float = 1.0
    decode_slowdown: float = 1.0  # multiplies TPOT/ITL (on top of GPU-clock slowdowns)
    prefill_slowdown: float = 1.0  # multiplies prefill time (TTFT)
    prompt_scale: float = 1.0  # long-context bursts
    kv_pressure: bool = False
    engine_restart: bool = False
    overheating_gpus: frozenset[int] = frozenset()
    dram_saturated_gpus: frozenset[int] = frozenset()
    nvlink_degraded_gpus: frozenset[int] = frozenset()
    nvlink_dead_link: int = 0
    net_extra_rtt_s: float = 0.0
    net_loss: float = 0.0
    ingress_overflow: bool = False
    active: list[str] = field(default_factory=list)


def fault_nodes(fault: FaultSpec, node_names: Sequence[str]) -> list[str]:
    """Nodes a fault acts on (None -> first node, or all for traffic-surge; ``*`` -> all)."""
    if fault.node == ALL_NODES or (fault.node is None and fault.name == "traffic-surge"):
        return list(node_names)
    if fault.node is None:
        return [node_names[0]]
    return [fault.node]


def fault_gpus(fault: FaultSpec, gpus_per_node: int) -> frozenset[int]:
    """GPU indices a GPU fault acts on (thermal default: 3 and 5; others: every GPU)."""
    if fault.gpus:
        return frozenset(fault.gpus)
    if fault.name == "thermal-throttle":
        picked = tuple(g for g in DEFAULT_THERMAL_GPUS if g < gpus_per_node)
        return frozenset(picked or (gpus_per_node - 1,))
    return frozenset(range(gpus_per_node))


def validate_faults(faults: Sequence[FaultSpec], node_names: Sequence[str], gpus_per_node: int) -> None:
    """ValueError if a fault names an unknown node or a GPU index the node does not have."""
    for f in faults:
        if f.node is not None and f.node != ALL_NODES and f.node not in node_names:
            raise ValueError(f"fault {f.name}: unknown node {f.node!r}; nodes are {', '.join(node_names)}")
        bad = [g for g in f.gpus if g >= gpus_per_node]
        if bad:
            raise ValueError(f"fault {f.name}: GPU index {bad} out of range 0..{gpus_per_node - 1}")


def node_effects(faults: Sequence[FaultSpec], node: str, node_names: Sequence[str], gpus_per_node: int) -> NodeEffects:
    """Fold the (already active) `faults` that target `node` into one :class:`NodeEffects`."""
    eff = NodeEffects()
    for f in faults:
        if node not in fault_nodes(f, node_names):
            continue
        eff.active.append(f.name)
        name = f.name
        if name == "thermal-throttle":
            eff.overheating_gpus = eff.overheating_gpus | fault_gpus(f, gpus_per_node)
        elif name == "memory-bandwidth-saturation":
            eff.dram_saturated_gpus = eff.dram_saturated_gpus | fault_gpus(f, gpus_per_node)
            eff.decode_slowdown *= MEMBW_DECODE_SLOWDOWN
            eff.prefill_slowdown *= MEMBW_PREFILL_SLOWDOWN
        elif name == "traffic-surge":
            eff.arrival_scale *= SURGE_FACTOR
        elif name == "kv-cache-pressure":
            eff.kv_pressure = True
            eff.prompt_scale *= KV_PRESSURE_PROMPT_SCALE
        elif name == "network-path-degradation":
            eff.net_extra_rtt_s = max(eff.net_extra_rtt_s, NET_EXTRA_RTT_S)
            eff.net_loss = max(eff.net_loss, NET_LOSS)
        elif name == "ingress-overflow":
            eff.ingress_overflow = True
        elif name == "nvlink-degraded":
            eff.nvlink_degraded_gpus = eff.nvlink_degraded_gpus | fault_gpus(f, gpus_per_node)
            eff.decode_slowdown *= NVLINK_SLOWDOWN
            eff.prefill_slowdown *= NVLINK_SLOWDOWN
        elif name == "short-blip":
            eff.decode_slowdown *= BLIP_SLOWDOWN
            eff.prefill_slowdown *= BLIP_SLOWDOWN
        elif name == "engine-restart":
            eff.engine_restart = True
    return eff
