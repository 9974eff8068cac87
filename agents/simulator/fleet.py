"""FleetSimulator: N nodes x G GPUs, one vLLM-like (or TGI) engine per node, snapshots every interval."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from tailhound.snapshot import Snapshot

from .config import FaultSpec, SimConfig
from .engine import Engine
from .engine_params import mix_capacity_rps
from .faults import POWER_CAP_LIMIT_W, WARM_GPU_EXTRA_C, XID_DOUBLE_BIT_ECC, NodeEffects, node_effects, validate_faults
from .gpu import POWER_CAP_W, GpuState
from .load import LoadModel
from .network import BlackboxProbe, NodeNetwork
from .noise import FleetNoise, NodeNoise
from .scale_out import apply_scale_out
from .sglang import SGLANG_PORT
from .tgi import TGI_PORT
from .trace import TraceLoad, load_trace

#: What a failed scrape records (the engine being replaced, or an endpoint that timed out once).
DOWN_ERROR = "connection refused"
TIMEOUT_ERROR = "scrape timed out"


class _Node:
    """Every model of one node, each with its own seeded random stream."""

    def __init__(self, config: SimConfig, name: str, trace_load: TraceLoad | None = None) -> None:
        def rng(part: str) -> random.Random:
            return random.Random(f"tailhound-sim/{config.seed}/{name}/{part}")

        self.name = name
        self.start_ts = config.start_ts
        self.trace_load = trace_load
        self._trace_rng = rng("trace")
        self.engine_source = config.engine
        self.load = LoadModel(rng("load"))
        if config.engine == "vllm":
            self.engine = Engine(
                rng("engine"),
                config.model,
                http_metrics=config.http_metrics,
                http_rng=rng("http") if config.http_metrics else None,
            )
        else:
            self.engine = Engine(
                rng("engine"),
                config.model,
                kind=config.engine,
                http_rng=rng("http"),
                instance=f"{name}:{SGLANG_PORT if config.engine == 'sglang' else TGI_PORT}",
            )
        self.gpus = [
            GpuState(rng(f"gpu{i}"), name, i, config.nvlink_per_link, config.dcgm_fields)
            for i in range(config.gpus_per_node)
        ]
        self.network = NodeNetwork(rng("network"))
        self.probe = BlackboxProbe(rng("probe"), name)
        if config.engine == "tgi":
            self.probe.labels["target"] = f"http://{name}:{TGI_PORT}/health"
        elif config.engine == "sglang":
            self.probe.labels["target"] = f"http://{name}:{SGLANG_PORT}/health"
        self.noise = NodeNoise(rng("noise")) if config.noise == "realistic" else None
        self._missed: frozenset[str] = frozenset()
        self._absent = False  # scale-out: not provisioned yet, nothing to scrape
        # Validate the envelope once (node name, sources, interval); ticks then skip re-validation.
        for source in config.sources:
            Snapshot(ts=config.start_ts, node=name, source=source, interval_s=config.interval_s)

    def step(self, ts: float, dt: float, eff: NodeEffects) -> None:
        """Advance every model of the node by one tick."""
        prev_util = self.engine.last.utilization
        warm, inlet = eff.warm_gpus, eff.inlet_offset_c
        for gpu in self.gpus:
            extra = inlet + WARM_GPU_EXTRA_C if gpu.index in warm else inlet
            gpu.power_limit_w = POWER_CAP_LIMIT_W if gpu.index in eff.power_capped_gpus else POWER_CAP_W
            gpu.update_thermal(dt, prev_util, gpu.index in eff.overheating_gpus, extra)
            gpu.set_hardware_error(XID_DOUBLE_BIT_ECC if gpu.index in eff.xid_gpus else None)
        # Tensor parallelism: every step waits for the slowest GPU of the group.
        clock_slowdown = max(gpu.slowdown for gpu in self.gpus)
        requests = None
        if self.trace_load is not None:
            share = self.load.node_share * eff.arrival_scale
            requests = self.trace_load.node_requests(self._trace_rng, ts - self.start_ts, dt, share)
            arrivals = len(requests)
        else:
            _, arrivals = self.load.arrivals(ts, dt, eff.arrival_scale)
        if eff.engine_down or eff.lb_removed:
            arrivals, requests = 0, (None if requests is None else [])  # drained from the load balancer
        tick = self.engine.step(dt, arrivals, eff, clock_slowdown, requests)
        token_rate = tick.prompt_tps + tick.generation_tps
        for gpu in self.gpus:
            gpu.update_load(
                dt,
                tick.utilization,
                token_rate,
                tick.prompt_tps,
                tick.generation_tps,
                dram_saturated=gpu.index in eff.dram_saturated_gpus,
                nvlink_degraded=gpu.index in eff.nvlink_degraded_gpus,
                dead_link=eff.nvlink_dead_link,
            )
        self.network.update(dt, tick, eff)
        self.probe.probe(tick, eff)
        self._missed = eff.missed_scrapes | ({self.engine_source} if eff.engine_down else frozenset())
        self._absent = eff.not_provisioned

    def snapshots(self, ts: float, config: SimConfig) -> list[Snapshot]:
        """One snapshot per configured source."""
        out: list[Snapshot] = []
        if self._absent:
            return out
        for source in config.sources:
            if source in self._missed:  # a failed scrape: the envelope and the error, no samples
                error = DOWN_ERROR if source == self.engine_source and self.engine.down else TIMEOUT_ERROR
                labels = dict(self.engine.labels) if source == self.engine_source else {}
                out.append(
                    Snapshot.model_construct(
                        ts=ts,
                        node=self.name,
                        source=source,
                        interval_s=config.interval_s,
                        labels=labels,
                        samples=[],
                        error=error,
                    )
                )
                continue
            if source == self.engine_source:
                labels, samples = dict(self.engine.labels), self.engine.samples()
            elif source == "dcgm":
                labels, samples = {}, [s for gpu in self.gpus for s in gpu.samples()]
            elif source == "node":
                labels, samples = {}, self.network.samples()
            else:  # blackbox
                labels, samples = dict(self.probe.labels), self.probe.samples()
            # Samples are validated models already; model_construct skips validating them twice.
            out.append(
                Snapshot.model_construct(
                    ts=ts,
                    node=self.name,
                    source=source,
                    interval_s=config.interval_s,
                    labels=labels,
                    samples=samples,
                )
            )
        return out


def _trace_load(config: SimConfig) -> TraceLoad:
    """The config's trace, its rate scaled so that its busiest minute loads the fleet to `load_trace_peak`
    of the engines' capacity for the trace's own token mix."""
    trace = load_trace(str(config.load_trace))
    capacity = config.nodes * mix_capacity_rps(*trace.mean_tokens())
    return TraceLoad(
        trace, config.load_trace_peak * capacity / trace.peak_rps(), config.nodes, config.load_trace_start_s
    )


class FleetSimulator:
    """Deterministic fleet simulator: same config, seed and faults give identical snapshots."""

    def __init__(self, config: SimConfig = SimConfig(), faults: Sequence[FaultSpec] = ()) -> None:
        self.config = config
        self.faults: tuple[FaultSpec, ...] = tuple(faults)
        self._names = config.node_names()
        validate_faults(self.faults, self._names, config.gpus_per_node)
        self.trace_load = _trace_load(config) if config.load_trace is not None else None
        self._nodes = [_Node(config, name, self.trace_load) for name in self._names]
        # a trace carries the fleet's own swings and bursts: the realistic profile adds only per-node noise
        self._noise = (
            FleetNoise(random.Random(f"tailhound-sim/{config.seed}/fleet/noise"))
            if config.noise == "realistic" and self.trace_load is None
            else None
        )
        self._t = 0.0  # simulated seconds from start of the next tick

    @property
    def node_names(self) -> list[str]:
        """``gpu-node-1`` .. ``gpu-node-N``."""
        return list(self._names)

    @property
    def elapsed_s(self) -> float:
        """Simulated seconds from the start to the next tick."""
        return self._t

    def active_faults(self, t_s: float) -> list[FaultSpec]:
        """Faults acting on the tick at `t_s` seconds from the start."""
        return [f for f in self.faults if f.is_active(t_s, self.config.interval_s)]

    def step(self) -> tuple[float, list[Snapshot]]:
        """Advance one interval; return (event time of this tick, all snapshots of this tick)."""
        cfg = self.config
        t = self._t
        ts = cfg.start_ts + t
        active = self.active_faults(t)
        snapshots: list[Snapshot] = []
        fleet_scale = self._noise.step(cfg.interval_s) if self._noise is not None else 1.0
        for node in self._nodes:
            eff = node_effects(active, node.name, self._names, cfg.gpus_per_node, t)
            apply_scale_out(eff, self.faults, node.name, self._names, t)
            if node.noise is not None:
                node.noise.apply(eff, cfg.interval_s, fleet_scale, node.engine_source)
            node.step(ts, cfg.interval_s, eff)
            snapshots.extend(node.snapshots(ts, cfg))
        self._t = t + cfg.interval_s
        return ts, snapshots

    def run(self, duration_s: float) -> Iterator[tuple[float, list[Snapshot]]]:
        """Yield ticks until `duration_s` of simulated time has elapsed (from the current time)."""
        if duration_s < 0:
            raise ValueError(f"duration_s must be >= 0, got {duration_s}")
        end = self._t + duration_s
        while self._t < end - 1e-9:
            yield self.step()
