"""Incident events and notifications for notifier tests."""

from __future__ import annotations

from typing import Any

from tailhound.incident import Evidence, IncidentEvent, Scope
from tailhound.notifier.model import Notification

T0 = 1_790_000_000.0


def incident_event(
    incident_id: str = "inc-0000000000000001",
    event: str = "opened",
    sequence: int = 1,
    root_cause: str = "gpu-thermal-throttle",
    severity: str = "warning",
    node: str = "gpu-node-3",
    gpus: tuple[str, ...] = ("2",),
    ts: float = T0,
    transient: bool = False,
    **over: Any,
) -> IncidentEvent:
    data: dict[str, Any] = dict(
        incident_id=incident_id,
        event=event,
        sequence=sequence,
        ts=ts,
        root_cause=root_cause,
        severity=severity,
        opened_at=T0,
        resolved_at=ts if event == "resolved" else None,
        scope=Scope(node=node, gpus=list(gpus), engine="vllm-0", model="llama-3-70b"),
        transient=transient,
        summary=f"GPU {','.join(gpus)} on {node} throttles for heat; TPOT P95 2.4x its baseline",
        evidence=[
            Evidence(
                signal="gpu.temperature",
                value=91.0,
                op=">=",
                threshold=85.0,
                unit="C",
                window_s=300,
                labels={"gpu": gpus[0] if gpus else "0"},
            ),
            Evidence(signal="latency.tpot.p95", value=0.084, op=">", baseline=0.035, unit="s", window_s=300),
        ],
        actions=["Check cooling and inlet temperature of the rack", "Drain the node if clocks stay low"],
        rule="gpu-thermal-throttle",
        labels={"team": "ml-platform"},
    )
    data.update(over)
    return IncidentEvent(**data)


def notification(
    kind: str = "opened",
    receiver: str = "test",
    sequence: int = 1,
    incidents: list[IncidentEvent] | None = None,
    **over: Any,
) -> Notification:
    if incidents is None:
        ev = "resolved" if kind == "resolved" else ("updated" if kind == "updated" else "opened")
        incidents = [incident_event(event=ev, sequence=sequence)]
    data: dict[str, Any] = dict(
        group_id=incidents[0].incident_id,
        receiver=receiver,
        sequence=sequence,
        kind=kind,
        ts=T0 + 60,
        incidents=incidents,
        group_labels={"root_cause": incidents[0].root_cause},
        links={"runbook": "https://github.com/tailhound/tailhound/blob/main/docs/root-causes.md"},
    )
    data.update(over)
    return Notification(**data)
