"""Input series of a rule test -> scrape records, the way exporters would have been scraped (pure).

Series (promtool's notation, :mod:`tailhound.rulestest.series_notation`) name either a canonical signal (rendered under
the metric the node's source exports, in its unit) or an exporter's own metric with its ``source``. Each step
becomes one exposition per (node, source), a :class:`~tailhound.recording.ScrapeRecord`, so replay derives
counter and histogram deltas with the agent's own pipeline, as from a real scrape. Histogram steps give the value
every observation of the interval takes (``count`` of them, default 10); the kinds are in docs/rules-testing.md.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left
from dataclasses import dataclass, field, replace

from tailhound.catalog import Catalog, SignalSpec
from tailhound.recording import ScrapeRecord

from .exposition import Plan, default_buckets, fmt_le, render, series_key
from .series_notation import SeriesError, parse_selector, parse_series

#: engine sources and the label that names one engine of a node in them (vLLM: engine, else the instance)
ENGINE_SOURCES = ("vllm", "tgi", "nim", "sglang")
GPU_SOURCES = ("dcgm", "nvml")
#: scrape order within a step (the simulator's: the engine first); other sources follow in name order
SOURCE_ORDER = ("vllm", "tgi", "nim", "sglang", "dcgm", "nvml", "node", "blackbox", "netprobe", "streamprobe")
DEFAULT_COUNT = 10.0
DEFAULT_MODEL = "test-model"


class InputError(ValueError):
    """A series that cannot be rendered; ``where`` is the key inside the series entry (for the line)."""

    def __init__(self, message: str, where: str | None = None, column: int | None = None) -> None:
        self.where, self.column = where, column
        super().__init__(message)


@dataclass(frozen=True)
class NodeSetup:
    """How a test node exports: its inference engine and GPU collector, the model it serves."""

    engine: str = "vllm"
    gpu_source: str = "dcgm"
    model: str = DEFAULT_MODEL


@dataclass
class SeriesInput:
    """One entry of ``input_series`` (already validated by the file model)."""

    series: str
    values: str | int | float
    node: str
    source: str | None = None
    count: str | int | float | None = None
    buckets: list[float] | None = None
    type: str | None = None
    each: dict[str, list[str]] = field(default_factory=dict)


def record_labels(source: str, node: str, setup: NodeSetup) -> dict[str, str]:
    """The labels the agent config adds to a scrape (the engine's model, its id) as the simulator sets them."""
    if source == "vllm":
        return {"model_name": setup.model, "engine": "0"}
    if source in ENGINE_SOURCES:
        return {"model_name": setup.model, "instance": f"{node}:8000"}
    return {}


def _derived_hint(name: str) -> str | None:
    """Why a signal name cannot be an input, and what to give instead."""
    from tailhound.streams.extract import (
        DEMAND_SIGNALS,
        DERIVED_SIGNALS,
        FLAG_SIGNALS,
        HISTOGRAM_STATS,
        RATE_RATIOS,
        SLA_SIGNALS,
    )

    if name in DERIVED_SIGNALS:
        num, den = DERIVED_SIGNALS[name][1]
        return f"{name} is derived ({num} / {den}): give those two"
    if name in FLAG_SIGNALS:
        return f"{name} is decoded from {FLAG_SIGNALS[name][1]} (a bitmask): give that"
    if name in RATE_RATIOS:
        num, den = RATE_RATIOS[name]
        return f"{name} is derived ({num} / {den}): give those counters (or their .rate)"
    if name in SLA_SIGNALS:
        given = "capacity" if SLA_SIGNALS[name] == "capacity_file" else SLA_SIGNALS[name]
        return f"{name} comes from the test file's {given} (by the engine's model), not from a series"
    if name in DEMAND_SIGNALS:
        return (
            f"{name} is computed from latency.e2e's window count and the in-flight gauges "
            "(engine.requests_running + engine.requests_waiting): give those"
        )
    if name.startswith("model."):
        return f"{name} is computed by the model stage from the engines' own series: give those"
    base, _, suffix = name.rpartition(".")
    if suffix in HISTOGRAM_STATS:
        return (
            f"{name} is a window statistic of the histogram {base}: give {base} (each step's value is the "
            "value of that interval's observations, `count:` how many)"
        )
    return None


class SeriesRenderer:
    """Builds the per-step exposition lines of the test's series, then the scrape records."""

    def __init__(self, catalog: Catalog, interval_s: float, start_ts: float, nodes: dict[str, NodeSetup]) -> None:
        self.catalog = catalog
        self.interval_s = interval_s
        self.start_ts = start_ts
        self.nodes = nodes
        self.plans: list[Plan] = []

    def setup(self, node: str) -> NodeSetup:
        return self.nodes.get(node) or NodeSetup()

    def add(self, entry: SeriesInput) -> None:
        if "node" in entry.each:  # `each: {node: [...]}` repeats the series on every node named
            for node in entry.each["node"]:
                self.add(replace(entry, node=node, each={k: v for k, v in entry.each.items() if k != "node"}))
            return
        try:
            name, labels = parse_selector(entry.series)
        except SeriesError as exc:
            raise InputError(exc.message, "series") from None
        try:
            values = parse_series(entry.values)
        except SeriesError as exc:
            raise InputError(exc.message, "values", exc.column) from None
        if not values:
            raise InputError("no values", "values")
        combos = [dict(zip(entry.each, combo, strict=True)) for combo in itertools.product(*entry.each.values())]
        for combo in combos or [{}]:
            clash = set(combo) & set(labels)
            if clash:
                raise InputError(f"label {sorted(clash)[0]!r} is in the series and in `each`", "each")
            self._add_one(entry, name, {**labels, **combo}, values)

    # --- what a name is -------------------------------------------------------------------------------------

    def _add_one(self, entry: SeriesInput, name: str, labels: dict[str, str], values: list[float | None]) -> None:
        cat = self.catalog
        if name.startswith("model."):  # catalogued, but only the model stage writes them
            raise InputError(_derived_hint(name) or name, "series")
        spec = cat.spec(name)
        rate_of: SignalSpec | None = None
        if spec is None and name.endswith(".rate"):
            base = cat.spec(name.removesuffix(".rate"))
            if base is not None and base.kind == "counter":
                spec, rate_of = base, base
        if spec is not None:
            self._canonical(entry, spec, labels, values, rate=rate_of is not None)
            return
        hint = _derived_hint(name)
        if hint is not None:
            raise InputError(hint, "series")
        if "." in name:
            raise InputError(
                f"unknown signal {name!r} (docs/signals.md lists the canonical signals; an exporter "
                "metric has no dots)",
                "series",
            )
        self._raw(entry, name, labels, values)

    def _source_for(self, entry: SeriesInput, spec: SignalSpec) -> str:
        if entry.source is not None:
            if entry.source not in spec.sources:
                raise InputError(
                    f"{spec.name} has no {entry.source!r} source (it comes from "
                    f"{', '.join(spec.sources) or 'no source'})",
                    "source",
                )
            return entry.source
        setup = self.setup(entry.node)
        preferred = (setup.engine, setup.gpu_source, *SOURCE_ORDER)
        for src in preferred:
            if src in spec.sources:
                if src in ENGINE_SOURCES and src != setup.engine:
                    continue  # another engine's metric: not on this node
                if src in GPU_SOURCES and src != setup.gpu_source and setup.gpu_source in spec.sources:
                    continue
                return src
        if any(s in ENGINE_SOURCES for s in spec.sources):
            raise InputError(
                f"{setup.engine} does not export {spec.name} (see docs/signals.md, engine coverage); "
                f"give `source:` one of {', '.join(spec.sources)} and set the node's engine",
                "series",
            )
        return next(iter(spec.sources))

    def _canonical(
        self, entry: SeriesInput, spec: SignalSpec, labels: dict[str, str], values: list[float | None], rate: bool
    ) -> None:
        source = self._source_for(entry, spec)
        mapping = spec.sources[source][0]
        labels = dict(labels)
        for key, want in mapping.match:
            if want == "*":
                if not labels.get(key):
                    raise InputError(
                        f"{spec.name} from {source} is the metric {mapping.metric} with a {key} label: give it a value",
                        "series",
                    )
            elif want == "":
                if labels.get(key):
                    raise InputError(f"{spec.name} from {source} is {mapping.metric} without a {key} label", "series")
            else:
                labels.setdefault(key, want)
        for label in spec.per:
            if label in ("node",) or label in labels:
                continue
            if label == "engine" or record_labels(source, entry.node, self.setup(entry.node)).get(label):
                continue  # the scrape's labels name the node's one engine
            raise InputError(
                f'{spec.name} is per {label}: write {spec.name}{{{label}="..."}} '
                f"(or list several with `each: {{{label}: [...]}}`)",
                "series",
            )
        if spec.kind == "histogram":
            if rate:
                raise InputError(f"{spec.name} is a histogram, not a counter", "series")
            self._histogram(entry, source, mapping.metric, spec, labels, values)
            return
        if entry.count is not None or entry.buckets is not None:
            raise InputError(f"`count` and `buckets` are for histograms; {spec.name} is a {spec.kind}", "count")
        scale = mapping.scale or 1.0
        if rate:
            values = self._integrate(values)
        kind = spec.kind
        key = series_key(mapping.metric, labels)
        steps = [None if v is None else [(key, v / scale)] for v in values]
        self.plans.append(Plan(entry.node, source, mapping.metric, kind, steps))

    def _integrate(self, rates: list[float | None]) -> list[float | None]:
        total, out = 0.0, []
        for r in rates:
            if r is None:
                out.append(None)
                continue
            if r < 0:
                raise InputError(f"a rate of {r:g}/s: counters only grow", "values")
            total += r * self.interval_s
            out.append(total)
        return out

    def _raw(self, entry: SeriesInput, name: str, labels: dict[str, str], values: list[float | None]) -> None:
        cat = self.catalog
        source = entry.source
        if source is None:
            owners = sorted({src for (src, metric) in cat.by_metric if metric == name})
            base_owners = sorted(
                {
                    src
                    for (src, metric) in cat.by_metric
                    for suffix in ("_bucket", "_sum", "_count")
                    if name.endswith(suffix) and metric == name.removesuffix(suffix)
                }
            )
            owners = owners or base_owners
            if len(owners) != 1:
                raise InputError(
                    f"{name}: say which exporter it comes from with `source:` "
                    f"({'one of ' + ', '.join(owners) if owners else 'e.g. vllm, dcgm, node'})",
                    "series",
                )
            source = owners[0]
        kind = entry.type or cat.kind_of(source, name)
        for suffix in ("_bucket", "_sum", "_count"):
            base = name.removesuffix(suffix)
            if (
                name.endswith(suffix)
                and (entry.type or cat.kind_of(source, base)) == "histogram"
                and cat.kind_of(source, name) is None
            ):
                if suffix == "_bucket" and "le" not in labels:
                    raise InputError(f'{name} needs an le label (le="0.5" ... le="+Inf")', "series")
                key = series_key(name, labels)
                steps = [None if v is None else [(key, v)] for v in values]
                self.plans.append(Plan(entry.node, source, base, "histogram", steps))
                return
        if kind == "histogram":
            found = cat.lookup(source, name, labels)
            self._histogram(entry, source, name, found[0] if found else None, labels, values)
            return
        if entry.count is not None or entry.buckets is not None:
            raise InputError(
                f"`count` and `buckets` are for histograms; {name} is not one (set `type: histogram`)", "count"
            )
        key = series_key(name, labels)
        steps = [None if v is None else [(key, v)] for v in values]
        self.plans.append(Plan(entry.node, source, name, kind or "untyped", steps))

    def _histogram(
        self,
        entry: SeriesInput,
        source: str,
        metric: str,
        spec: SignalSpec | None,
        labels: dict[str, str],
        values: list[float | None],
    ) -> None:
        le = tuple(entry.buckets) if entry.buckets else default_buckets(source, metric, spec)
        if list(le) != sorted(set(le)) or not all(math.isfinite(b) for b in le):
            raise InputError("buckets must be finite and strictly increasing (+Inf is implied)", "buckets")
        if entry.count is None:
            counts: list[float | None] = [DEFAULT_COUNT] * len(values)
        else:
            try:
                counts = parse_series(entry.count)
            except SeriesError as exc:
                raise InputError(exc.message, "count", exc.column) from None
            if len(counts) == 1:
                counts = counts * len(values)
        if any(c is not None and c < 0 for c in counts):
            raise InputError("a negative count of observations", "count")
        cumulative = [0.0] * len(le)
        total = total_sum = 0.0
        bucket_keys = [series_key(f"{metric}_bucket", {**labels, "le": fmt_le(b)}) for b in le]
        inf_key = series_key(f"{metric}_bucket", {**labels, "le": "+Inf"})
        sum_key, count_key = series_key(f"{metric}_sum", labels), series_key(f"{metric}_count", labels)
        steps: list[list[tuple[str, float]] | None] = []
        for i, v in enumerate(values):
            if v is None:
                steps.append(None)
                continue
            n = counts[i] if i < len(counts) and counts[i] is not None else 0.0
            at = bisect_left(le, v)  # first bound >= v: Prometheus buckets are `<= le`
            for b in range(at, len(le)):
                cumulative[b] += n
            total += n
            total_sum += n * v
            lines = list(zip(bucket_keys, cumulative, strict=True))
            lines += [(inf_key, total), (sum_key, total_sum), (count_key, total)]
            steps.append(lines)
        self.plans.append(Plan(entry.node, source, metric, "histogram", steps))

    # --- records ---------------------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        return max((len(p.steps) for p in self.plans), default=0)

    def records(self) -> list[ScrapeRecord]:
        """One record per (step, node, source) that has a sample; time order, nodes in order of appearance."""
        node_order = list(dict.fromkeys([*self.nodes, *(p.node for p in self.plans)]))
        by_target: dict[tuple[str, str], list[Plan]] = {}
        for p in self.plans:
            by_target.setdefault((p.node, p.source), []).append(p)

        def order(key: tuple[str, str]) -> tuple[int, int, str]:
            node, source = key
            rank = SOURCE_ORDER.index(source) if source in SOURCE_ORDER else len(SOURCE_ORDER)
            return node_order.index(node), rank, source

        targets = sorted(by_target, key=order)
        out: list[ScrapeRecord] = []
        for step in range(self.steps):
            ts = self.start_ts + step * self.interval_s
            for node, source in targets:
                body = render(by_target[(node, source)], step)
                if body is None:
                    continue
                out.append(
                    ScrapeRecord(
                        ts=ts,
                        node=node,
                        job=source,
                        body=body,
                        labels=record_labels(source, node, self.setup(node)),
                        interval_s=self.interval_s,
                    )
                )
        return out
