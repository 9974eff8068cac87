"""Hand-made snapshots for tests that must not depend on the simulator."""

from __future__ import annotations

from tailhound.snapshot import GaugeSample, Snapshot

MAX_SM = 1980.0


def dcgm_snapshot(
    ts: float,
    node: str = "gpu-node-1",
    hot: dict[int, tuple[float, float]] | None = None,
    gpus: int = 8,
    reasons: dict[int, int] | None = None,
) -> Snapshot:
    """A dcgm-exporter snapshot; `hot` maps GPU index -> (temperature C, SM clock MHz)."""
    hot = hot or {}
    reasons = reasons or {}
    samples = []
    for g in range(gpus):
        temp, clock = hot.get(g, (62.0, 1965.0))
        labels = {"gpu": str(g), "UUID": f"GPU-{node}-{g}", "modelName": "NVIDIA H100 80GB HBM3"}
        samples += [
            GaugeSample(name="DCGM_FI_DEV_GPU_TEMP", labels=labels, value=temp),
            GaugeSample(name="DCGM_FI_DEV_SM_CLOCK", labels=labels, value=clock),
            GaugeSample(name="DCGM_FI_DEV_MAX_SM_CLOCK", labels=labels, value=MAX_SM),
            GaugeSample(
                name="DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
                labels=labels,
                value=float(reasons.get(g, 0x60 if g in hot else 0)),
            ),
        ]
    return Snapshot(ts=ts, node=node, source="dcgm", interval_s=15, labels={}, samples=samples)
