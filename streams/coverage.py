"""Rule coverage: can each rule ever fire with the signals a fleet (or a recording) sends? (pure)

A signal is *present* when a source sent a metric the catalog maps to it; each signal a rule names is first
reduced to the catalog signals it needs (:func:`requirements`: a ratio both inputs, ``.p95`` its histogram,
settings-derived ones nothing). A rule's ``when`` follows the evaluator's three-valued logic, so what it needs is
worked out for true and for false as alternative signal sets. A rule is **blind** when it cannot become true,
**partial** when some ``any`` branch cannot, **ok** otherwise; a blind rule's fix is the alternative needing the
fewest new sources, one :class:`~tailhound.catalog.fixes.Fix` per missing signal and source.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import product
from typing import Any, Literal

from tailhound.capacity_file import CAPACITY_SIGNALS
from tailhound.capacity_file import SETTING as CAPACITY_SETTING
from tailhound.catalog import Catalog, default_catalog
from tailhound.catalog.fixes import Fix, fixes_for, signal_note

from .demand import ARRIVAL_RATE, FINISHED, INFLIGHT
from .engine_peers import COMPUTED_FROM as PEER_COMPUTED_FROM
from .engine_peers import NODE_EXPLAINED_SIGNAL as PEER_NODE_EXPLAINED
from .extract import DERIVED_SIGNALS, FLAG_SIGNALS, HISTOGRAM_STATS, RATE_RATIOS, SLA_SIGNALS, signal_per
from .ruleset.conditions import Absent, AllOf, AnyOf, NotOf, Ref, SignalCondition
from .ruleset.rulefile import Rule, RuleSet

Status = Literal["ok", "partial", "blind"]
#: Any one of these sets of catalog signals, once present, is enough (the empty set: nothing is missing).
Alternatives = tuple[frozenset[str], ...]

#: Signals the worker computes itself, and from what: present wherever the rules that read them run.
COMPUTED_SIGNALS: dict[str, str] = {
    "model.nodes_with_cause": "the model stage counts the nodes with an open root-cause incident",
    PEER_NODE_EXPLAINED: "the model stage flags the nodes with an open root cause that explains a slower engine",
    **{name: f"settings streams.{setting}" for name, setting in SLA_SIGNALS.items() if setting != CAPACITY_SETTING},
}
#: Signals only a configuration file gives (the capacity file's): present when the worker (or doctor) has one,
#: else missing, with the fix saying how to make one (tailhound/catalog/fixes.py)
CONFIGURED_SIGNALS = frozenset(CAPACITY_SIGNALS)

#: Signals the worker computes from other signals (besides ratios, flags, rates and window statistics).
COMPUTED_FROM: dict[str, tuple[str, ...]] = {
    ARRIVAL_RATE: (FINISHED, *INFLIGHT),  # finished requests + the change of in-flight ones (streams/demand.py)
    **PEER_COMPUTED_FROM,  # each engine's TPOT and request rate in the model stage (streams/engine_peers.py)
}

#: Rules of the default pack that stay blind on dcgm-exporter's default counters + vLLM + node_exporter +
#: blackbox_exporter, and why: that data cannot show the fault. The acceptance test
#: (tests/streams/test_coverage.py) allows these and nothing else; docs/doctor.md lists them.
BLIND_ON_DEFAULT_EXPORTERS: dict[str, str] = {
    "load-above-tested-capacity": (
        "a warning; it compares the load with what a load test measured (the capacity file, settings "
        "streams.capacity_file, from `tailhound capacity`): no exporter sends that, so it needs the file"
    ),
    "pcie-link-downgraded": (
        "a warning; dcgm-exporter's default counters have no PCIe link generation or width, and the catalog "
        "takes the maximum generation and width the rule compares with from the nvml collector only"
    ),
    "health-check-timeout-too-tight": (
        "a warning; /health latency against the load balancer's health-check timeout is measured by the "
        "agent's stream_probe only (blackbox_exporter probes one URL, it knows no timeout to compare with)"
    ),
    "stream-buffered": (
        "a warning; whether a streamed response arrives token by token is seen only by the agent's "
        "stream_probe, from the client side (no exporter of the engine's node can see a proxy buffer)"
    ),
}

_MAX_ALTERNATIVES = 32


def requirements(signal: str, catalog: Catalog | None = None) -> frozenset[str]:
    """The catalog signals a signal a rule names needs, all of them (a name nothing can provide needs
    itself, so it is reported missing)."""
    catalog = catalog or default_catalog()
    if signal in COMPUTED_SIGNALS:
        return frozenset()
    if signal in COMPUTED_FROM:  # before the catalog: the model stage's peer gauges are catalogued, and computed
        return frozenset().union(*(requirements(s, catalog) for s in COMPUTED_FROM[signal]))
    if catalog.spec(signal) is not None:
        return frozenset({signal})
    if signal in DERIVED_SIGNALS:
        return frozenset().union(*(requirements(s, catalog) for s in DERIVED_SIGNALS[signal][1]))
    if signal in FLAG_SIGNALS:
        return requirements(FLAG_SIGNALS[signal][1], catalog)
    if signal in RATE_RATIOS:
        return frozenset().union(*(requirements(s, catalog) for s in RATE_RATIOS[signal]))
    base, _, suffix = signal.rpartition(".")
    spec = catalog.spec(base)
    if spec is not None and (
        (suffix == "rate" and spec.kind == "counter") or (suffix in HISTOGRAM_STATS and spec.kind == "histogram")
    ):
        return frozenset({base})
    return frozenset({signal})


def leaf_signals(leaf: SignalCondition | Absent, catalog: Catalog | None = None) -> frozenset[str]:
    """The signals one comparison reads: its own, the one it is compared with, and for
    ``min_observations`` the window's request count."""
    if isinstance(leaf, Absent):
        return frozenset({leaf.absent})
    names = {leaf.signal}
    if isinstance(leaf.bound, Ref) and leaf.bound.signal:
        names.add(leaf.bound.signal)
    if leaf.min_observations is not None:
        count = f"{leaf.signal.rpartition('.')[0]}.window_count"
        if signal_per(count, catalog or default_catalog()) is not None:
            names.add(count)
    return frozenset(names)


def _minimal(alts: Iterable[frozenset[str]]) -> Alternatives:
    """Without duplicates and supersets, smallest first, at most _MAX_ALTERNATIVES."""
    unique = sorted(set(alts), key=lambda a: (len(a), sorted(a)))
    out: list[frozenset[str]] = []
    for a in unique:
        if not any(kept <= a for kept in out):
            out.append(a)
    return tuple(out[:_MAX_ALTERNATIVES])


def _all_of(children: list[Alternatives]) -> Alternatives:
    """Every child must hold: one alternative of each, together."""
    return _minimal(frozenset().union(*combo) for combo in product(*children))


def _any_of(children: list[Alternatives]) -> Alternatives:
    return _minimal(a for child in children for a in child)


def needs(cond: Any, present: Collection[str], catalog: Catalog | None = None) -> tuple[Alternatives, Alternatives]:
    """(what `cond` needs to become true, what it needs to become false), as alternatives."""
    catalog = catalog or default_catalog()
    if isinstance(cond, SignalCondition | Absent):
        required = frozenset().union(*(requirements(s, catalog) for s in leaf_signals(cond, catalog)))
        missing = frozenset(s for s in required if s not in present)
        return (missing,), (missing,)
    if isinstance(cond, NotOf):
        true, false = needs(cond.not_, present, catalog)
        return false, true
    children = [needs(c, present, catalog) for c in (cond.all if isinstance(cond, AllOf) else cond.any)]
    trues, falses = [t for t, _ in children], [f for _, f in children]
    if isinstance(cond, AllOf):
        return _all_of(trues), _any_of(falses)
    if isinstance(cond, AnyOf):
        return _any_of(trues), _any_of(falses)
    raise TypeError(f"unknown condition {cond!r}")


@dataclass(frozen=True)
class RuleCoverage:
    rule: str
    severity: str
    scope: str
    root_cause: str
    status: Status
    #: blind: the set of catalog signals that would let it fire soonest (fewest sources to add, then fewest
    #: signals); partial: the signals of its branches that cannot hold
    missing: tuple[str, ...] = ()
    #: blind: every minimal set that would let it fire, in that order (``missing`` is the first)
    alternatives: tuple[tuple[str, ...], ...] = ()
    #: missing catalog signal -> the signals the rule names that need it (``gpu.sm_clock_ratio``)
    via: dict[str, tuple[str, ...]] = field(default_factory=dict)
    fixes: dict[str, tuple[Fix, ...]] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    @property
    def critical(self) -> bool:
        return self.severity == "critical"

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "severity": self.severity,
            "scope": self.scope,
            "root_cause": self.root_cause,
            "status": self.status,
            "missing": list(self.missing),
            "alternatives": [list(a) for a in self.alternatives],
            "via": {k: list(v) for k, v in self.via.items()},
            "fixes": {
                s: [
                    {"source": f.source, "action": f.action, "line": f.line, "unavailable": f.unavailable}
                    for f in fixes
                ]
                for s, fixes in self.fixes.items()
            },
            "notes": dict(self.notes),
        }


def rule_coverage(
    rule: Rule, present: Collection[str], catalog: Catalog | None = None, seen: Collection[str] = ()
) -> RuleCoverage:
    """One rule against the present catalog signals; `seen` (the sources that sent anything) orders
    the fixes."""
    catalog = catalog or default_catalog()
    true, _ = needs(rule.when, present, catalog)
    reads: dict[str, set[str]] = {}
    for leaf in rule.leaves():
        for name in leaf_signals(leaf, catalog):
            for base in requirements(name, catalog):
                if base not in present:
                    reads.setdefault(base, set()).add(name)
    shown = sorted(set().union(*true) | set(reads))
    fixes = {s: tuple(fixes_for(s, catalog, seen)) for s in shown}
    if frozenset() in true:
        status: Status = "partial" if reads else "ok"
        missing = tuple(sorted(reads))
        alternatives: tuple[tuple[str, ...], ...] = ()
    else:
        status = "blind"

        def effort(alt: frozenset[str]) -> tuple[int, int]:
            """Signals no source already there can send (a source to add), then the number of signals."""
            return sum(1 for s in alt if not any(f.source in seen and not f.unavailable for f in fixes[s])), len(alt)

        alternatives = tuple(tuple(sorted(a)) for a in sorted(true, key=lambda a: (effort(a), sorted(a))))
        missing = alternatives[0]
    return RuleCoverage(
        rule=rule.name,
        severity=rule.severity.value,
        scope=rule.scope.value,
        root_cause=(rule.root_cause or rule.fallback_root_cause or "symptom"),
        status=status,
        missing=missing,
        alternatives=alternatives,
        via={s: tuple(sorted(reads[s] - {s})) for s in shown if reads.get(s, set()) - {s}},
        fixes=fixes,
        notes={s: note for s in shown if (note := signal_note(s))},
    )


def coverage(
    rules: RuleSet, present: Collection[str], catalog: Catalog | None = None, seen: Collection[str] = ()
) -> list[RuleCoverage]:
    """Every rule, in rule-file order."""
    catalog = catalog or default_catalog()
    present = frozenset(present)
    return [rule_coverage(r, present, catalog, seen) for r in rules.rules]


def signals_of_metrics(metrics: Mapping[str, Iterable[str]], catalog: Catalog | None = None) -> frozenset[str]:
    """The catalog signals that ``{job: metric names}`` carry."""
    catalog = catalog or default_catalog()
    out: set[str] = set()
    for job, names in metrics.items():
        for name in names:
            out.update(spec.name for spec, _ in catalog.by_metric.get((job, name), ()))
    return frozenset(out)


def blind_critical(report: Iterable[RuleCoverage]) -> list[RuleCoverage]:
    return [c for c in report if c.status == "blind" and c.critical]


def summary(report: list[RuleCoverage]) -> str:
    """``16 rules: 10 ok, 2 partial, 4 blind (2 critical)``."""
    count = {s: sum(1 for c in report if c.status == s) for s in ("ok", "partial", "blind")}
    crit = len(blind_critical(report))
    return f"{len(report)} rules: {count['ok']} ok, {count['partial']} partial, {count['blind']} blind" + (
        f" ({crit} critical)" if crit else ""
    )


def best_fix(c: RuleCoverage, signal: str) -> Fix | None:
    """The first fix of a missing signal that can work (sources already seen first)."""
    fixes = c.fixes.get(signal, ())
    return next((f for f in fixes if not f.unavailable), fixes[0] if fixes else None)


def problem_lines(c: RuleCoverage, with_rule: bool = True) -> list[str]:
    """One line per missing signal of a blind or partial rule, promtool style:
    ``gpu-thermal-throttle (critical) blind: gpu.sm_clock_max missing (for gpu.sm_clock_ratio): <fix>``;
    then one line per other way a blind rule could fire. `with_rule` False leaves out the rule part."""
    head = f"{c.rule} ({c.severity}) {c.status}: " if with_rule else ""
    out = []
    for signal in c.missing:
        via = f" (for {', '.join(c.via[signal])})" if c.via.get(signal) else ""
        fix = best_fix(c, signal)
        out.append(f"{head}{signal} missing{via}: {fix.text if fix else 'no known source'}")
    for alt in c.alternatives[1:]:
        out.append(f"{head}or it fires with {', '.join(alt)}")
    return out
