"""The console's capacity page: what the load test measured per model (the capacity file of settings
``streams.capacity_file``, written by ``tailhound capacity``) and its plots.

The thresholds are the ones rules compare with (the ``capacity.*`` signals); the plots (P50/P95/P99 TTFT and
TPOT against load with the knees marked, throughput with the plateau and the safe rate) are the PNGs the
capacity file lists, embedded in the page (``data:`` URIs: nothing is fetched). Only files inside the capacity
file's folder are read, each at most :data:`MAX_PLOT_BYTES`.
"""

from __future__ import annotations

import base64
from pathlib import Path

from tailhound.capacity_file import CapacityFile, load_capacity_file
from tailhound.errors import TailhoundError

from .formatting import format_time, format_value, safe_text
from .pages import layout

#: one plot embedded at most this large (a matplotlib PNG of the capacity plots is ~50-100 KB)
MAX_PLOT_BYTES = 2 * 1024 * 1024
_PNG = b"\x89PNG\r\n\x1a\n"


def read_capacity(path: Path | None) -> tuple[CapacityFile | None, str | None]:
    """(the file, None), or (None, why it cannot be shown)."""
    if path is None:
        return None, (
            "No capacity file: run `tailhound loadtest` and `tailhound capacity RESULT.json --out "
            "capacity.yaml --plots plots/`, then set streams.capacity_file (docs/capacity.md)."
        )
    try:
        return load_capacity_file(path), None
    except (TailhoundError, OSError) as exc:
        return None, f"The capacity file cannot be read: {exc}"


def plot_images(cf: CapacityFile, path: Path) -> dict[str, list[tuple[str, str]]]:
    """model pattern -> [(file name, data URI)] of the PNGs the file lists that are inside its folder."""
    folder = path.resolve().parent
    out: dict[str, list[tuple[str, str]]] = {}
    for pattern, files in cf.plots.items():
        for name in files:
            file = (folder / name).resolve()
            if not file.is_relative_to(folder) or not file.is_file() or file.stat().st_size > MAX_PLOT_BYTES:
                continue
            data = file.read_bytes()
            if data.startswith(_PNG):
                uri = "data:image/png;base64," + base64.b64encode(data).decode()
                out.setdefault(pattern, []).append((file.name, uri))
    return out


def capacity_page(path: Path | None, now: float, *, base: str = "/console") -> str:
    cf, problem = read_capacity(path)
    if cf is None:
        body = f'<h1>Capacity</h1><p class="muted" data-testid="capacity-missing">{safe_text(problem)}</p>'
        return layout("Capacity", body, now=now, live=True, base=base, current="capacity")
    images = plot_images(cf, path) if path is not None else {}
    rows = "".join(
        f'<tr data-testid="capacity-row" data-model="{safe_text(pattern)}"><td><code>{safe_text(pattern)}</code></td>'
        f"<td>{format_value(t.safe_request_rate)} req/s</td><td>{format_value(t.queue_scale_out)}</td>"
        f"<td>{t.max_num_seqs}</td><td>{_seconds(t.ttft_knee_s)}</td><td>{_seconds(t.tpot_knee_s)}</td></tr>"
        for pattern, t in cf.models.items()
    )
    plots = "".join(
        f"<section><h2><code>{safe_text(pattern)}</code></h2>"
        + "".join(
            f'<figure><img data-testid="capacity-plot" src="{uri}" alt="{safe_text(name)}" width="800">'
            f"<figcaption>{safe_text(name)}</figcaption></figure>"
            for name, uri in pngs
        )
        + "</section>"
        for pattern, pngs in images.items()
    )
    body = (
        f"<h1>Capacity</h1><p>From {safe_text(cf.source)}, measured {format_time(cf.generated_at)}: per engine, "
        "what rules compare with (the <code>capacity.*</code> signals; rule "
        '<code>load-above-tested-capacity</code>).</p><table data-testid="capacity-table"><thead><tr>'
        "<th>Model</th><th>Safe request rate</th>"
        "<th>Scale out at (waiting)</th><th>max_num_seqs</th><th>TTFT at the knee</th><th>TPOT at the knee</th>"
        f"</tr></thead><tbody>{rows}</tbody></table>{plots}"
    )
    return layout("Capacity", body, now=now, live=True, base=base, current="capacity")


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"
