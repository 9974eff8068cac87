"""Scale-out: a node an autoscaler adds to the fleet, and its cold start.

A ``scale-out`` fault names the node that is added at its start. Before that the node does not exist (no
snapshots, no traffic: the fleet's traffic is the other nodes'). From the start it is up but loading the
model for COLD_START_S: every exporter is scraped, the engine reports nothing running or waiting and
finishes nothing, the blackbox probe of its /health fails (readiness: not in the load balancer yet).
Then it is ready and takes its share: every node of the fleet gets (N - added) / N of its own traffic
(the same total, spread over one more node).
"""

from __future__ import annotations

from collections.abc import Sequence

from .config import FaultSpec
from .faults import NodeEffects, fault_nodes

#: Pod scheduled to model served: image pull, weights from storage into 8 GPUs, CUDA graph capture.
COLD_START_S = 240.0


def scale_out_phase(fault: FaultSpec, t_s: float) -> str:
    """Where an added node is at `t_s`: "absent" (not yet provisioned), "cold" (loading) or "ready"."""
    if t_s < fault.start_s:
        return "absent"
    return "cold" if t_s < fault.start_s + COLD_START_S else "ready"


def apply_scale_out(
    eff: NodeEffects, faults: Sequence[FaultSpec], node: str, node_names: Sequence[str], t_s: float
) -> None:
    """Fold every scale-out fault (started or not: an added node is absent before its start) into `eff`."""
    for f in faults:
        if f.name != "scale-out":
            continue
        added = fault_nodes(f, node_names)
        phase = scale_out_phase(f, t_s)
        if node in added:
            eff.not_provisioned = eff.not_provisioned or phase == "absent"
            eff.cold_start = eff.cold_start or phase == "cold"
            if phase != "ready":
                eff.arrival_scale = 0.0  # not in the load balancer
                continue
        if phase == "ready" and len(added) < len(node_names):
            eff.arrival_scale *= (len(node_names) - len(added)) / len(node_names)
