"""The root-cause vocabulary: a public contract.

Slack messages, PagerDuty payloads and incident-topic consumers key on these tags, so a tag is never
renamed or removed within one schema version. Each tag says what it means, what evidence backs it and
whether it is usually transient (network-side, recovers within minutes) or persistent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar


class RootCause(StrEnum):
    NETWORK_PATH = "network-path"
    INGRESS_SATURATION = "ingress-saturation"
    HEALTH_CHECK_FLAPPING = "health-check-flapping"
    STREAM_BUFFERING = "stream-buffering"
    CAPACITY = "capacity"
    KV_CACHE_PRESSURE = "kv-cache-pressure"
    GPU_MEMORY_BANDWIDTH = "gpu-memory-bandwidth"
    GPU_THERMAL_THROTTLE = "gpu-thermal-throttle"
    NVLINK_DEGRADED = "nvlink-degraded"
    PCIE_BOTTLENECK = "pcie-bottleneck"
    RETRY_STORM = "retry-storm"
    HEAD_OF_LINE_BLOCKING = "head-of-line-blocking"
    NODE_DEGRADED = "node-degraded"
    GPU_HARDWARE_ERROR = "gpu-hardware-error"
    # traffic shape and balance
    LOAD_IMBALANCE = "load-imbalance"
    GENERATION_LENGTH_GROWTH = "generation-length-growth"


class Severity(StrEnum):
    """How urgent an incident is, in order: info < warning < critical."""

    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"

    @classmethod
    def rank(cls, value: str) -> int:
        """0 info, 1 warning, 2 critical; a value outside the vocabulary ranks lowest."""
        return _SEVERITY_RANK.get(value, 0)


_SEVERITY_RANK: dict[str, int] = {Severity.INFO: 0, Severity.WARNING: 1, Severity.CRITICAL: 2}
_S = TypeVar("_S", bound=str)


def highest_severity(values: Iterable[_S], default: _S | None = None) -> _S:
    """The most severe of `values` (the first of equals); `default` when there are none."""
    if default is None:
        return max(values, key=Severity.rank)
    return max(values, key=Severity.rank, default=default)


@dataclass(frozen=True)
class RootCauseInfo:
    tag: RootCause
    title: str
    meaning: str
    usually_transient: bool


ROOT_CAUSES: dict[RootCause, RootCauseInfo] = {
    info.tag: info
    for info in (
        RootCauseInfo(
            RootCause.NETWORK_PATH,
            "Network path",
            "Per-hop or connect latency jumped (2 ms -> 20 ms class) or loss >= 0.5% while engine-side "
            "latency is normal: routing, a congested hop or a cross-region detour.",
            True,
        ),
        RootCauseInfo(
            RootCause.INGRESS_SATURATION,
            "Ingress saturation",
            "Listen-queue overflows, TIME-WAIT pile-up or nginx connections near worker_connections: "
            "requests time out in the TCP handshake before they reach the engine.",
            True,
        ),
        RootCauseInfo(
            RootCause.HEALTH_CHECK_FLAPPING,
            "Health-check flapping",
            "The load balancer's health-check timeout is below 1.5 x the /health P95, so instances are "
            "removed and re-added under load.",
            True,
        ),
        RootCauseInfo(
            RootCause.STREAM_BUFFERING,
            "Stream buffering",
            "A CDN or proxy buffers server-sent events: tokens arrive in one or two bursts at the end.",
            False,
        ),
        RootCauseInfo(
            RootCause.CAPACITY,
            "Capacity",
            "Waiting requests keep growing and queue time rises with bandwidth: the fleet needs more "
            "replicas, not a restart.",
            False,
        ),
        RootCauseInfo(
            RootCause.KV_CACHE_PRESSURE,
            "KV-cache pressure",
            "KV cache usage >= 95% with preemptions: requests are deferred or recomputed.",
            False,
        ),
        RootCauseInfo(
            RootCause.GPU_MEMORY_BANDWIDTH,
            "GPU memory bandwidth",
            "Latency over baseline while DRAM bandwidth is at its practical ceiling (above 75% of peak; "
            "memory-bound decode reads ~80% on an H200): the batch is bandwidth-bound.",
            False,
        ),
        RootCauseInfo(
            RootCause.GPU_THERMAL_THROTTLE,
            "GPU thermal throttle",
            "GPU at or above its slowdown temperature (85 C class) with the SM clock well below its max: "
            "TPOT degrades step-wise on the hot GPUs and drags the whole tensor-parallel group.",
            False,
        ),
        RootCauseInfo(
            RootCause.NVLINK_DEGRADED,
            "NVLink degraded",
            "An NVLink link is down or its throughput is far below baseline while TPOT rises.",
            False,
        ),
        RootCauseInfo(
            RootCause.PCIE_BOTTLENECK,
            "PCIe bottleneck",
            "PCIe throughput saturated or the link trained at a lower generation/width.",
            False,
        ),
        RootCauseInfo(
            RootCause.RETRY_STORM,
            "Retry storm",
            "429/overload failures with request amplification and P99 > 12 s: clients retry without "
            "backoff and fill the queue.",
            False,
        ),
        RootCauseInfo(
            RootCause.HEAD_OF_LINE_BLOCKING,
            "Head-of-line blocking",
            "Every request on the engine waits behind a few long ones in a FIFO: long generations hold the "
            "batch's slots, or long prompts (prompt tokens per request jump) are prefilled in one piece, so queue "
            "time and TTFT rise for all requests and, with chunked prefill off, inter-token latency spikes too "
            "(decode steps wait for the prefills).",
            False,
        ),
        RootCauseInfo(
            RootCause.NODE_DEGRADED,
            "Node degraded",
            "An engine got slower while its load did not rise (latency well above its usual level, "
            "requests queueing, request and token rates no higher than usual) and no hardware, KV-cache, "
            "batch or path cause explains it: a node-local fault to investigate (co-tenant process, driver "
            "or ECC trouble, configuration drift), not a capacity problem that more replicas would fix.",
            False,
        ),
        # hardware errors
        RootCauseInfo(
            RootCause.GPU_HARDWARE_ERROR,
            "GPU hardware error",
            "A GPU reported a hardware-class XID (79 fallen off the bus, 48 double-bit ECC, 63/64/94/95 ECC "
            "and row remapping, 92 high single-bit ECC rate), gained uncorrectable remapped rows or an "
            "uncorrected ECC error, failed a row remap, or vanished from the exporter while the node's other "
            "GPUs still report; its engine usually dies with it. Not a planned restart or rolling deploy "
            "(those leave the GPU counters alone). Drain the node, then reset or replace the GPU.",
            False,
        ),
        # --- engine-side causes: traffic shape and balance
        RootCauseInfo(
            RootCause.LOAD_IMBALANCE,
            "Load imbalance",
            "One or more engines of a model carry far more than their share of its traffic (requests in "
            "flight, queue, TTFT) while the other engines of the same model sit well below theirs and do not "
            "queue: the load balancer round-robins over uneven requests or sticks sessions instead of "
            "balancing by least connections. The model has headroom; the balancer does not use it.",
            False,
        ),
        RootCauseInfo(
            RootCause.GENERATION_LENGTH_GROWTH,
            "Generation length growth",
            "Generated tokens per request rose (a new model build or quantization, a prompt template or a "
            "max_tokens change) while requests arrive as before and each token takes about as long: end-to-end "
            "latency and the queue grow with the output length, not with the step time.",
            False,
        ),
    )
}
