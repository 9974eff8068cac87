"""``tailhound doctor``: which rules can fire with the signals a recording, live targets (:mod:`.observed`) or a
Prometheus (:mod:`.prometheus`) carry, and what to change so the rest can.

The verdict per rule and the fixes come from :mod:`tailhound.streams.coverage` and :mod:`tailhound.catalog.fixes`;
this module groups the fixes per source to add or change (:func:`fix_groups`), in the terms of the path in use
(agent.yaml, or prometheus.yml and ingest.yaml), naming an exporter's flag even when no rule reads its signals yet.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from tailhound.catalog import Catalog, default_catalog
from tailhound.catalog.fixes import Fix, default_fixbook, fixes_for, signal_note
from tailhound.streams.coverage import (
    RuleCoverage,
    blind_critical,
    coverage,
    summary,
)
from tailhound.streams.ruleset.rulefile import RuleSet

from .observed import Observed, hint_text

MAX_RULES_NAMED = 3  # rules named per source group; the rest are counted


@dataclass
class DoctorReport:
    observed: Observed
    rules: list[RuleCoverage]
    #: the catalog signals the input carries (and the configuration gives)
    present: frozenset[str] = frozenset()
    #: where the telemetry comes from: the fixes are in its terms
    path: str = "agent"

    @property
    def exit_code(self) -> int:
        """1 when a critical rule is blind, else 0."""
        return 1 if blind_critical(self.rules) else 0


def seen_sources(observed: Observed, catalog: Catalog) -> set[str]:
    """The jobs that sent a metric the catalog maps."""
    return {job for job in observed.metrics if observed.mapped(job, catalog)}


def diagnose(
    rules: RuleSet,
    observed: Observed,
    catalog: Catalog | None = None,
    configured: Iterable[str] = (),
    path: str | None = None,
) -> DoctorReport:
    """`configured`: signals the configuration gives (the capacity file's ``capacity.*``); `path`: agent or
    prometheus, the terms of the fixes (default: the input's, :attr:`Observed.path`)."""
    catalog = catalog or default_catalog()
    path = path or observed.path
    sources = seen_sources(observed, catalog)
    present = observed.signals(catalog) | frozenset(configured)
    rules_cov = coverage(rules, present, catalog, sources)
    if path != "agent":
        rules_cov = [
            replace(c, fixes={s: tuple(fixes_for(s, catalog, sources, path=path)) for s in c.fixes}) for c in rules_cov
        ]
    return DoctorReport(observed=observed, rules=rules_cov, present=present, path=path)


@dataclass
class SourceGroup:
    """What one source (to add, or sending) would give: the signals, the rules that need each, what to do."""

    source: str
    name: str
    seen: bool
    #: signal -> the rules that need it (empty: no rule reads it yet)
    signals: dict[str, set[str]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    #: where verbatim lines go (a counters file, a command line) -> (remark, line) in order
    verbatim: dict[str, list[tuple[str | None, str]]] = field(default_factory=dict)
    also: set[str] = field(default_factory=set)
    sends: list[str] = field(default_factory=list)
    #: a sending source: the metrics it did not send (each with the versions that have it)
    unsent: list[str] = field(default_factory=list)

    def add_line(self, line: str) -> None:
        if line not in self.lines:
            self.lines.append(line)

    def add_fix(self, fix: Fix) -> None:
        if fix.line and fix.into:
            entries = self.verbatim.setdefault(fix.into, [])
            if all(line != fix.line for _, line in entries):
                entries.append((fix.remark, fix.line))
        elif self.seen and fix.action.startswith(prefix := f"{self.name} sent no "):
            self.unsent.append(fix.action[len(prefix) :])  # one line for all of them
        else:
            self.add_line(fix.text)

    @property
    def rules(self) -> set[str]:
        return set().union(*self.signals.values()) if self.signals else set()

    def render(self) -> list[str]:
        needed = sorted(s for s, r in self.signals.items() if r)
        extra = sorted(s for s, r in self.signals.items() if not r)
        head = f"{self.name}{' (sending)' if self.seen else ''}: "
        if needed:
            head += f"{', '.join(needed)} ({_rules_text(self.rules)})"
        if extra:
            them = "it" if len(extra) == 1 else "them"
            head += ("; also " if needed else "") + f"{', '.join(extra)} (no rule reads {them} yet)"
        if self.also:
            head += f"; or from {', '.join(sorted(self.also))}"
        out = [head] + ([f"    it sent none of: {'; '.join(self.unsent)}"] if self.unsent else [])
        out += [f"    {line}" for line in self.lines]
        for into, entries in self.verbatim.items():
            out.append(f"    add to {into}:")
            for remark, line in entries:
                out += ([f"        # {remark}"] if remark else []) + [f"        {line}"]
        if self.sends:
            out.append(f"    it sends {', '.join(self.sends)}")
        return out

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "name": self.name,
            "sending": self.seen,
            "signals": {s: sorted(r) for s, r in sorted(self.signals.items())},
            "do": list(self.lines),
            "add": {into: [line for _, line in entries] for into, entries in self.verbatim.items()},
            "unsent": list(self.unsent),
            "sends": list(self.sends),
            "or_from": sorted(self.also),
        }


def _best(fixes: Iterable[Fix]) -> Fix | None:
    fixes = list(fixes)
    return next((f for f in fixes if not f.unavailable), fixes[0] if fixes else None)


def fix_groups(report: DoctorReport, catalog: Catalog | None = None) -> list[SourceGroup]:
    """The missing signals grouped by the source whose fix comes first (sending sources first, then the
    sources that unblock the most rules): the signals of the rules that are not ok, and the signals a sending
    source leaves out because of an exporter default (a flag or a counters line gives them)."""
    catalog = catalog or default_catalog()
    book = default_fixbook()
    seen = seen_sources(report.observed, catalog)
    wanted: dict[str, set[str]] = {}
    fixes: dict[str, tuple[Fix, ...]] = {}
    for c in report.rules:
        if c.status == "ok":
            continue
        for signal in c.missing:
            wanted.setdefault(signal, set()).add(c.rule)
            fixes.setdefault(signal, c.fixes.get(signal) or tuple(fixes_for(signal, catalog, seen, path=report.path)))
    for spec in catalog.signals.values():
        if spec.name in report.present or spec.name in wanted or not seen & set(spec.sources):
            continue
        found = tuple(fixes_for(spec.name, catalog, seen, path=report.path))
        own = next((f for f in found if f.source in seen and not f.unavailable), None)
        if own is not None and own.line:  # a sending exporter leaves it out by default: the flag or line to add
            wanted[spec.name], fixes[spec.name] = set(), found
    groups: dict[str, SourceGroup] = {}
    for signal in sorted(wanted, key=lambda s: (not wanted[s], s)):  # what rules need first
        best = _best(fixes[signal])
        key = best.source if best else ""
        group = groups.get(key)
        if group is None:
            name = book.source(key).name if key in catalog.sources() else (key or "no known source")
            group = groups[key] = SourceGroup(key, name, key in seen)
        group.signals[signal] = wanted[signal]
        if best is not None:
            spec = catalog.spec(signal)
            if group.seen or spec is None or key not in spec.sources:
                group.add_fix(best)
            else:  # a source to add: how once, then what it would send (and any verbatim line)
                group.add_line(book.source(key).how(report.path, key))
                if best.line:
                    group.add_fix(best)
                else:
                    group.sends += [
                        m for m in dict.fromkeys(m.metric for m in spec.sources[key]) if m not in group.sends
                    ]
        group.also.update(
            book.source(f.source).name
            for f in fixes[signal]
            if f is not best and not f.unavailable and f.source and f.source != key
        )
        if (note := signal_note(signal)) is not None:
            group.add_line(f"note: {note}")
    return sorted(groups.values(), key=lambda g: (not g.seen, -len(g.rules), -len(g.signals), g.name))


def _rules_text(rules: set[str]) -> str:
    named = sorted(rules)
    more = f", +{len(named) - MAX_RULES_NAMED} more" if len(named) > MAX_RULES_NAMED else ""
    return f"for {', '.join(named[:MAX_RULES_NAMED])}{more}"


_PATH_TERMS = {
    "agent": "the agent's path: agent.yaml and the exporters it scrapes",
    "prometheus": "the Prometheus path: prometheus.yml, ingest.yaml and the exporters",
}


def render_table(report: DoctorReport, catalog: Catalog | None = None) -> str:
    """Sources, one row per rule, then what to do per source (in the path's terms), a summary."""
    catalog = catalog or default_catalog()
    seen = report.observed
    lines = [
        "sources: "
        + (
            ", ".join(
                f"{job} ({len(seen.nodes.get(job, ()))} node(s), {seen.mapped(job, catalog)} mapped metrics"
                + (f", {seen.failed[job]} failed collections" if seen.failed.get(job) else "")
                + ")"
                for job in sorted(set(seen.metrics) | set(seen.failed))
            )
            or "none"
        )
    ]
    lines += [f"hint: {hint_text(job, source)}" for job, source in sorted(seen.hints.items())]
    lines += [f"note: {note}" for note in seen.notes]
    lines.append("")
    rows = [("RULE", "SEVERITY", "STATUS", "ROOT CAUSE", "MISSING")]
    rows += [(c.rule, c.severity, c.status, c.root_cause, ", ".join(c.missing) or "-") for c in report.rules]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows]
    groups = fix_groups(report, catalog)
    if groups:
        lines += ["", f"to do, per source ({_PATH_TERMS.get(report.path, report.path)}):"]
    for g in groups:
        lines += g.render()
    lines += ["", summary(report.rules)]
    return "\n".join(lines) + "\n"


def render_json(report: DoctorReport, catalog: Catalog | None = None) -> str:
    catalog = catalog or default_catalog()
    seen = report.observed
    data = {
        "path": report.path,
        "sources": {
            job: {
                "nodes": sorted(seen.nodes.get(job, ())),
                "mapped_metrics": seen.mapped(job, catalog),
                "failed_collections": seen.failed.get(job, 0),
            }
            for job in sorted(set(seen.metrics) | set(seen.failed))
        },
        "job_hints": [
            {"job": job, "source": source, "fix": hint_text(job, source)} for job, source in sorted(seen.hints.items())
        ],
        "notes": list(seen.notes),
        "signals": sorted(seen.signals(catalog)),
        "rules": [c.to_dict() for c in report.rules],
        "to_do": [g.to_dict() for g in fix_groups(report, catalog)],
        "summary": summary(report.rules),
        "blind_critical": [c.rule for c in blind_critical(report.rules)],
    }
    return json.dumps(data, indent=2) + "\n"
