"""``docs/signals.md``: the signal catalog as Markdown, generated from signals.yaml (``tailhound catalog``).

One table per group of signals (GPU, inference engine, node network, network probes, streaming probe;
anything new that fits none of them lands in "Other"), with one column per source used in that group.
``tailhound catalog --check`` (and tests/tailhound/test_catalog_docs.py) fail when the committed file
differs from what the catalog renders, the same way ``tailhound schema --check`` guards docs/schemas/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tailhound.catalog import Catalog, SignalSpec, SourceMetric, default_catalog
from tailhound.recording import JOBS

#: What each source (recording job = snapshot ``source``) is; unknown sources are listed without one.
SOURCE_INFO: dict[str, str] = {
    "vllm": "vLLM's `/metrics` (scrape job `vllm`); V1 and V0 metric names.",
    "tgi": "Text Generation Inference's `/metrics` (scrape job `tgi`).",
    "nim": "NVIDIA NIM for LLMs' metrics endpoint (scrape job `nim`).",
    "dcgm": "dcgm-exporter (scrape job `dcgm`); both naming generations.",
    "node": "node_exporter (scrape job `node`), or the agent's `procnet` collector, which renders the same names.",
    "blackbox": "blackbox_exporter `/probe` (scrape job `blackbox`); `node` is the probed target's host.",
    "nvml": "The agent's native NVML collector (`nvml:`); no DCGM needed.",
    "netprobe": "The agent's `tcp_connect`, `hops` and `nginx` collectors; `node` is the target's host.",
    "streamprobe": "The agent's `stream_probe` collector; `node` is the probed endpoint's host.",
}


@dataclass(frozen=True)
class Group:
    anchor: str  #: the heading's anchor as GitHub derives it from `title`
    title: str
    intro: str
    accepts: Callable[[SignalSpec], bool]


def _prefixed(*prefixes: str) -> Callable[[SignalSpec], bool]:
    return lambda spec: spec.name.startswith(prefixes)


def _node_network(spec: SignalSpec) -> bool:
    return spec.name.startswith("net.") and set(spec.sources) <= {"node"}


#: First group that accepts a signal gets it.
GROUPS: tuple[Group, ...] = (
    Group("gpu", "GPU", "Per GPU (`gpu` = the GPU index), from dcgm-exporter or the native NVML collector.",
          _prefixed("gpu.")),
    Group("inference-engine", "Inference engine",
          "Per engine (one vLLM / TGI / NIM server; `engine` label, else the scrape's `instance`): load, "
          "KV cache, tokens and the server-side latency histograms. `model.*` signals exist only in the model "
          "stage (model- and fleet-scope rules, all engines of a model added up).",
          _prefixed("engine.", "latency.", "tokens.", "model.")),
    Group("node-network", "Node network",
          "Per node: the kernel's TCP counters of the node's network namespace (node_exporter names).",
          _node_network),
    Group("network-probes", "Network probes",
          "What the agent's probes and blackbox_exporter see of a target; the snapshot's `node` is the probed "
          "target's host, so the client-side view meets that host's own metrics.",
          _prefixed("net.", "ingress.", "probe.")),
    Group("streaming-probe", "Streaming probe",
          "Client-side latency of a streamed completion through the public path, buffered-stream detection "
          "and the load balancer's health-check margin (per `endpoint`).",
          _prefixed("stream.", "health.", "lb.")),
)
OTHER = Group("other", "Other", "Signals that belong to none of the groups above.", lambda spec: True)

INTRO = """\
# Signal catalog

<!-- Generated from tailhound/catalog/signals.yaml by `tailhound catalog`: do not edit by hand. -->

Rules never name an exporter's metric: they name **canonical signals** (`gpu.temperature`,
`latency.ttft`). This catalog says which metric of which source carries each signal, so replacing
dcgm-exporter by the native NVML collector, or vLLM by TGI, changes nothing in `rules/`.

## How to read the tables

- **Sources** are recording jobs: the `job` of a scrape recording line (docs/recording-format.md),
  which becomes the snapshot's `source`. A source column lists the metric name(s) of that source;
  several names are alternatives (exporter generations, vLLM V1 / V0) and whichever is present is used.
  `×0.01` is the `scale` that converts to the signal's unit (percent -> ratio);
  `name{type="corrected"}` is a `match`: only samples with those label values carry the signal
  (a mapping with `match` wins over one without).
- **kind**: `gauge` values are used as they are (times `scale`). `counter` samples keep the cumulative
  value and get a per-interval `delta` since the previous collection (`prev_ts`); a counter that went
  down was reset (an engine restart), so its delta is the new value and the sample is flagged `reset`,
  never a negative or huge number; a series seen for the first time has no delta. `histogram` samples
  keep the cumulative buckets and get bucket deltas (`delta.counts`, `delta.count`, `delta.sum`) with
  resets handled the same way; a histogram whose bucket bounds changed starts over. Missed or failed
  collections in between are flagged `gap` on the snapshot.
- **per**: the label(s) naming the entity a value belongs to (`gpu` -> `"3"`, `gpu, link` -> `"3/7"`);
  `node` means one value per node. A sample without the label falls back to the snapshot's common
  labels (the recording line's `labels`), then, for a single `per` label, to its `instance`
  (servers with one engine: TGI, vLLM V0, NIM); a sample with none of these is not used.
- **unit**: `—` is a dimensionless number (ratio, count, flag).

## Source quirks handled before mapping

- dcgm-exporter prints DCGM's blank / NOT_SUPPORTED sentinels as values (int64 ~9.22e18, int32
  0x7ffffff0..0x7fffffff, fp64 2^47 + small offsets): they are dropped, so an unsupported field is
  absent, never a huge number. NaN and infinities are dropped for every source.
- node_exporter exports its netstat counters `untyped`: metrics the catalog calls counters are typed
  as counters (and get deltas). Conversely a metric exported as a counter that the catalog calls a
  gauge (dcgm-exporter's `DCGM_FI_PROF_PCIE_TX_BYTES`, a rate) is treated as a gauge.
- Native collectors (`nvml`, `netprobe`, `streamprobe`) render Prometheus text with tailhound's own
  metric names, so recorded and live data follow the same path.
"""


def _fmt_scale(scale: float) -> str:
    return f" ×{scale:g}" if scale != 1.0 else ""


def format_mapping(sm: SourceMetric) -> str:
    """`DCGM_FI_DEV_GPU_UTIL` ×0.01, `tailhound_gpu_ecc_errors_total{type="corrected"}`."""
    match = "{" + ",".join(f'{k}="{v}"' for k, v in sm.match) + "}" if sm.match else ""
    return f"`{sm.metric}{match}`{_fmt_scale(sm.scale)}"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def source_order(sources: set[str] | list[str]) -> list[str]:
    known = [j for j in JOBS if j in sources]
    return known + sorted(s for s in sources if s not in JOBS)


def group_signals(catalog: Catalog) -> list[tuple[Group, list[SignalSpec]]]:
    grouped: dict[str, list[SignalSpec]] = {}
    for spec in catalog.signals.values():
        group = next((g for g in GROUPS if g.accepts(spec)), OTHER)
        grouped.setdefault(group.anchor, []).append(spec)
    return [(g, grouped[g.anchor]) for g in (*GROUPS, OTHER) if g.anchor in grouped]


def render_table(specs: list[SignalSpec]) -> list[str]:
    sources = source_order({src for spec in specs for src in spec.sources})
    header = ["canonical signal", "kind", "unit", "per", "description", *sources]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for spec in specs:
        row = [f"`{spec.name}`", spec.kind, _cell(spec.unit) or "—", ", ".join(spec.per) or "node",
               _cell(spec.description)]
        row += ["<br>".join(format_mapping(sm) for sm in spec.sources.get(src, ())) for src in sources]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def render_markdown(catalog: Catalog | None = None) -> str:
    catalog = catalog or default_catalog()
    groups = group_signals(catalog)
    out = [INTRO, "## Sources", "", "| source (job) | what it is |", "|---|---|"]
    for src in source_order(catalog.sources()):
        out.append(f"| `{src}` | {SOURCE_INFO.get(src, '')} |")
    out += ["", f"## Signals ({len(catalog.signals)})", ""]
    out += [f"- [{g.title}](#{g.anchor}) ({len(specs)})" for g, specs in groups]
    for g, specs in groups:
        out += ["", f"### {g.title}", "", g.intro, ""]
        out += render_table(specs)
    out += ["", DERIVED]
    return "\n".join(out) + "\n"


DERIVED = """\
## Derived signals (computed by the streams worker)

Rules may also name these; their entity is the one of the signal they come from.

| name | what it is |
|---|---|
| `<counter>.rate` | per-second rate of a counter signal over the collection interval (from the agent's deltas, resets handled), e.g. `net.listen_overflows.rate`, `engine.preemptions.rate` |
| `<histogram>.p50` / `.p95` / `.p99` | percentile over a 5-minute window of bucket deltas (Prometheus `histogram_quantile` maths), e.g. `latency.tpot.p95` |
| `<histogram>.mean` | exact mean (sum / count) over the window; use it where bucket bounds are too coarse (vLLM's queue time starts at 0.3 s) |
| `<histogram>.window_count` | observations in the window (`min_observations` in rules) |
| `gpu.sm_clock_ratio` | `gpu.sm_clock` / `gpu.sm_clock_max` |
| `gpu.thermal_throttle_flag`, `gpu.power_cap_flag` | 1 when the clock-event reasons have the SW/HW thermal (0x20, 0x40) or power (0x4, 0x80) bits |
| `net.tcp_retrans_ratio` | `net.tcp_retrans_segs.rate` / `net.tcp_out_segs.rate` |
| `engine.prefix_cache_hit_ratio` | `engine.prefix_cache_hits.rate` / `engine.prefix_cache_queries.rate` |
| `sla.ttft_p99` | the engine's model's TTFT P99 service level (settings `streams.ttft_p99_sla_s`, fnmatch patterns; default 1.5 s) |
"""


def write_markdown(path: Path, catalog: Catalog | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(catalog), encoding="utf-8")
    return path


def is_stale(path: Path, catalog: Catalog | None = None) -> bool:
    """True when `path` is missing or differs from what the catalog renders."""
    return not path.is_file() or path.read_text(encoding="utf-8") != render_markdown(catalog)
