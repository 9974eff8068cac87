"""How active faults change the models of one node at one tick.

:func:`node_effects` folds every fault active on a node into one :class:`NodeEffects`; the engine,
GPU and network models read it. Slowdowns caused by GPU clocks (thermal throttling) are not here:
the GPU model derives them from its own temperature, so a fault's ramp-up and recovery follow the
thermal dynamics instead of switching instantly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .config import ALL_NODES, FLEET_DEFAULT_FAULTS, FaultSpec

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
#: A node-local slowdown no hardware counter shows (a co-tenant process on the GPUs, a driver or engine
#: configuration regression): every decode step 1.7x slower, prefill 1.2x.
SLOW_NODE_DECODE_SLOWDOWN = 1.7
SLOW_NODE_PREFILL_SLOWDOWN = 1.2
#: Long-context burst of a KV-cache-pressure fault: prompts this many times longer.
KV_PRESSURE_PROMPT_SCALE = 8.0
#: Network path degradation: extra round-trip time (s) and packet loss ratio.
NET_EXTRA_RTT_S = 0.022
NET_LOSS = 0.01
#: Default GPU of a warm-gpu fault, and how much warmer than its peers it runs (C): a clogged filter or a
#: weaker fan, well below the slowdown temperature, clocks unchanged. Nothing to page for.
DEFAULT_WARM_GPU = 6
WARM_GPU_EXTRA_C = 6.5
#: Retry storm: a client burst (fresh arrivals x STORM_TRIGGER for the first STORM_TRIGGER_S) overloads
#: the engines; clients then retry every rejected request at once and re-send requests that waited past
#: their timeout, so the queue stays full after the burst (a metastable overload) until the clients get
#: a backoff (the end of the fault). The engine side is in engine.py (admission limit, retries), its numbers
#: in engine_params.py.
STORM_TRIGGER = 2.0
STORM_TRIGGER_S = 120.0
#: Rolling deploy: engines restart one after another (default spacing), each down for ROLLING_DOWN_S
#: (drained from the load balancer, its traffic spread over the others; scrapes fail; counters and
#: histograms start from zero when it is back).
ROLLING_STEP_S = 180.0
ROLLING_DOWN_S = 90.0
#: Head-of-line blocking: a long-generation tenant (a batch client with a fixed concurrency) is pinned to
#: one node by session affinity, and the gateway sends the node's interactive traffic elsewhere, so it gets
#: HOL_ARRIVAL_SCALE of its usual requests, HOL_LONG_SHARE of them long generations (engine_params.py: short
#: prompts, ~1800 tokens out). The long requests hold the batch's slots (max_num_seqs) while the KV cache
#: has room, and the short requests wait behind them in the FIFO queue (at most engine_params.HOL_MAX_WAITING:
#: the closed-loop client sends no more than its concurrency).
HOL_LONG_SHARE = 0.65
HOL_ARRIVAL_SCALE = 0.5
#: GPU hardware error: one GPU (default DEFAULT_XID_GPU) reports XID 48 (a double-bit ECC error)
#: and one row remapped for an uncorrectable error; the engine on it crashes and stays down until the fault
#: ends (the GPU is reset), and the load balancer spreads its traffic over the other nodes.
DEFAULT_XID_GPU = 4
XID_DOUBLE_BIT_ECC = 48
#: Long-prompt head-of-line blocking: a tenant starts sending long documents (RAG, summarisation), so
#: LONG_PROMPT_SHARE of the node's requests carry ~engine.LONG_PROMPT_MEDIAN prompt tokens. Without chunked
#: prefill each long prefill runs as one step: the running batch's decode steps and the queue wait for it.
LONG_PROMPT_SHARE = 0.05
#: Generation-length growth: a new model build, quantization, prompt template or max_tokens change makes the
#: outputs this much longer (median output length), at the same arrivals and the same per-token speed.
GEN_GROWTH_SCALE = 2.0
#: Load imbalance: the load balancer (round-robin over uneven requests, session stickiness) sends the
#: fault's nodes this multiple of their share; the model's other nodes get the rest (same total traffic).
IMBALANCE_HOT_SCALE = 1.8
#: Power cap (``nvidia-smi -pl``, a facility's power budget): the GPUs' board limit lowered from 700 W to
#: this; under load the clock drops until the board draws no more (clock-event reason sw_power_cap),
#: temperatures stay normal (less power, less heat). Not a fault to page for: the fleet runs as configured.
POWER_CAP_LIMIT_W = 500.0
#: Health-check flapping: /health is served behind inference, so under load it answers in
#: HEALTH_SLOW_S (near the load balancer's timeout) and then times out; after HEALTH_FAILING_S of failed
#: checks the balancer removes the instance (no traffic, /health fast again) and re-adds it after
#: HEALTH_REMOVED_S of passing checks; the cycle repeats every HEALTH_FLAP_CYCLE_S while the fault lasts.
HEALTH_FLAP_CYCLE_S = 120.0
HEALTH_SLOW_FOR_S = 45.0
HEALTH_FAILING_S = 30.0
HEALTH_SLOW_S = 2.5


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
    warm_gpus: frozenset[int] = frozenset()
    power_capped_gpus: frozenset[int] = frozenset()  # board power limit lowered to POWER_CAP_LIMIT_W
    retry_storm: bool = False
    engine_down: bool = False  # rolling deploy: the engine is being replaced (drained, scrapes fail)
    long_gen_share: float = 0.0  # share of requests that ask for long generations (head-of-line blocking)
    xid_gpus: frozenset[int] = frozenset()  # GPUs that report a hardware XID (gpu-xid-error)
    long_prompt_share: float = 0.0  # share of requests with long prompts (long-prompt head-of-line blocking)
    gen_scale: float = 1.0  # output lengths x this (generation-length growth)
    health_extra_s: float = 0.0  # extra /health latency (health-check-flap: near the timeout)
    health_timeout: bool = False  # /health times out this tick (health-check-flap)
    lb_removed: bool = False  # the load balancer took the instance out: no traffic, engine still up
    not_provisioned: bool = False  # scale-out: the node does not exist yet (no snapshots)
    cold_start: bool = False  # scale-out: up and scraped, loading the model (serves nothing, /health fails)
    # realistic noise (noise.py); neutral values leave every model exactly as in the basic profile
    inlet_offset_c: float = 0.0
    retrans_blip: float = 0.0  # extra TCP retransmit ratio this tick
    probe_syn_retry: bool = False  # this tick's probe lost its first SYN
    probe_extra_s: float = 0.0  # extra server-side processing time of this tick's probe
    missed_scrapes: frozenset[str] = frozenset()  # sources whose scrape timed out this tick
    active: list[str] = field(default_factory=list)


def fault_nodes(fault: FaultSpec, node_names: Sequence[str]) -> list[str]:
    """Nodes a fault acts on (None -> first node, or all for FLEET_DEFAULT_FAULTS; ``*`` -> all)."""
    if fault.node == ALL_NODES or (fault.node is None and fault.name in FLEET_DEFAULT_FAULTS):
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
    if fault.name == "warm-gpu":
        return frozenset((min(DEFAULT_WARM_GPU, gpus_per_node - 1),))
    if fault.name == "gpu-xid-error":
        return frozenset((min(DEFAULT_XID_GPU, gpus_per_node - 1),))
    return frozenset(range(gpus_per_node))


def health_flap_phase(fault: FaultSpec, t_s: float) -> str:
    """Where a health-check-flap is at `t_s`: "slow" (in rotation, /health near the timeout), "failing"
    (in rotation, /health timing out) or "removed" (out of the load balancer)."""
    phase = (t_s - fault.start_s) % HEALTH_FLAP_CYCLE_S
    if phase < HEALTH_SLOW_FOR_S:
        return "slow"
    return "failing" if phase < HEALTH_SLOW_FOR_S + HEALTH_FAILING_S else "removed"


def rolling_windows(fault: FaultSpec, node_names: Sequence[str]) -> dict[str, tuple[float, float]]:
    """Rolling deploy: node -> (start, end) seconds of the window its engine is down."""
    nodes = fault_nodes(fault, node_names)
    step = ROLLING_STEP_S if fault.duration_s is None else fault.duration_s / len(nodes)
    down = min(ROLLING_DOWN_S, step)
    return {n: (fault.start_s + k * step, fault.start_s + k * step + down) for k, n in enumerate(nodes)}


def _rolling_down(fault: FaultSpec, node_names: Sequence[str], t_s: float) -> set[str]:
    return {n for n, (a, b) in rolling_windows(fault, node_names).items() if a <= t_s < b}


def validate_faults(faults: Sequence[FaultSpec], node_names: Sequence[str], gpus_per_node: int) -> None:
    """ValueError if a fault names an unknown node or a GPU index the node does not have."""
    for f in faults:
        if f.node is not None and f.node != ALL_NODES and f.node not in node_names:
            raise ValueError(f"fault {f.name}: unknown node {f.node!r}; nodes are {', '.join(node_names)}")
        bad = [g for g in f.gpus if g >= gpus_per_node]
        if bad:
            raise ValueError(f"fault {f.name}: GPU index {bad} out of range 0..{gpus_per_node - 1}")


def node_effects(
    faults: Sequence[FaultSpec], node: str, node_names: Sequence[str], gpus_per_node: int, t_s: float = 0.0
) -> NodeEffects:
    """Fold the (already active) `faults` that target `node` into one :class:`NodeEffects` at `t_s`
    seconds from the start (time-shaped faults: rolling deploy, the retry storm's trigger)."""
    eff = NodeEffects()
    for f in faults:
        if f.name == "rolling-deploy":  # the engines still up take the drained engines' traffic
            down = _rolling_down(f, node_names, t_s)
            if down and node not in down:
                eff.arrival_scale *= len(node_names) / max(1, len(node_names) - len(down))
        if f.name == "gpu-xid-error" and node not in fault_nodes(f, node_names):  # the LB drains the dead engine
            dead = len(fault_nodes(f, node_names))
            eff.arrival_scale *= len(node_names) / max(1, len(node_names) - dead)
        if (
            f.name == "health-check-flap"
            and node not in fault_nodes(f, node_names)
            and health_flap_phase(f, t_s) == "removed"
        ):  # the others take the removed instance's share
            flapping = len(fault_nodes(f, node_names))
            eff.arrival_scale *= len(node_names) / max(1, len(node_names) - flapping)
        if f.name == "load-imbalance":  # the balancer's other nodes get what the hot ones take on top
            hot = fault_nodes(f, node_names)
            if node not in hot and len(hot) < len(node_names):
                rest = len(node_names) - len(hot)
                eff.arrival_scale *= max(0.1, (len(node_names) - IMBALANCE_HOT_SCALE * len(hot)) / rest)
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
        elif name == "slow-node":
            eff.decode_slowdown *= SLOW_NODE_DECODE_SLOWDOWN
            eff.prefill_slowdown *= SLOW_NODE_PREFILL_SLOWDOWN
        elif name == "short-blip":
            eff.decode_slowdown *= BLIP_SLOWDOWN
            eff.prefill_slowdown *= BLIP_SLOWDOWN
        elif name == "engine-restart":
            eff.engine_restart = True
        elif name == "warm-gpu":
            eff.warm_gpus = eff.warm_gpus | fault_gpus(f, gpus_per_node)
        elif name == "power-cap":
            eff.power_capped_gpus = eff.power_capped_gpus | fault_gpus(f, gpus_per_node)
        elif name == "retry-storm":
            eff.retry_storm = True
            if t_s < f.start_s + STORM_TRIGGER_S:
                eff.arrival_scale *= STORM_TRIGGER
        elif name == "rolling-deploy":
            if node in _rolling_down(f, node_names, t_s):
                eff.engine_down = True
        elif name == "long-prompt-hol":
            eff.long_gen_share = HOL_LONG_SHARE
            eff.arrival_scale *= HOL_ARRIVAL_SCALE
        elif name == "gpu-xid-error":
            eff.xid_gpus = eff.xid_gpus | fault_gpus(f, gpus_per_node)
            eff.engine_down = True  # the engine crashed with its GPU
        # --- engine-side causes: long prompts, longer outputs, an unbalanced load balancer
        elif name == "long-prompt-prefill":
            eff.long_prompt_share = LONG_PROMPT_SHARE
        elif name == "generation-length-growth":
            eff.gen_scale *= GEN_GROWTH_SCALE
        elif name == "load-imbalance":
            eff.arrival_scale *= IMBALANCE_HOT_SCALE
        elif name == "health-check-flap":
            phase = health_flap_phase(f, t_s)
            eff.health_extra_s = HEALTH_SLOW_S if phase == "slow" else 0.0
            eff.health_timeout = phase == "failing"
            eff.lb_removed = phase == "removed"
    return eff
