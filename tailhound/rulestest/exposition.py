"""How a rule test's series are written as an exporter's text: bucket bounds, sample keys, one scrape's exposition.

:class:`Plan` is one rendered series (its lines per step); :func:`render` writes every plan's lines of a step as
one Prometheus text exposition, a TYPE header per family, the way the source's exporter would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tailhound.catalog import SignalSpec


@dataclass
class Plan:
    """One rendered series: where it goes and its exposition lines per step (None: absent that step)."""

    node: str
    source: str
    family: str
    kind: str  # gauge, counter, histogram, untyped
    #: per step: (the sample's `name{labels}` as the text writes it, value) lines, or None
    steps: list[list[tuple[str, float]] | None]


def default_buckets(source: str, metric: str, spec: SignalSpec | None) -> tuple[float, ...]:
    """The bucket bounds the source really uses for `metric` (the simulator's copies of them)."""
    from tailhound.agents.simulator import histogram as h

    if source == "tgi":
        if spec is not None and spec.name.startswith("tokens."):
            return h.tgi_linear_buckets(8192)
        return h.TGI_DURATION_BUCKETS
    if source == "sglang":
        from tailhound.agents.simulator import sglang

        name = spec.name if spec is not None else ""
        return {
            "latency.ttft": sglang.TTFT_BUCKETS,
            "latency.tpot": sglang.ITL_BUCKETS,
            "latency.queue": sglang.QUEUE_BUCKETS,
        }.get(name, sglang.TOKEN_BUCKETS if name.startswith("tokens.") else sglang.E2E_BUCKETS)
    if spec is not None and spec.name.startswith("tokens."):
        return h.build_1_2_5_buckets(131072)
    if spec is not None and spec.name == "latency.ttft":
        return h.TTFT_BUCKETS
    if spec is not None and spec.name in ("latency.itl", "latency.tpot"):
        return h.ITL_BUCKETS
    if spec is not None and spec.name.startswith("latency."):
        return h.REQUEST_LATENCY_BUCKETS
    return (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)  # Prometheus' client default


def fmt_le(b: float) -> str:
    return str(int(b)) if float(b).is_integer() and abs(b) < 1e15 else repr(float(b))


def _fmt_value(v: float) -> str:
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(float(v))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def series_key(name: str, labels: dict[str, str]) -> str:
    """``name{a="1",b="2"}`` as the text exposition writes a sample (``name`` alone without labels)."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def render(plans: Sequence[Plan], step: int) -> str | None:
    """The text exposition of one scrape: every plan's lines of `step`, one TYPE header per family."""
    families: dict[str, tuple[str, list[str]]] = {}
    any_line = False
    for p in plans:
        lines = p.steps[step] if step < len(p.steps) else None
        if lines is None:
            continue
        any_line = True
        fam = families.setdefault(p.family, (p.kind, []))
        fam[1].extend(f"{key} {_fmt_value(value)}" for key, value in lines)
    if not any_line:
        return None
    out = []
    for family, (kind, lines) in families.items():
        out.append(f"# TYPE {family} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"
