"""Hand-made incidents with chart series for the console's tests: a thermal throttle on GPUs 3 and 5 of
gpu-node-2 (temperature against the 85 C threshold; SM clock against the peer median), its lifecycle
events and notifications."""

from __future__ import annotations

from tailhound.incident import Evidence, EvidenceSeries, IncidentEvent, Scope
from tailhound.notifier.webconsole.view import DeliveryRow, IncidentView, views_from_events

T0 = 1_717_200_000.0  # 2024-06-01 00:00:00 UTC
STEP = 15.0
POINTS = 60
HOT = ("3", "5")
PENDING = T0 + 20 * STEP  # the temperature first reached 85 C
FOR_S = 60.0


def _temperature(gpu: str, i: int) -> float | None:
    if gpu == "5" and i in (40, 41):  # a scrape gap
        return None
    if gpu in HOT:
        late = 2 if gpu == "5" else 0
        return 62.0 + late + min(max(i - 12 - late, 0), 10) * (2.8 - late * 0.2) - (3.0 if i > 50 else 0.0)
    return 60.0 + int(gpu) * 0.7 + (i % 4) * 0.3


def _clock(gpu: str, i: int) -> float:
    return 1100.0 + (i % 3) * 20 if gpu in HOT and 20 <= i <= 50 else 1965.0 - (i % 2) * 15


def thermal_series(**changes: object) -> EvidenceSeries:
    """gpu.temperature of the 8 GPUs of gpu-node-2: GPUs 3 and 5 climb past 85 C; 60 points, 15 s apart."""
    gpus = [*HOT, *(str(g) for g in range(8) if str(g) not in HOT)]
    fields: dict[str, object] = dict(
        rule="gpu-thermal-throttle",
        signal="gpu.temperature",
        unit="C",
        op=">=",
        threshold=85.0,
        for_s=FOR_S,
        per="gpu",
        focus=list(HOT),
        ts=[T0 + i * STEP for i in range(POINTS)],
        values={g: [_temperature(g, i) for i in range(POINTS)] for g in gpus},
        baseline={g: [63.0] * POINTS for g in HOT},
        pending_since=PENDING,
    )
    fields.update(changes)
    return EvidenceSeries.model_validate(fields)


def unchecked_series(**changes: object) -> EvidenceSeries:
    """:func:`thermal_series` without the model's checks (NaN, ragged lists, too many entities): what the
    charts must still draw safely if such a series ever reached them."""
    valid = thermal_series()
    return EvidenceSeries.model_construct(**{**valid.__dict__, **changes})


def clock_series() -> EvidenceSeries:
    """gpu.sm_clock against the peer median (no fixed threshold)."""
    gpus = [*HOT, *(str(g) for g in range(8) if str(g) not in HOT)]
    return EvidenceSeries(
        rule="gpu-thermal-throttle",
        signal="gpu.sm_clock",
        unit="MHz",
        op="<",
        threshold=None,
        for_s=FOR_S,
        per="gpu",
        focus=list(HOT),
        ts=[T0 + i * STEP for i in range(POINTS)],
        values={g: [_clock(g, i) for i in range(POINTS)] for g in gpus},
        baseline={g: [1965.0 * 0.8] * POINTS for g in HOT},
        pending_since=PENDING,
    )


def thermal_events(
    incident: str = "inc-0123456789abcdef",
    node: str = "gpu-node-2",
    summary: str = "GPUs 3, 5 on gpu-node-2 thermal throttling",
    resolved: bool = True,
    series: list[EvidenceSeries] | None = None,
) -> list[IncidentEvent]:
    """opened, updated and (when `resolved`) resolved events of one thermal incident."""
    series = [thermal_series(), clock_series()] if series is None else series
    opened = PENDING + FOR_S + STEP
    base = dict(
        incident_id=incident,
        root_cause="gpu-thermal-throttle",
        severity="critical",
        opened_at=opened,
        scope=Scope(node=node, gpus=list(HOT), model="llama-3-70b"),
        summary=summary,
        evidence=[
            Evidence(
                signal="gpu.temperature",
                value=90.0,
                op=">=",
                threshold=85.0,
                unit="C",
                window_s=75.0,
                labels={"gpu": "3"},
            ),
            Evidence(signal="gpu.sm_clock", value=1100.0, op="<", baseline=1572.0, unit="MHz", labels={"gpu": "3"}),
        ],
        actions=["Check airflow and inlet temperature of gpu-node-2.", "Drain gpu-node-2 until GPUs 3, 5 cool."],
        rule="gpu-thermal-throttle",
        labels={"team": "ml-platform"},
        rule_origin="rules/gpu.yaml:6",
        rules_version="git:abc1234",
    )
    events = [
        IncidentEvent(event="opened", sequence=1, ts=opened, series=series, **base),
        IncidentEvent(event="updated", sequence=2, ts=opened + 120, series=series, **base),
    ]
    if resolved:
        events.append(
            IncidentEvent(
                event="resolved", sequence=3, ts=T0 + 52 * STEP, resolved_at=T0 + 52 * STEP, series=series, **base
            )
        )
    return events


def thermal_view(**kwargs: object) -> IncidentView:
    """The thermal incident as the console shows it, with two notifications (one delivered, one retrying)."""
    view = views_from_events(thermal_events(**kwargs))[0]  # type: ignore[arg-type]
    opened = view.event.opened_at
    view.deliveries = [
        DeliveryRow(
            receiver="pagerduty-oncall",
            sequence=1,
            kind="opened",
            created_at=opened + 1,
            at=opened + 2,
            outcome="delivered",
            attempts=1,
        ),
        DeliveryRow(
            receiver="slack-gpu",
            sequence=3,
            kind="resolved",
            created_at=opened + 600,
            at=None,
            outcome="retrying",
            attempts=3,
            error="HTTP 503 from hooks.slack.com",
        ),
    ]
    return view


def kv_view() -> IncidentView:
    """A second, open incident of another cause and severity, without chart data."""
    ev = IncidentEvent(
        incident_id="inc-fedcba9876543210",
        event="opened",
        sequence=1,
        ts=T0 + 900,
        root_cause="kv-cache-pressure",
        severity="warning",
        opened_at=T0 + 900,
        scope=Scope(node="gpu-node-1", engine="vllm-0", model="llama-3-8b"),
        summary="KV cache 97% on gpu-node-1 engine vllm-0",
        rule="kv-cache-pressure",
        transient=True,
    )
    return views_from_events([ev])[0]
