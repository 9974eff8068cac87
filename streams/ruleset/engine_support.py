"""Which inference engines can feed a rule (pure).

A rule that reads engine signals (``engine.*``, ``latency.*``, ``tokens.*``, ``model.*``, and what is derived
from them: ``latency.tpot.p95``, ``engine.preemptions.rate``, ``engine.http_rejection_ratio``) is alive on an
engine only if that engine exports what its conditions need: ``all`` needs every branch, ``any`` one of them.
:func:`supported_engines` answers from the catalog (what each engine's source maps); :func:`snapshot_signals`
gives the signals a real scrape actually produces, so tests can check the catalog against real fixtures and the
``engines:`` a rule declares against both. Rules that read no engine signal support ``any`` engine.

Signals of other sources (GPU, network, probes) and settings (``sla.ttft_p99``) do not restrict the engines.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tailhound.catalog import Catalog, default_catalog
from tailhound.snapshot import Snapshot

from ..demand import ARRIVAL_RATE, FINISHED, INFLIGHT
from ..engine_peers import COMPUTED_FROM as PEER_COMPUTED_FROM
from ..engine_peers import NODE_EXPLAINED_SIGNAL as PEER_NODE_EXPLAINED
from ..extract import DERIVED_SIGNALS, FLAG_SIGNALS, HISTOGRAM_STATS, RATE_RATIOS, SLA_SIGNALS
from .conditions import Absent, AllOf, AnyOf, NotOf, SignalCondition

ANY = "any"


def base_signals(signal: str, catalog: Catalog | None = None) -> frozenset[str]:
    """The catalog signals a rule signal is computed from: ``latency.tpot.p95`` -> {latency.tpot},
    ``engine.http_rejection_ratio`` -> {engine.http_rejections, engine.http_requests}, ``engine.arrival_rate`` ->
    {latency.e2e, engine.requests_running, engine.requests_waiting}; settings
    (``sla.ttft_p99``) -> {}; an unknown name -> {} (the rule loader refuses those)."""
    catalog = catalog or default_catalog()
    if signal in PEER_COMPUTED_FROM:  # the model stage's per-engine peer values (streams/engine_peers.py)
        return frozenset().union(*(base_signals(s, catalog) for s in PEER_COMPUTED_FROM[signal]))
    if signal == PEER_NODE_EXPLAINED:
        return frozenset()
    if catalog.spec(signal) is not None:
        return frozenset((signal,))
    if signal in DERIVED_SIGNALS:
        num, den = DERIVED_SIGNALS[signal][1]
        return base_signals(num, catalog) | base_signals(den, catalog)
    if signal in FLAG_SIGNALS:
        return base_signals(FLAG_SIGNALS[signal][1], catalog)
    if signal in SLA_SIGNALS:
        return frozenset()
    if signal == ARRIVAL_RATE:  # finished requests + the change of in-flight ones (streams/demand.py)
        return frozenset().union(*(base_signals(s, catalog) for s in (FINISHED, *INFLIGHT)))
    if signal in RATE_RATIOS:
        num, den = RATE_RATIOS[signal]
        return base_signals(num, catalog) | base_signals(den, catalog)
    base, _, suffix = signal.rpartition(".")
    spec = catalog.spec(base)
    if spec is not None and (
        (suffix == "rate" and spec.kind == "counter") or (suffix in HISTOGRAM_STATS and spec.kind == "histogram")
    ):
        return frozenset((base,))
    return frozenset()


def engine_sources(catalog: Catalog | None = None) -> dict[str, str]:
    """engine -> its snapshot source (signals.yaml `engines`)."""
    catalog = catalog or default_catalog()
    return {name: cov.source for name, cov in catalog.engines.items()}


def is_engine_signal(signal: str, catalog: Catalog | None = None) -> bool:
    """A catalog signal some inference engine's source maps."""
    catalog = catalog or default_catalog()
    spec = catalog.spec(signal)
    return spec is not None and any(src in spec.sources for src in engine_sources(catalog).values())


def catalog_signals(engine: str, catalog: Catalog | None = None) -> frozenset[str]:
    """The engine signals `engine`'s source maps in the catalog."""
    catalog = catalog or default_catalog()
    source = catalog.engines[engine].source
    return frozenset(name for name, spec in catalog.signals.items() if source in spec.sources)


def snapshot_signals(snapshots: Iterable[Snapshot], catalog: Catalog | None = None) -> frozenset[str]:
    """The catalog signals the samples of real scrapes map to (with a usable entity), whatever their kind."""
    catalog = catalog or default_catalog()
    out: set[str] = set()
    for snap in snapshots:
        for s in snap.samples:
            found = catalog.lookup(snap.source, s.name, s.labels)
            if found is not None and found[0].entity(s.labels, snap.labels) is not None:
                out.add(found[0].name)
    return frozenset(out)


def reads_engine_signals(condition: object, catalog: Catalog | None = None) -> bool:
    catalog = catalog or default_catalog()
    return any(is_engine_signal(b, catalog) for s in _signals(condition) for b in base_signals(s, catalog))


def missing(condition: object, available: frozenset[str], catalog: Catalog | None = None) -> list[str]:
    """The engine signals `condition` reads that are not in `available`, in order, each once (for messages)."""
    catalog = catalog or default_catalog()
    out: list[str] = []
    for s in _signals(condition):
        for b in sorted(base_signals(s, catalog)):
            if is_engine_signal(b, catalog) and b not in available and b not in out:
                out.append(b)
    return out


def fed(condition: object, available: frozenset[str], catalog: Catalog | None = None) -> bool:
    """Whether `condition` can be judged with the engine signals in `available` (other sources assumed present):
    ``all`` needs every branch, ``any`` one, ``not`` its branch; a leaf needs every engine signal it reads."""
    catalog = catalog or default_catalog()
    if isinstance(condition, AllOf):
        return all(fed(c, available, catalog) for c in condition.all)
    if isinstance(condition, AnyOf):
        return any(fed(c, available, catalog) for c in condition.any)
    if isinstance(condition, NotOf):
        return fed(condition.not_, available, catalog)
    return not missing(condition, available, catalog)


def supported_engines(
    rule: object, catalog: Catalog | None = None, available: Mapping[str, frozenset[str]] | None = None
) -> frozenset[str]:
    """The engines that can feed `rule` (a :class:`~tailhound.streams.ruleset.rulefile.Rule` or a bare condition):
    ``{"any"}`` when it reads no engine signal; else the engines whose signals (`available`: engine -> signal
    names, by default what the catalog maps for each) feed its ``when``."""
    catalog = catalog or default_catalog()
    when = getattr(rule, "when", rule)
    if not reads_engine_signals(when, catalog):
        return frozenset((ANY,))
    if available is None:
        available = {e: catalog_signals(e, catalog) for e in catalog.engines}
    return frozenset(e for e, sigs in available.items() if fed(when, sigs, catalog))


def _signals(condition: object) -> list[str]:
    if isinstance(condition, AllOf):
        return [s for c in condition.all for s in _signals(c)]
    if isinstance(condition, AnyOf):
        return [s for c in condition.any for s in _signals(c)]
    if isinstance(condition, NotOf):
        return _signals(condition.not_)
    if isinstance(condition, SignalCondition | Absent):
        return list(condition.signals())
    return []
