"""The causal order of root causes and their domains: which cause explains which, and where each lives.

Correlation takes the firing cause ranked first as an incident's root; the domain (``gpu``: inside the
engine, ``path``: between the user and the engine) decides which causes share one incident.
"""

from __future__ import annotations

from tailhound.vocabulary import RootCause

#: Most fundamental first: a cause explains the ones after it.
CAUSAL_RANK: tuple[RootCause, ...] = (
    RootCause.GPU_HARDWARE_ERROR,  # a failed GPU explains every slowdown and queue on its node
    RootCause.GPU_THERMAL_THROTTLE,
    RootCause.NVLINK_DEGRADED,
    RootCause.PCIE_BOTTLENECK,
    RootCause.GPU_MEMORY_BANDWIDTH,
    RootCause.KV_CACHE_PRESSURE,
    RootCause.HEAD_OF_LINE_BLOCKING,
    # traffic shape: longer outputs at the same arrivals explain a slower, queueing engine
    RootCause.GENERATION_LENGTH_GROWTH,
    RootCause.RETRY_STORM,
    # traffic balance: an engine with more than its share queues while its peers idle (not capacity)
    RootCause.LOAD_IMBALANCE,
    RootCause.NODE_DEGRADED,
    RootCause.CAPACITY,
    RootCause.INGRESS_SATURATION,
    RootCause.NETWORK_PATH,
    RootCause.HEALTH_CHECK_FLAPPING,
    RootCause.STREAM_BUFFERING,
)
PATH_CAUSES = frozenset(
    {RootCause.INGRESS_SATURATION, RootCause.NETWORK_PATH, RootCause.HEALTH_CHECK_FLAPPING, RootCause.STREAM_BUFFERING}
)
#: causes that name what is left when nothing specific explains a slowdown: they open an incident alone,
#: but never keep another cause's incident open (their latency windows lag the fault by minutes), and
#: once that incident resolves they stay explained until they stop firing
RESIDUAL_CAUSES = frozenset({RootCause.NODE_DEGRADED})


def domain_of(cause: RootCause | str) -> str:
    """``path`` for the causes between the user and the engine, else ``gpu``."""
    return "path" if RootCause(cause) in PATH_CAUSES else "gpu"


def rank_of(cause: RootCause | str) -> int:
    """Position in :data:`CAUSAL_RANK`: lower explains higher."""
    return CAUSAL_RANK.index(RootCause(cause))
