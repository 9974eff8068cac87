"""PNG plots of a capacity analysis (matplotlib, the ``loadtest`` extra; imported only when plotting).

Per model, three files in the plots directory, named from the model (:func:`plot_names`, deterministic):

- ``<model>-ttft.png``: TTFT P50/P95/P99 against load, the TTFT knee marked (a vertical line and a label);
- ``<model>-tpot.png``: TPOT P50/P95/P99 (and the mean) against load, the TPOT knee and the point where TPOT
  starts growing faster than throughput marked;
- ``<model>-throughput.png``: completed requests/s against load, the plateau and the safe rate marked
  (in rate mode with the offered load as a dotted diagonal for reference).

Latency axes are logarithmic when the latencies span more than 20x (a queue past the knee). The figures are
drawn with matplotlib's object API on an Agg canvas (:class:`matplotlib.figure.Figure` +
``backend_agg``): no pyplot, no GUI backend, no global state, whatever backend the process has chosen; the
PNGs carry no timestamp or version metadata, so the same analysis gives the same bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailhound.errors import TailhoundError

if TYPE_CHECKING:
    from tailhound.capacity.recommend import CapacityAnalysis

PLOT_KINDS = ("ttft", "tpot", "throughput")
#: a latency axis turns logarithmic when the highest latency is this many times the lowest
LOG_AXIS_SPAN = 20.0
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


class PlotsUnavailable(TailhoundError):
    """matplotlib is not installed."""


def _matplotlib() -> tuple[Any, Any]:
    """(Figure, FigureCanvasAgg), or PlotsUnavailable saying how to install matplotlib."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotsUnavailable(f"plots need matplotlib ({exc}): pip install 'tailhound[loadtest]'") from None
    return Figure, FigureCanvasAgg


def slug(model: str) -> str:
    """A file-name-safe form of a model name (``meta-llama/Llama-3.1-70B`` -> ``meta-llama_Llama-3.1-70B``)."""
    return _SLUG.sub("_", model).strip("._") or "model"


def plot_names(model: str) -> dict[str, str]:
    """Plot kind -> file name for `model`."""
    return {kind: f"{slug(model)}-{kind}.png" for kind in PLOT_KINDS}


def _unit(analysis: CapacityAnalysis) -> str:
    return (
        "offered load (requests/s)"
        if analysis.recommendation.load_unit == "requests_per_s"
        else "concurrency (requests in flight)"
    )


def _latency_axes(ax: Any, points: list, attr: str, title: str, xlabel: str) -> list[float]:
    """Plot P50/P95/P99 (and the mean) of `attr` against load; returns every latency drawn."""
    drawn: list[float] = []
    for stat, style in (("p50", "-o"), ("p95", "-s"), ("p99", "-^"), ("mean", ":")):
        xs, ys = [], []
        for p in points:
            v = getattr(getattr(p, attr), stat)
            if v is not None and v > 0:
                xs.append(p.load)
                ys.append(v)
        if xs:
            ax.plot(xs, ys, style, markersize=3, label=stat.upper() if stat != "mean" else "mean")
            drawn += ys
    if drawn and max(drawn) > LOG_AXIS_SPAN * min(drawn):
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds")
    ax.grid(True, alpha=0.3)
    return drawn


def _legend(ax: Any) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    else:
        ax.text(0.5, 0.5, "nothing measured", transform=ax.transAxes, ha="center", va="center", color="grey")


def _mark(ax: Any, x: float, label: str, color: str, style: str = "--") -> None:
    ax.axvline(x, color=color, linestyle=style, linewidth=1.2, label=label)


def _save(fig: Any, canvas_cls: Any, path: Path) -> None:
    canvas_cls(fig)
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100, metadata={"Software": None})


def write_plots(analysis: CapacityAnalysis, out_dir: str | Path) -> list[Path]:
    """The three PNGs of `analysis` in `out_dir` (created); returns their paths (ttft, tpot, throughput)."""
    Figure, Canvas = _matplotlib()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rec = analysis.recommendation
    names = plot_names(rec.model)
    xlabel = _unit(analysis)
    points = analysis.points
    pct = analysis.percentile.upper()
    paths: list[Path] = []

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    _latency_axes(ax, points, "ttft", f"TTFT: {rec.model}", xlabel)
    if rec.ttft_knee is not None:
        k = rec.ttft_knee
        _mark(
            ax, k.load, f"TTFT {pct} knee: {k.load:.3g} ({k.latency_s:.3g} s, confidence {k.confidence:.2f})", "tab:red"
        )
    _legend(ax)
    paths.append(out / names["ttft"])
    _save(fig, Canvas, paths[-1])

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    _latency_axes(ax, points, "tpot", f"TPOT: {rec.model}", xlabel)
    if rec.tpot_knee is not None:
        k = rec.tpot_knee
        _mark(
            ax, k.load, f"TPOT {pct} knee: {k.load:.3g} ({k.latency_s:.3g} s, confidence {k.confidence:.2f})", "tab:red"
        )
    if rec.tpot_outpaces_throughput_at is not None:
        _mark(
            ax,
            rec.tpot_outpaces_throughput_at,
            f"TPOT outpaces throughput: {rec.tpot_outpaces_throughput_at:.3g} "
            f"(max_num_seqs {rec.recommended_max_num_seqs})",
            "tab:purple",
            ":",
        )
    _legend(ax)
    paths.append(out / names["tpot"])
    _save(fig, Canvas, paths[-1])

    fig = Figure(figsize=(8, 5))
    ax = fig.add_subplot()
    xs = [p.load for p in points]
    ax.plot(xs, [p.throughput_rps for p in points], "-o", markersize=3, label="throughput (completed requests/s)")
    if rec.load_unit == "requests_per_s" and xs:
        ax.plot([0, max(xs)], [0, max(xs)], ":", color="grey", label="offered")
    if analysis.plateau_load is not None:
        _mark(ax, analysis.plateau_load, f"plateau from {analysis.plateau_load:.3g}", "tab:orange")
    if rec.throughput_plateau_rps is not None:
        ax.axhline(
            rec.throughput_plateau_rps,
            color="tab:orange",
            linestyle=":",
            linewidth=1,
            label=f"plateau {rec.throughput_plateau_rps:.3g} requests/s",
        )
    if analysis.safe_load is not None:
        _mark(ax, analysis.safe_load, f"safe rate {rec.safe_request_rate:.3g} requests/s", "tab:green", "-")
    ax.set_title(f"Throughput: {rec.model}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("requests/s")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    _legend(ax)
    paths.append(out / names["throughput"])
    _save(fig, Canvas, paths[-1])
    return paths
