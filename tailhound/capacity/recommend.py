"""A load test (or binned production telemetry) -> a :class:`CapacityRecommendation` -> the capacity file.

The playbook: take the more conservative of the TTFT and TPOT knees as the scale-out point, and set
``max_num_seqs`` where TPOT starts growing faster than throughput. Per load point (a load-test step, or a
load bin of telemetry, :class:`LoadPoint`) :func:`analyse` finds, with :mod:`tailhound.capacity.knees`:

- the **TTFT knee** and the **TPOT knee**, on the P95 of each by default (``percentile="p99"``: on P99);
- the **throughput plateau**: ``throughput_plateau_rps`` is its level, the median throughput from where it
  starts on (requests/s in both modes; :attr:`CapacityAnalysis.plateau_load` is where it starts, in load
  units, and the plots mark both);
- where **TPOT outpaces throughput** (TPOT's mean, else its P50: the typical decode step, not its tail), in
  load units (``tpot_outpaces_throughput_at``), at the throughput plateau at the latest;
- the **safe request rate** per engine: the lower knee; in rate mode the knee's offered load (below the knee
  throughput = offered; never more than the throughput measured there), in concurrency mode the throughput
  measured at the knee's concurrency (interpolated). Without any knee: the throughput measured where the
  plateau starts; without a plateau either, the highest throughput measured (the load never reached
  saturation: a lower bound, and a note says to ramp further);
- **recommended max_num_seqs**: the concurrency at the TPOT-outpaces-throughput point, from the first of: the
  engine's running batch (``engine["batch"]``), the client's measured in-flight requests, the offered
  concurrency (concurrency mode), Little's law (throughput x (TTFT + TPOT x (output tokens - 1)), means or
  P50s). Without that point: the same at the safe load (what that load needs: a lower bound). Rounded, at
  least 1;
- **queue_scale_out**: the engine's queue (``engine["queue"]``, requests waiting) at the safe load (the
  highest load point at or below it: the point above the knee is already queueing); else the client's
  in-flight requests minus the engine's batch there; else 2, the playbook's level ("more than 2 requests
  waiting per replica for 30 s"), when neither is measured. Floored at :data:`MIN_QUEUE_SCALE_OUT` (1
  request): below the knee the queue is ~0, and a KEDA ``AverageValue`` threshold under one request would
  scale out on every request that waits;
- ``keda``: ``{"queue": queue_scale_out, "batch": 0.8 x max_num_seqs}``, the two trigger thresholds of
  deploy/keda/vllm-scaledobject.yaml (:func:`keda_snippet`).

Every fallback taken is said in :attr:`CapacityAnalysis.notes`. :func:`build_capacity_file` and
:func:`write_capacity_file` turn recommendations into the YAML rules read (``streams.capacity_file``), and
the file written is loaded back through :func:`tailhound.capacity_file.load_capacity_file` before returning.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from tailhound.capacity.knees import find_knee, throughput_plateau, tpot_outpaces_throughput, value_at
from tailhound.capacity.model import (
    CapacityFile,
    CapacityRecommendation,
    CapacityThresholds,
    Knee,
    LoadTestResult,
    Percentiles,
)
from tailhound.capacity_file import load_capacity_file

PercentileName = Literal["p95", "p99"]
PERCENTILES: tuple[str, ...] = ("p95", "p99")
#: the queue level the playbook names (requests waiting per replica) when nothing measured one
PLAYBOOK_QUEUE = 2.0
#: the lowest queue_scale_out written (requests): a KEDA AverageValue below one request scales on every one
MIN_QUEUE_SCALE_OUT = 1.0
#: KEDA's batch trigger: this share of max_num_seqs running per replica
BATCH_SHARE = 0.8


@dataclass(frozen=True)
class LoadPoint:
    """One load level: a load-test step or a load bin of telemetry. ``load`` in the analysis' load unit
    (requests/s offered, or requests in flight); ``queue``/``batch``: the engine's waiting/running requests
    (means), ``in_flight``: the client's requests in flight (mean); None where not measured."""

    load: float
    throughput_rps: float
    ttft: Percentiles
    tpot: Percentiles
    queue: float | None = None
    batch: float | None = None
    in_flight: float | None = None
    requests: int = 0
    errors: int = 0


@dataclass
class CapacityAnalysis:
    """A recommendation with what it was made from: the points (for plots and tables), the load where the
    plateau starts (load units), the safe load (load units), and the fallbacks taken."""

    recommendation: CapacityRecommendation
    points: list[LoadPoint]
    percentile: str
    plateau_load: float | None = None
    safe_load: float | None = None
    notes: list[str] = field(default_factory=list)


def points_from_result(result: LoadTestResult) -> list[LoadPoint]:
    """A load test's steps as load points (steps that completed no request are left out)."""
    out = []
    for s in result.steps:
        if s.requests <= 0:
            continue
        out.append(
            LoadPoint(
                load=s.offered,
                throughput_rps=s.throughput_rps,
                ttft=s.ttft,
                tpot=s.tpot,
                queue=s.engine.get("queue"),
                batch=s.engine.get("batch"),
                in_flight=s.concurrency_mean,
                requests=s.requests,
                errors=s.errors,
            )
        )
    return sorted(out, key=lambda p: p.load)


def _series(points: Sequence[LoadPoint], get) -> tuple[list[float], list[float]]:
    """(loads, values) of the points where `get` gives a finite value."""
    xs, ys = [], []
    for p in points:
        v = get(p)
        if v is not None and math.isfinite(v):
            xs.append(p.load)
            ys.append(float(v))
    return xs, ys


def _at(points: Sequence[LoadPoint], load: float, get) -> float | None:
    xs, ys = _series(points, get)
    return value_at(load, xs, ys) if xs else None


def _at_or_below(points: Sequence[LoadPoint], load: float, get) -> float | None:
    """`get` at the highest load point at or below `load` (a point above the knee is already queueing, and
    interpolating towards it would mix overload into the level); the lowest point when none is below."""
    xs, ys = _series(points, get)
    if not xs:
        return None
    below = [y for x, y in zip(xs, ys, strict=True) if x <= load + 1e-9]
    return below[-1] if below else ys[0]


def _central(p: Percentiles) -> float | None:
    return p.mean if p.mean is not None else p.p50


def _concurrency_at(
    points: Sequence[LoadPoint], load: float, mode: str, output_mean: float | None
) -> tuple[float | None, str]:
    """The requests in flight at `load` and where the number came from."""
    for get, what in (
        (lambda p: p.batch, "the engine's running batch"),
        (lambda p: p.in_flight, "the client's requests in flight"),
    ):
        v = _at(points, load, get)
        if v is not None:
            return v, what
    if mode == "concurrency":
        return load, "the offered concurrency"
    if output_mean is not None:

        def little(p: LoadPoint) -> float | None:
            ttft, tpot = _central(p.ttft), _central(p.tpot)
            if ttft is None or tpot is None:
                return None
            return p.throughput_rps * (ttft + tpot * max(0.0, output_mean - 1.0))

        v = _at(points, load, little)
        if v is not None:
            return v, "Little's law (throughput x (TTFT + TPOT x (output tokens - 1)))"
    return None, "nothing"


def analyse(
    points: Sequence[LoadPoint],
    *,
    model: str,
    source: str,
    mode: Literal["rate", "concurrency"] = "rate",
    percentile: str = "p95",
    output_mean: float | None = None,
) -> CapacityAnalysis:
    """The recommendation from load points (see the module docstring). ValueError when no point has a
    throughput above zero."""
    if percentile not in PERCENTILES:
        raise ValueError(f"percentile must be one of {', '.join(PERCENTILES)}, got {percentile!r}")
    pts = sorted((p for p in points if p.throughput_rps is not None and math.isfinite(p.load)), key=lambda p: p.load)
    if not pts or max(p.throughput_rps for p in pts) <= 0:
        raise ValueError("no load point completed any request: nothing to analyse")
    notes: list[str] = []
    rate_mode = mode == "rate"
    unit = "requests/s" if rate_mode else "requests in flight"

    ttft_knee = find_knee(*_series(pts, lambda p: getattr(p.ttft, percentile)))
    loads, thr = _series(pts, lambda p: p.throughput_rps)
    plateau_load = throughput_plateau(loads, thr)
    # TPOT is judged up to the plateau: beyond it the load offered is not served, the batch is full and TPOT
    # stays at its full-batch level, which would read as a rise that levels off (no knee)
    served = [p for p in pts if plateau_load is None or p.load <= plateau_load]
    tpot_knee = find_knee(*_series(served if len(served) >= 4 else pts, lambda p: getattr(p.tpot, percentile)))
    plateau_rps = (
        statistics.median(t for x, t in zip(loads, thr, strict=True) if x >= plateau_load)
        if plateau_load is not None
        else None
    )
    tpot_x, tpot_c = _series(pts, lambda p: _central(p.tpot))
    outpaces = tpot_outpaces_throughput(tpot_x, tpot_c, [value_at(x, loads, thr) for x in tpot_x], plateau_load)

    def to_rps(load: float) -> float:
        served = value_at(load, loads, thr)
        return min(load, served) if rate_mode else served

    knees: list[tuple[str, Knee]] = [(n, k) for n, k in (("TTFT", ttft_knee), ("TPOT", tpot_knee)) if k is not None]
    for name, k in (("TTFT", ttft_knee), ("TPOT", tpot_knee)):
        if k is None:
            notes.append(f"no {name} {percentile} knee within the tested load")
    if knees:
        name, knee = min(knees, key=lambda nk: to_rps(nk[1].load))
        safe_load, safe_rps = knee.load, to_rps(knee.load)
        notes.append(f"safe rate from the {name} knee" + (" (the lower of the two)" if len(knees) == 2 else ""))
    elif plateau_load is not None:
        safe_load, safe_rps = plateau_load, value_at(plateau_load, loads, thr)
        notes.append("no knee: the safe rate is the throughput where it plateaus")
    else:
        best = max(pts, key=lambda p: p.throughput_rps)
        safe_load, safe_rps = best.load, best.throughput_rps
        notes.append(
            "no knee and no throughput plateau: the load never reached saturation; the safe rate is the "
            "highest throughput measured, a lower bound (ramp further)"
        )
    if safe_rps <= 0:  # a knee at zero load: take the first point that completed anything
        first = next(p for p in pts if p.throughput_rps > 0)
        safe_load, safe_rps = first.load, first.throughput_rps
        notes.append("the knee lies at zero throughput: the safe rate is the lowest throughput measured")

    if outpaces is not None:
        conc, how = _concurrency_at(pts, outpaces, mode, output_mean)
        where = f"where TPOT outpaces throughput ({outpaces:.3g} {unit})"
    else:
        conc, how = _concurrency_at(pts, safe_load, mode, output_mean)
        where = "at the safe load (TPOT never outpaced throughput: what that load needs, a lower bound)"
    if conc is None:
        raise ValueError("cannot tell the concurrency: no batch, in-flight or token counts were measured")
    max_num_seqs = max(1, round(conc))
    notes.append(f"max_num_seqs {max_num_seqs}: {how} {where}")

    queue = _at_or_below(pts, safe_load, lambda p: p.queue)
    if queue is not None:
        how_q = "the engine's queue at the safe load"
    else:
        queue = _at_or_below(
            pts,
            safe_load,
            lambda p: None if p.in_flight is None or p.batch is None else max(0.0, p.in_flight - p.batch),
        )
        how_q = "the client's in-flight requests minus the engine's batch at the safe load"
    if queue is None:
        queue, how_q = PLAYBOOK_QUEUE, "nothing measured the queue: the playbook's 2 requests"
    if queue < MIN_QUEUE_SCALE_OUT:
        how_q += f" ({queue:.2f}, floored at {MIN_QUEUE_SCALE_OUT:g})"
        queue = MIN_QUEUE_SCALE_OUT
    queue = round(queue, 1)
    notes.append(f"queue_scale_out {queue:g}: {how_q}")

    rec = CapacityRecommendation(
        model=model,
        source=source,
        load_unit="requests_per_s" if rate_mode else "concurrency",
        ttft_knee=ttft_knee,
        tpot_knee=tpot_knee,
        throughput_plateau_rps=round(plateau_rps, 4) if plateau_rps is not None else None,
        tpot_outpaces_throughput_at=round(outpaces, 4) if outpaces is not None else None,
        safe_request_rate=round(safe_rps, 4),
        recommended_max_num_seqs=max_num_seqs,
        queue_scale_out=queue,
        keda={"queue": queue, "batch": round(BATCH_SHARE * max_num_seqs, 1)},
    )
    return CapacityAnalysis(
        recommendation=rec,
        points=list(pts),
        percentile=percentile,
        plateau_load=plateau_load,
        safe_load=safe_load,
        notes=notes,
    )


def recommend(result: LoadTestResult, *, source: str, percentile: str = "p95") -> CapacityAnalysis:
    """The recommendation from a load test (`source`: ``loadtest:<file>``)."""
    analysis = analyse(
        points_from_result(result),
        model=result.model,
        source=source,
        mode=result.mode,
        percentile=percentile,
        output_mean=result.token_mix.output_mean,
    )
    if result.stopped:
        analysis.notes.insert(0, f"the load test stopped early: {result.stopped}")
    return analysis


def literal_pattern(name: str) -> str:
    """An fnmatch pattern matching exactly `name` (``*``, ``?`` and ``[`` bracketed)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def build_capacity_file(
    recommendations: Sequence[CapacityRecommendation],
    *,
    model_pattern: str | None = None,
    generated_at: float | None = None,
) -> CapacityFile:
    """The capacity file of `recommendations`, one model pattern each: the model name (matched literally), or
    `model_pattern` (only with one recommendation). ValueError on two recommendations for one pattern."""
    if not recommendations:
        raise ValueError("no recommendation to write")
    if model_pattern is not None and len(recommendations) != 1:
        raise ValueError(
            f"--model-pattern names one model, but there are {len(recommendations)} "
            f"({', '.join(r.model for r in recommendations)})"
        )
    models: dict[str, CapacityThresholds] = {}
    for rec in recommendations:
        pattern = model_pattern if model_pattern is not None else literal_pattern(rec.model)
        if pattern in models:
            raise ValueError(f"two recommendations for model pattern {pattern!r}")
        models[pattern] = CapacityThresholds(
            safe_request_rate=rec.safe_request_rate,
            queue_scale_out=rec.queue_scale_out,
            max_num_seqs=rec.recommended_max_num_seqs,
            ttft_knee_s=rec.ttft_knee.latency_s if rec.ttft_knee else None,
            tpot_knee_s=rec.tpot_knee.latency_s if rec.tpot_knee else None,
        )
    sources = list(dict.fromkeys(r.source for r in recommendations))
    return CapacityFile(
        generated_at=round(time.time() if generated_at is None else generated_at, 3),
        source=", ".join(sources),
        models=models,
    )


HEADER = """\
# Capacity file: written by `tailhound capacity` from {source}.
# Per model pattern (fnmatch, first match wins) the thresholds one engine measured under load:
#   safe_request_rate  requests/s one engine serves before TTFT or TPOT bends (the lower knee)
#   queue_scale_out    requests waiting per engine at that rate: the level that should scale out
#   max_num_seqs       the batch size where TPOT starts growing faster than throughput
#   ttft_knee_s, tpot_knee_s  the latencies at the knees (seconds)
# Rules read them as the capacity.* signals (capacity.safe_request_rate, ...) when settings
# streams.capacity_file names this file (tailhound replay/rules test: --capacity FILE), e.g.
#   {{signal: engine.arrival_rate, above: {{signal: capacity.safe_request_rate}}}}
# The KEDA trigger values (deploy/keda/vllm-scaledobject.yaml): queue threshold = queue_scale_out,
# batch threshold = 0.8 x max_num_seqs.
"""


def render_capacity_file(cf: CapacityFile) -> str:
    """The YAML text (comment header, then the file's fields)."""
    body = yaml.safe_dump(cf.model_dump(mode="json"), sort_keys=False, default_flow_style=False, allow_unicode=True)
    return HEADER.format(source=cf.source) + body


def write_capacity_file(cf: CapacityFile, path: str | Path) -> CapacityFile:
    """Write `cf` as YAML to `path` and load it back (the loader's own validation); returns what was loaded."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_capacity_file(cf), encoding="utf-8")
    loaded = load_capacity_file(out)
    if loaded != cf:
        raise ValueError(f"{out}: the capacity file read back differs from the one written")
    return loaded


def keda_snippet(rec: CapacityRecommendation) -> str:
    """The two ``triggers:`` thresholds of deploy/keda/vllm-scaledobject.yaml, ready to paste."""
    q, b = rec.keda.get("queue", rec.queue_scale_out), rec.keda.get("batch", BATCH_SHARE * rec.recommended_max_num_seqs)
    return (
        f"  # {rec.model}: from {rec.source} (max_num_seqs {rec.recommended_max_num_seqs})\n"
        "  triggers:\n"
        "    - type: prometheus\n"
        "      name: queue\n"
        "      metricType: AverageValue\n"
        "      metadata:\n"
        f'        threshold: "{q:g}"\n'
        "    - type: prometheus\n"
        "      name: batch\n"
        "      metricType: AverageValue\n"
        "      metadata:\n"
        f'        threshold: "{b:g}"\n'
    )
