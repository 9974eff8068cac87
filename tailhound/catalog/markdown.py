"""``docs/signals.md``: the signal catalog as Markdown, generated from signals.yaml (``tailhound catalog``).

One table per group of signals (GPU, MIG instances, inference engine, node network, network probes,
streaming probe; anything new that fits none of them lands in "Other"), with one column per source used in
that group, then the derived signals and the per-engine coverage (signals.yaml ``engines``: what vLLM, TGI
and NIM expose, stand in for or lack).
``tailhound catalog --check`` (and tests/tailhound/test_catalog_docs.py) fail when the committed file
differs from what the catalog renders, the same way ``tailhound schema --check`` guards docs/schemas/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tailhound.catalog import (
    CONDITIONAL,
    MAPPED,
    MIG_LABEL,
    NOT_EXPOSED,
    STAND_IN,
    UNMAPPED,
    Catalog,
    SignalSpec,
    SourceMetric,
    default_catalog,
)
from tailhound.recording import JOBS

#: What each source (recording job = snapshot ``source``) is; unknown sources are listed without one.
SOURCE_INFO: dict[str, str] = {
    "vllm": "vLLM's `/metrics` (scrape job `vllm`); V1 and V0 metric names.",
    "tgi": "Text Generation Inference's `/metrics` (scrape job `tgi`).",
    "nim": "NVIDIA NIM for LLMs' metrics endpoint (scrape job `nim`).",
    "sglang": "SGLang's `/metrics` (`--enable-metrics`, scrape job `sglang`).",
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
    Group(
        "gpu",
        "GPU",
        "Per GPU (`gpu` = the GPU index), from dcgm-exporter or the native NVML collector. "
        '`mig`: how dcgm-exporter\'s MIG instance lines count (see "MIG GPU instances" above).',
        _prefixed("gpu."),
    ),
    Group(
        "mig-instances",
        "MIG instances",
        "Per MIG GPU instance (entity `<gpu>/mig<GPU_I_ID>`, e.g. `0/mig3`): generated from the GPU signals marked "
        "`mig: instance`, fed by dcgm-exporter lines that carry `GPU_I_ID` only.",
        _prefixed("mig."),
    ),
    Group(
        "inference-engine",
        "Inference engine",
        "Per engine (one vLLM / TGI / NIM / SGLang server; `engine` label, else the scrape's `instance`): load, "
        "KV cache, tokens and the server-side latency histograms. `model.*` signals exist only in the model "
        "stage (model- and fleet-scope rules, all engines of a model added up).",
        _prefixed("engine.", "latency.", "tokens.", "model."),
    ),
    Group(
        "node-network",
        "Node network",
        "Per node: the kernel's TCP counters of the node's network namespace (node_exporter names).",
        _node_network,
    ),
    Group(
        "network-probes",
        "Network probes",
        "What the agent's probes and blackbox_exporter see of a target; the snapshot's `node` is the probed "
        "target's host, so the client-side view meets that host's own metrics.",
        _prefixed("net.", "ingress.", "probe."),
    ),
    Group(
        "streaming-probe",
        "Streaming probe",
        "Client-side latency of a streamed completion through the public path, buffered-stream detection "
        "and the load balancer's health-check margin (per `endpoint`).",
        _prefixed("stream.", "health.", "lb."),
    ),
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
- **Stand-ins**: where an engine lacks a signal but has something close (NIM's per-token histogram for
  `latency.tpot`, TGI's per-batch decode step for `latency.itl`), the close metric is mapped and the
  description says how it differs; "Engine coverage" at the end lists, per engine, what is mapped, what is a
  stand-in, what depends on the version, and what the engine does not expose at all.

## MIG GPU instances

dcgm-exporter labels the lines of a MIG GPU instance with `GPU_I_ID` and `GPU_I_PROFILE` and the parent's
`gpu` label (in its default flex mode a MIG GPU has instance lines only; with `-d g,i` it has whole-GPU lines
too). They never overwrite a whole-GPU value. The GPU signal's `mig` column says how they count:

- `device`: the field belongs to the physical GPU (temperature, clocks, clock-event reasons, power, PCIe,
  ECC, XID); every instance line repeats the GPU's own value, so they count for the GPU (entity `"0"`), which
  keeps per-GPU rules working on MIG GPUs.
- `instance`: the value is the instance's own (DRAM activity, framebuffer used / total): instance lines feed
  the twin signal `mig.<name>` (per `gpu, GPU_I_ID`, entity `"0/mig3"`: GPU 0, GPU instance 3) and never the
  whole-GPU signal; `reduce` over `gpu.*` and per-GPU rules therefore only ever see whole GPUs, and a rule
  reads instances explicitly (`{signal: mig.dram_bw_util, reduce: max}`).
- empty: instance lines are dropped (the field is not reported per instance, like `DCGM_FI_DEV_GPU_UTIL`,
  or its per-instance meaning is unknown).

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
    """`DCGM_FI_DEV_GPU_UTIL` ×0.01, `tailhound_gpu_ecc_errors_total{type="corrected"}`; a MIG twin's mapping
    reads `DCGM_FI_PROF_DRAM_ACTIVE{GPU_I_ID=~".+"}` (the whole-GPU side's `GPU_I_ID=""` is left out: the
    `mig` column says it)."""
    parts = [f'{k}=~".+"' if v == "*" else f'{k}="{v}"' for k, v in sm.match if not (k == MIG_LABEL and v == "")]
    match = "{" + ",".join(parts) + "}" if parts else ""
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
    mig = any(spec.mig for spec in specs)
    header = ["canonical signal", "kind", "unit", "per", *(["mig"] if mig else []), "description", *sources]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for spec in specs:
        row = [
            f"`{spec.name}`",
            spec.kind,
            _cell(spec.unit) or "—",
            ", ".join(spec.per) or "node",
            *([spec.mig or ""] if mig else []),
            _cell(spec.description),
        ]
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
    out += render_engine_coverage(catalog)
    return "\n".join(out) + "\n"


_MARK = {MAPPED: "yes", STAND_IN: "stand-in", CONDITIONAL: "some versions", NOT_EXPOSED: "**no**", UNMAPPED: "unmapped"}


def render_engine_coverage(catalog: Catalog) -> list[str]:
    """## Engine coverage: one row per engine signal, one column per engine, then each engine's notes."""
    if not catalog.engines:
        return []
    engines = list(catalog.engines.values())
    coverage = {e.name: catalog.engine_coverage(e.name) for e in engines}
    out = [
        "",
        "## Engine coverage",
        "",
        "What each inference engine exposes of the engine signals (signals.yaml `engines`, machine-readable "
        "through `Catalog.engine_coverage`). *yes*: mapped; *stand-in*: a close but different metric is mapped "
        "(notes below); *some versions*: mapped, present in some versions or configurations only; **no**: the "
        "engine has no such metric (notes below say what comes closest). A rule's `engines:` lists the engines "
        "that can feed all of its conditions (streams/ruleset/engine_support.py checks it).",
        "",
        "| signal | " + " | ".join(f"{e.name} ({e.source})" for e in engines) + " |",
        "|---|" + "---|" * len(engines),
    ]
    for name in catalog.engine_signals():
        out.append(f"| `{name}` | " + " | ".join(_MARK[coverage[e.name][name][0]] for e in engines) + " |")
    for e in engines:
        out += ["", f"### {e.title} (`{e.name}`)", ""]
        out += [f"- Source of truth: {_cell(r)}" for r in e.references]
        for status, label in ((STAND_IN, "stand-in"), (CONDITIONAL, "some versions"), (NOT_EXPOSED, "not exposed")):
            for name, (got, note) in coverage[e.name].items():
                if got == status:
                    out.append(f"- `{name}` ({label}): {_cell(note)}")
    return out


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
| `engine.kv_cache_reserved` | `engine.batch_max_tokens` / `engine.batch_token_capacity`: the share of TGI's KV token budget the running batch has reserved (prompt + max_new_tokens per request), an upper bound on KV usage where `engine.kv_cache_usage` does not exist |
| `gpu.thermal_throttle_flag`, `gpu.power_cap_flag` | 1 when the clock-event reasons have the SW/HW thermal (0x20, 0x40) or power (0x4, 0x80) bits |
| `net.tcp_retrans_ratio` | `net.tcp_retrans_segs.rate` / `net.tcp_out_segs.rate` |
| `engine.prefix_cache_hit_ratio` | `engine.prefix_cache_hits.rate` / `engine.prefix_cache_queries.rate` |
| `engine.http_rejection_ratio` | `engine.http_rejections.rate` / `engine.http_requests.rate` (vLLM: 4xx/5xx answers over all answers) |
| `engine.request_failure_ratio` | `engine.http_rejections.rate` / `engine.requests_received.rate` (TGI: failed requests over arrivals; TGI has no HTTP status counter) |
| `sla.ttft_p99` | the engine's model's TTFT P99 service level (settings `streams.ttft_p99_sla_s`, fnmatch patterns; default 1.5 s) |
| `capacity.safe_request_rate`, `capacity.queue_scale_out`, `capacity.max_num_seqs`, `capacity.ttft_knee_s`, `capacity.tpot_knee_s` | the engine's model's load-tested thresholds (settings `streams.capacity_file`, written by `tailhound capacity`; fnmatch patterns): requests/s one engine serves before TTFT or TPOT bends, requests waiting at that rate (scale out), the batch size where TPOT outgrows throughput, the latencies at the knees. Absent without a capacity file |
| `engine.arrival_rate` | requests arriving per second over the 5-minute window: `latency.e2e.window_count` plus the growth of in-flight (`engine.requests_running` + `engine.requests_waiting`), divided by 300 s (`streams/demand.py`): demand, which a supply drop or a draining backlog does not move |
"""


def write_markdown(path: Path, catalog: Catalog | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(catalog), encoding="utf-8")
    return path


def is_stale(path: Path, catalog: Catalog | None = None) -> bool:
    """True when `path` is missing or differs from what the catalog renders."""
    return not path.is_file() or path.read_text(encoding="utf-8") != render_markdown(catalog)
