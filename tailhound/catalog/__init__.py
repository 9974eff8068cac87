"""The canonical signal catalog: which source metric is which canonical signal (data in signals.yaml).

Each signal names its unit, kind, the entity label(s) (``per``) and, per source, the metric(s) that carry it,
narrowed by label values (``match``) and converted (``scale``); ``docs/signals.md`` is generated from it
(``tailhound catalog``). A per-GPU signal's ``mig`` field keeps MIG instance lines out of whole-GPU values
(``device``: they count for the GPU; ``instance``: they feed the ``mig.<name>`` twin; omitted: dropped). What
each inference engine exposes, stands in for or lacks is the ``engines`` section (:class:`EngineCoverage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from tailhound.errors import ConfigError
from tailhound.yamlfile import safe_load

KINDS = ("gauge", "counter", "histogram")
_UNKNOWN = object()

#: The label dcgm-exporter puts on the lines of a MIG GPU instance, and the sources that use it.
MIG_LABEL = "GPU_I_ID"
MIG_SOURCES = ("dcgm",)
MIG_MODES = ("device", "instance")
#: How a `per` label's value is written in an entity ("0/mig3" for GPU 0's GPU instance 3).
ENTITY_PREFIX = {MIG_LABEL: "mig"}
#: The inference engines a rule can name in `engines:` (their snapshot source has the same name).
ENGINES = ("vllm", "tgi", "nim", "sglang")
#: Signal name prefixes of the inference-engine group (what engine coverage is about).
ENGINE_PREFIXES = ("engine.", "latency.", "tokens.", "model.")
#: Coverage of one signal on one engine (:meth:`Catalog.engine_coverage`).
MAPPED, STAND_IN, CONDITIONAL, NOT_EXPOSED, UNMAPPED = "mapped", "stand-in", "conditional", "not-exposed", "unmapped"


@dataclass(frozen=True)
class SourceMetric:
    metric: str
    scale: float = 1.0
    match: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        for k, v in self.match:
            got = labels.get(k)
            if v == "*":
                if not got:
                    return False
            elif v == "":
                if got:
                    return False
            elif got != v:
                return False
        return True


@dataclass(frozen=True)
class SignalSpec:
    name: str
    unit: str
    kind: str
    per: tuple[str, ...]
    description: str
    sources: dict[str, tuple[SourceMetric, ...]] = field(default_factory=dict)
    #: per-GPU signals: how dcgm-exporter's MIG instance lines count (``device``, ``instance`` or None)
    mig: str | None = None
    #: generated ``mig.*`` twins: the whole-GPU signal they are the per-instance view of
    instance_of: str | None = None

    def entity(self, labels: dict[str, str], common: dict[str, str]) -> str | None:
        """The entity a sample describes: its `per` label values joined by '/', '' for node-level
        signals. A sample without the label falls back to the snapshot's common labels, then to its
        ``instance`` (one engine per scraped server, as with TGI or vLLM V0); else it is not usable.
        A MIG instance's part is written ``mig<GPU_I_ID>`` ("0/mig3")."""
        per = self.per
        if not per or per == ("node",):
            return ""
        if len(per) == 1:  # the usual case (gpu, engine, endpoint): no join
            label = per[0]
            v = labels.get(label, common.get(label))
            if v is None:
                v = labels.get("instance", common.get("instance"))
            return v
        parts = []
        for label in per:
            v = labels.get(label, common.get(label))
            prefix = ENTITY_PREFIX.get(label)
            if v is None or (prefix and not v):
                return None
            parts.append(prefix + v if prefix else v)
        return "/".join(parts)


@dataclass(frozen=True)
class EngineCoverage:
    """What one inference engine exposes of the engine signals (the ``engines`` section of signals.yaml).

    Signals the engine's source maps are exposed; ``stand_ins`` names those it maps to a close but not identical
    metric (and how they differ), ``conditional`` those present only in some versions or configurations, and
    ``not_exposed`` the engine signals it has no metric for (and what comes closest, if anything)."""

    name: str
    source: str
    title: str
    references: tuple[str, ...]
    not_exposed: dict[str, str]
    stand_ins: dict[str, str]
    conditional: dict[str, str]


@dataclass(frozen=True)
class Catalog:
    signals: dict[str, SignalSpec]
    #: (source, metric) -> the mappings of that metric, most specific (most `match` labels) first
    by_metric: dict[tuple[str, str], list[tuple[SignalSpec, SourceMetric]]]
    #: inference engine -> what it exposes (signals.yaml `engines`)
    engines: dict[str, EngineCoverage] = field(default_factory=dict)

    #: (source, metric) -> the answer of lookup() for metrics whose mappings match no labels (the answer
    #: then does not depend on the labels); ~60 lookups per snapshot made this the catalog's hot path
    _unconditional: dict[tuple[str, str], tuple[SignalSpec, float] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: (source, metric) -> the label names its mappings match on; ((source, metric), their values) -> answer
    _match_keys: dict[tuple[str, str], tuple[str, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _conditional: dict[tuple, tuple[SignalSpec, float] | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    #: what callers derive from the catalog and keep with it (streams: per-metric extraction plans)
    memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def lookup(self, source: str, metric: str, labels: dict[str, str] | None = None) -> tuple[SignalSpec, float] | None:
        key = (source, metric)
        cached = self._unconditional.get(key, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        mappings = self.by_metric.get(key, ())
        if not any(sm.match for _, sm in mappings):
            found = (mappings[0][0], mappings[0][1].scale) if mappings else None
            if len(self._unconditional) < 65536:  # bounded: metric names come from the wire
                self._unconditional[key] = found
            return found
        labels = labels or {}
        match_keys = self._match_keys.get(key)
        if match_keys is None:
            match_keys = self._match_keys[key] = tuple(sorted({k for _, sm in mappings for k, _ in sm.match}))
        # the answer depends only on the values of the labels the mappings match on
        by_values = (key, tuple(labels.get(k) for k in match_keys))
        cached = self._conditional.get(by_values, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        found = next(((spec, sm.scale) for spec, sm in mappings if sm.matches(labels)), None)
        if len(self._conditional) < 65536:
            self._conditional[by_values] = found
        return found

    def spec(self, signal: str) -> SignalSpec | None:
        return self.signals.get(signal)

    def kind_of(self, source: str, metric: str) -> str | None:
        """The kind the catalog gives a source metric (for exporters that mistype, e.g. untyped counters)."""
        found = self.by_metric.get((source, metric))
        return found[0][0].kind if found else None

    def sources(self) -> list[str]:
        return sorted({src for spec in self.signals.values() for src in spec.sources})

    def engine_signals(self) -> list[str]:
        """The signals of the inference-engine group, in catalog order (what engine coverage is about)."""
        return [n for n in self.signals if n.startswith(ENGINE_PREFIXES)]

    def engine_coverage(self, engine: str) -> dict[str, tuple[str, str]]:
        """signal -> (status, note) for every engine signal on `engine`: ``mapped``, ``stand-in`` (a close
        but different metric, the note says how), ``conditional`` (some versions or flags only),
        ``not-exposed`` (the engine has no such metric; the note says what comes closest) or ``unmapped``
        (nobody has looked: a gap in signals.yaml)."""
        cov = self.engines[engine]
        out: dict[str, tuple[str, str]] = {}
        for name in self.engine_signals():
            if name in cov.not_exposed:
                out[name] = (NOT_EXPOSED, cov.not_exposed[name])
            elif cov.source not in self.signals[name].sources:
                out[name] = (UNMAPPED, "")
            elif name in cov.stand_ins:
                out[name] = (STAND_IN, cov.stand_ins[name])
            elif name in cov.conditional:
                out[name] = (CONDITIONAL, cov.conditional[name])
            else:
                out[name] = (MAPPED, "")
        return out


def _source_metrics(value: object) -> tuple[SourceMetric, ...]:
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, str):
            out.append(SourceMetric(metric=item))
        elif isinstance(item, dict):
            unknown = set(item) - {"metric", "scale", "match"}
            if unknown:
                raise ValueError(f"unknown mapping keys {sorted(unknown)}")
            match = tuple(sorted((str(k), str(v)) for k, v in (item.get("match") or {}).items()))
            out.append(SourceMetric(metric=str(item["metric"]), scale=float(item.get("scale", 1.0)), match=match))
        else:
            raise ValueError(f"a source mapping must be a metric name or {{metric, scale, match}}, got {item!r}")
    return tuple(out)


def _with_mig_match(mappings: tuple[SourceMetric, ...], value: str) -> tuple[SourceMetric, ...]:
    """The mappings, narrowed to MIG instance lines (``"*"``) or to lines without GPU_I_ID (``""``)."""
    out = []
    for sm in mappings:
        if any(k == MIG_LABEL for k, _ in sm.match):
            raise ValueError(f"{sm.metric}: a per-GPU mapping may not match on {MIG_LABEL} (use `mig:`)")
        out.append(SourceMetric(sm.metric, sm.scale, tuple(sorted((*sm.match, (MIG_LABEL, value))))))
    return tuple(out)


def _mig_specs(spec: SignalSpec) -> list[SignalSpec]:
    """`spec` with its dcgm mappings kept off MIG instance lines, plus the per-instance twin (``mig: instance``)."""
    if spec.mig == "device" or spec.per != ("gpu",) or not any(s in spec.sources for s in MIG_SOURCES):
        return [spec]
    whole = {src: (_with_mig_match(m, "") if src in MIG_SOURCES else m) for src, m in spec.sources.items()}
    out = [SignalSpec(spec.name, spec.unit, spec.kind, spec.per, spec.description, whole, spec.mig)]
    if spec.mig == "instance":
        twin = {src: _with_mig_match(m, "*") for src, m in spec.sources.items() if src in MIG_SOURCES}
        out.append(
            SignalSpec(
                name="mig." + spec.name.split(".", 1)[1],
                unit=spec.unit,
                kind=spec.kind,
                per=("gpu", MIG_LABEL),
                description=f"Per MIG GPU instance (entity `<gpu>/mig<GPU_I_ID>`): the instance's own `{spec.name}`, "
                "from dcgm-exporter lines with GPU_I_ID (never mixed into the whole-GPU value).",
                sources=twin,
                instance_of=spec.name,
            )
        )
    return out


def _add_engine_sources(source: str, mappings: dict, signals: dict[str, SignalSpec]) -> None:
    """An engine entry's own ``sources`` (signal -> mapping): the engine's metrics kept in one block of the file
    instead of a line under every signal; they become that signal's mappings for the engine's source."""
    for signal, value in mappings.items():
        spec = signals.get(signal)
        if spec is None:
            raise ValueError(f"sources: unknown signal {signal!r}")
        if source in spec.sources:
            raise ValueError(f"sources: {signal} already maps source {source} under `signals`")
        spec.sources[source] = _source_metrics(value)


def _engines(data: object, signals: dict[str, SignalSpec], origin: str) -> dict[str, EngineCoverage]:
    out: dict[str, EngineCoverage] = {}
    for name, entry in (data or {}).items():  # type: ignore[union-attr]
        try:
            if name not in ENGINES:
                raise ValueError(f"unknown engine (one of {list(ENGINES)})")
            unknown = set(entry) - {
                "source",
                "title",
                "references",
                "sources",
                "not_exposed",
                "stand_ins",
                "conditional",
            }
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            cov = EngineCoverage(
                name=name,
                source=str(entry.get("source", name)),
                title=str(entry.get("title", name)),
                references=tuple(str(r) for r in entry.get("references") or ()),
                not_exposed={str(k): str(v) for k, v in (entry.get("not_exposed") or {}).items()},
                stand_ins={str(k): str(v) for k, v in (entry.get("stand_ins") or {}).items()},
                conditional={str(k): str(v) for k, v in (entry.get("conditional") or {}).items()},
            )
            _add_engine_sources(cov.source, entry.get("sources") or {}, signals)
            for what, notes in (
                ("not_exposed", cov.not_exposed),
                ("stand_ins", cov.stand_ins),
                ("conditional", cov.conditional),
            ):
                for signal in notes:
                    spec = signals.get(signal)
                    if spec is None:
                        raise ValueError(f"{what}: unknown signal {signal!r}")
                    mapped = cov.source in spec.sources
                    if what == "not_exposed" and mapped:
                        raise ValueError(f"{what}: {signal} is mapped for source {cov.source}")
                    if what != "not_exposed" and not mapped:
                        raise ValueError(f"{what}: {signal} is not mapped for source {cov.source}")
        except (TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{origin}: engine {name}: {exc}") from exc
        out[name] = cov
    return out


def parse_catalog(data: dict, origin: str = "signals.yaml") -> Catalog:
    signals: dict[str, SignalSpec] = {}
    by_metric: dict[tuple[str, str], list[tuple[SignalSpec, SourceMetric]]] = {}
    unknown_top = set(data) - {"signals", "engines"}
    if unknown_top:
        raise ConfigError(f"{origin}: unknown top-level keys {sorted(unknown_top)}")
    for name, entry in (data.get("signals") or {}).items():
        try:
            unknown = set(entry) - {"unit", "kind", "per", "description", "sources", "mig"}
            if unknown:
                raise ValueError(f"unknown keys {sorted(unknown)}")
            if entry["kind"] not in KINDS:
                raise ValueError(f"kind must be one of {KINDS}, got {entry['kind']!r}")
            per = entry.get("per")
            mig = entry.get("mig")
            spec = SignalSpec(
                name=name,
                unit=str(entry.get("unit", "")),
                kind=str(entry["kind"]),
                per=tuple(per) if isinstance(per, list) else ((per,) if per else ()),
                description=str(entry.get("description", "")),
                sources={src: _source_metrics(v) for src, v in (entry.get("sources") or {}).items()},
                mig=mig,
            )
            if mig is not None and (mig not in MIG_MODES or spec.per != ("gpu",)):
                raise ValueError(f"mig must be one of {MIG_MODES} and is for `per: gpu` signals only, got {mig!r}")
            specs = _mig_specs(spec)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ConfigError(f"{origin}: signal {name}: {exc}") from exc
        for spec in specs:
            if spec.name in signals:
                raise ConfigError(f"{origin}: signal {spec.name} is defined twice")
            signals[spec.name] = spec
    engines = _engines(data.get("engines"), signals, origin)  # may add an engine's own `sources`
    for spec in signals.values():
        for src, mappings in spec.sources.items():
            for sm in mappings:
                entries = by_metric.setdefault((src, sm.metric), [])
                if any(other.match == sm.match for _, other in entries):
                    raise ConfigError(f"{origin}: {src} metric {sm.metric} {dict(sm.match)} is mapped twice")
                if entries and entries[0][0].kind != spec.kind:
                    raise ConfigError(
                        f"{origin}: {src} metric {sm.metric} is mapped as {entries[0][0].kind} and as {spec.kind}"
                    )
                entries.append((spec, sm))
                entries.sort(key=lambda e: -len(e[1].match))
    return Catalog(signals=signals, by_metric=by_metric, engines=engines)


@cache
def default_catalog() -> Catalog:
    text = resources.files(__name__).joinpath("signals.yaml").read_text(encoding="utf-8")
    return parse_catalog(safe_load(text))
