"""Simulator configuration: :class:`SimConfig` and :class:`FaultSpec` (with its CLI text form)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: Fault names the simulator knows, in the order they are documented.
FAULT_NAMES: tuple[str, ...] = (
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
)

#: Faults that act on one tick only (their duration is ignored).
ONE_SHOT_FAULTS: frozenset[str] = frozenset({"short-blip", "engine-restart"})

#: Faults that act on individual GPUs (the others act on a node).
GPU_FAULTS: frozenset[str] = frozenset(
    {"thermal-throttle", "memory-bandwidth-saturation", "nvlink-degraded", "warm-gpu", "gpu-xid-error", "power-cap"}
)

#: Faults that start on the client side or are rolled out fleet-wide: without ``node=`` they act on every
#: node (the others act on the first node).
FLEET_DEFAULT_FAULTS: frozenset[str] = frozenset({"traffic-surge", "retry-storm", "rolling-deploy", "power-cap"})

#: Node value that targets every node of the fleet.
ALL_NODES = "*"

SOURCES: tuple[str, ...] = ("vllm", "dcgm", "node", "blackbox")

#: Inference engines the simulator can export as (the engine snapshot's source is the engine's name).
ENGINE_KINDS: tuple[str, ...] = ("vllm", "tgi", "sglang")
#: dcgm-exporter field sets: "all" (every field the simulator models, profiling and clock-reason fields
#: included: a custom counters file) or "default" (only dcgm-exporter's default-counters.csv, see dcgm_fields.py).
DCGM_PROFILES: tuple[str, ...] = ("all", "default")
#: "basic": the daily curve, slow per-node drift and per-sample jitter; "realistic" adds fleet-wide traffic
#: swings and bursts, request-mix drift, inlet-temperature drift, probe outliers, retransmit blips and
#: missed scrapes (noise.py).
NOISE_PROFILES: tuple[str, ...] = ("basic", "realistic")

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*([smh]?)\s*$")
_UNIT_S = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``"90"``, ``"90s"``, ``"20m"``, ``"1.5h"`` -> seconds; ValueError on anything else."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ValueError(f"bad duration {text!r}: expected a number with an optional s/m/h suffix, e.g. 20m")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _check_fault_name(name: str) -> None:
    if name not in FAULT_NAMES:
        raise ValueError(f"unknown fault {name!r}; known faults: {', '.join(FAULT_NAMES)}")


@dataclass(frozen=True)
class FaultSpec:
    """One fault to inject: what, when (seconds from simulation start), for how long, where.

    ``node=None`` targets the fault's default (the first node; every node for ``traffic-surge``,
    ``retry-storm``, ``rolling-deploy`` and ``power-cap``); ``node="*"`` targets every node. ``gpus=()`` picks
    the fault's default GPUs (thermal: 3 and 5; warm GPU: 6; GPU XID error: 4; memory-bandwidth and NVLink faults:
    every GPU of the node). ``duration_s=None`` lasts until the end. ``short-blip`` and ``engine-restart`` act on
    the first tick at or after ``start_s`` only. ``rolling-deploy`` restarts the engines of its nodes one
    after another, spread evenly over its duration (default: 3 minutes apart).
    """

    name: str
    start_s: float
    duration_s: float | None = None
    node: str | None = None
    gpus: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        _check_fault_name(self.name)
        if not math.isfinite(self.start_s) or self.start_s < 0:
            raise ValueError(f"fault {self.name}: start_s must be a finite number >= 0, got {self.start_s!r}")
        if self.duration_s is not None and (not math.isfinite(self.duration_s) or self.duration_s <= 0):
            raise ValueError(f"fault {self.name}: duration_s must be > 0 or None, got {self.duration_s!r}")
        if self.node is not None and (not self.node or any(ch.isspace() for ch in self.node)):
            raise ValueError(f"fault {self.name}: bad node name {self.node!r}")
        gpus = tuple(self.gpus)
        if any(not isinstance(g, int) or isinstance(g, bool) or g < 0 for g in gpus):
            raise ValueError(f"fault {self.name}: gpus must be non-negative integers, got {self.gpus!r}")
        if len(set(gpus)) != len(gpus):
            raise ValueError(f"fault {self.name}: duplicate GPU index in {self.gpus!r}")
        object.__setattr__(self, "gpus", gpus)

    @property
    def end_s(self) -> float:
        """End of the fault window in seconds from simulation start (``inf`` when open-ended)."""
        return math.inf if self.duration_s is None else self.start_s + self.duration_s

    @property
    def one_shot(self) -> bool:
        """True for faults that act on a single tick (``short-blip``, ``engine-restart``)."""
        return self.name in ONE_SHOT_FAULTS

    def is_active(self, t_s: float, interval_s: float) -> bool:
        """Whether the fault acts on the tick at `t_s` (one-shot faults: the first tick >= start)."""
        if self.one_shot:
            return self.start_s <= t_s < self.start_s + interval_s
        return self.start_s <= t_s < self.end_s

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        """Parse the CLI form ``NAME@START[+DURATION][:node=NODE][:gpus=I,J]``.

        Examples: ``thermal-throttle@20m``, ``thermal-throttle@20m+15m:node=gpu-node-2:gpus=3,5``.
        Durations take an s/m/h suffix (bare numbers are seconds).
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("empty fault spec; expected NAME@START[+DURATION][:node=NODE][:gpus=I,J]")
        head, *options = text.strip().split(":")
        if "@" not in head:
            raise ValueError(
                f"bad fault spec {text!r}: missing '@START' (expected NAME@START[+DURATION][:key=value...])"
            )
        name, when = head.split("@", 1)
        name = name.strip()
        _check_fault_name(name)
        start_text, plus, dur_text = when.partition("+")
        start_s = parse_duration(start_text)
        duration_s = parse_duration(dur_text) if plus else None
        node: str | None = None
        gpus: tuple[int, ...] = ()
        seen: set[str] = set()
        for opt in options:
            key, eq, value = opt.partition("=")
            key, value = key.strip(), value.strip()
            if not eq or not value:
                raise ValueError(f"bad fault option {opt!r} in {text!r}: expected key=value")
            if key in seen:
                raise ValueError(f"fault option {key!r} given twice in {text!r}")
            seen.add(key)
            if key == "node":
                node = value
            elif key == "gpus":
                try:
                    gpus = tuple(int(g) for g in value.split(","))
                except ValueError:
                    raise ValueError(f"bad gpus {value!r} in {text!r}: expected e.g. gpus=3,5") from None
            else:
                raise ValueError(f"unknown fault option {key!r} in {text!r}; known options: node, gpus")
        if duration_s is not None and duration_s <= 0:
            raise ValueError(f"bad fault spec {text!r}: duration must be > 0")
        return cls(name=name, start_s=start_s, duration_s=duration_s, node=node, gpus=gpus)


@dataclass(frozen=True)
class SimConfig:
    """Shape of the simulated fleet and of its telemetry."""

    nodes: int = 4
    gpus_per_node: int = 8
    interval_s: float = 15.0
    start_ts: float = 1_767_225_600.0  # event time of the first tick (unix seconds)
    seed: int = 7
    model: str = "meta-llama/Llama-3.1-70B-Instruct"
    node_prefix: str = "gpu-node-"  # nodes are gpu-node-1 .. gpu-node-N
    sources: tuple[str, ...] = field(default=SOURCES)
    #: Also export per-link NVLink counters (DCGM_FI_DEV_NVLINK_BANDWIDTH_L0..L17, 144 more series a
    #: node; off by default like in dcgm-exporter's default-counters.csv).
    nvlink_per_link: bool = False
    #: The inference engine of every node: "vllm", "tgi" or "sglang" (that engine's metric names, buckets and
    #: labels; the engine snapshots then have its source, and "vllm" in `sources` means the engine).
    engine: str = "vllm"
    #: dcgm-exporter field set: "all" or "default" (DCGM_PROFILES).
    dcgm_fields: str = "all"
    #: Noise profile: "basic" or "realistic" (NOISE_PROFILES).
    noise: str = "basic"
    #: Also export the API server's HTTP status counters (vLLM: http_requests_total by status class, as
    #: prometheus_fastapi_instrumentator groups them). TGI always exports its tgi_request_failure counter.
    http_metrics: bool = False
    #: A request trace (CSV: arrived_at, num_prefill_tokens, num_decode_tokens; trace.py) whose arrivals and
    #: token mix replace the daily curve and the built-in mix (and the realistic profile's fleet-wide swings).
    load_trace: str | None = None
    #: The share of the fleet's capacity the trace's busiest minute reaches (its rate is scaled to that).
    load_trace_peak: float = 0.8
    #: Where in the trace the run starts (s; the trace loops, so any offset works).
    load_trace_start_s: float = 0.0

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise ValueError(f"nodes must be >= 1, got {self.nodes}")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, got {self.gpus_per_node}")
        if not math.isfinite(self.interval_s) or self.interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {self.interval_s}")
        if not math.isfinite(self.start_ts) or self.start_ts <= 0:
            raise ValueError(f"start_ts must be > 0, got {self.start_ts}")
        for name, value, known in (
            ("engine", self.engine, ENGINE_KINDS),
            ("dcgm_fields", self.dcgm_fields, DCGM_PROFILES),
            ("noise", self.noise, NOISE_PROFILES),
        ):
            if value not in known:
                raise ValueError(f"unknown {name} {value!r}; known: {', '.join(known)}")
        if not math.isfinite(self.load_trace_peak) or not 0.0 < self.load_trace_peak <= 4.0:
            raise ValueError(f"load_trace_peak must be in (0, 4], got {self.load_trace_peak}")
        if not math.isfinite(self.load_trace_start_s) or self.load_trace_start_s < 0:
            raise ValueError(f"load_trace_start_s must be >= 0, got {self.load_trace_start_s}")
        if self.load_trace is not None and not str(self.load_trace).strip():
            raise ValueError("load_trace: empty path")
        sources = tuple(self.sources)
        known_sources = (self.engine, *SOURCES[1:])
        if self.engine != "vllm":  # "vllm" in the default sources names the engine, whichever it is
            sources = tuple(self.engine if s == "vllm" else s for s in sources)
        unknown = [s for s in sources if s not in known_sources]
        if unknown:
            raise ValueError(f"unknown source(s) {unknown}; known sources: {', '.join(known_sources)}")
        object.__setattr__(self, "sources", sources)

    def node_names(self) -> list[str]:
        """``gpu-node-1`` .. ``gpu-node-N``."""
        return [f"{self.node_prefix}{i}" for i in range(1, self.nodes + 1)]
