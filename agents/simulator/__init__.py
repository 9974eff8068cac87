"""Deterministic fleet simulator: vLLM, DCGM, node_exporter and blackbox snapshots with faults.

>>> sim = FleetSimulator(SimConfig(nodes=2), [FaultSpec.parse("thermal-throttle@20m+15m")])
>>> for ts, snapshots in sim.run(3600): ...
"""

from .config import FAULT_NAMES, FaultSpec, SimConfig, parse_duration
from .fleet import FleetSimulator

__all__ = ["FAULT_NAMES", "FaultSpec", "FleetSimulator", "SimConfig", "parse_duration"]
