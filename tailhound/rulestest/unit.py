"""``tailhound rules test FILE...``: run rule unit tests in the spirit of ``promtool test rules``, report results.

Each test's series become scrape records (:mod:`tailhound.rulestest.inputs`) that go through
:func:`tailhound.streams.replay.replay_records`, the pure core the worker runs, so a test sees what the worker
would. A failed expectation prints the test, the evaluation time and the expected incidents against the open
ones. The file format is :mod:`tailhound.rulestest.unit_file`.
"""

from __future__ import annotations

import glob
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tailhound.capacity_file import CapacityFile
from tailhound.catalog import default_catalog
from tailhound.errors import ConfigFileError, RuleFileError
from tailhound.incident import IncidentEvent
from tailhound.yamlfile import line_of

from .inputs import InputError, NodeSetup, SeriesInput, SeriesRenderer
from .unit_file import (
    IncidentCheck,
    IncidentExpect,
    RuleTest,
    RuleTestFile,
    RuleTestFileError,
    load_test_file,
)

# --- results ----------------------------------------------------------------------------------------------


@dataclass
class CheckFailure:
    test: str
    line: int | None
    eval_time: float
    expected: list[IncidentExpect]
    got: list[IncidentEvent]
    start_ts: float
    rule: str | None = None


@dataclass
class FileResult:
    path: str
    tests: int = 0
    passed: int = 0
    failures: list[CheckFailure] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failures


def resolve_rule_files(spec: list[str] | None, base: Path) -> list[Path]:
    """The rule files a test file names (``default``: the bundled pack; directories: their *.yaml)."""
    from tailhound.resources import default_rules_dir

    out: list[Path] = []
    for item in spec or ["default"]:
        if item == "default":
            out.extend(_yaml_in(default_rules_dir()))
            continue
        pattern = item if Path(item).is_absolute() else str(base / item)
        matches = sorted(glob.glob(pattern)) if glob.has_magic(item) else [pattern]
        if not matches:
            raise FileNotFoundError(f"rule_files: {item!r} matches no file")
        for m in matches:
            p = Path(m)
            if p.is_dir():
                out.extend(_yaml_in(p))
            elif p.is_file():
                out.append(p)
            else:
                raise FileNotFoundError(f"rule_files: {item!r}: no such file or directory")
    return list(dict.fromkeys(p.resolve() for p in out))


def _yaml_in(directory: Path) -> list[Path]:
    found = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not found:
        raise FileNotFoundError(f"rule_files: {directory} holds no *.yaml rule files")
    return found


_RULESETS: dict[tuple[tuple[Path, int, int], ...], Any] = {}


def load_ruleset(files: Iterable[Path]):  # a streams RuleSet
    """A RuleSet of exactly these files (loaded once per run); names defined twice are an error."""
    from tailhound.streams.ruleset.rulefile import RuleSet, load_rule_file

    paths = tuple(files)
    key = tuple((p, *_stamp(p)) for p in paths)  # an edited file is read again
    if (
        key not in _RULESETS
        and len({p.parent for p in paths}) == 1
        and set(paths) == {p.resolve() for p in _yaml_in(paths[0].parent)}
    ):
        from tailhound.streams.ruleset.rulefile import load_rules

        _RULESETS[key] = load_rules(paths[0].parent)  # a whole directory: loaded as the worker loads it
    if key not in _RULESETS:
        rules, seen = [], {}
        for path in paths:
            for rule in load_rule_file(path):
                if rule.name in seen:
                    raise RuleFileError(str(path), None, f"rule {rule.name!r} is also defined in {seen[rule.name]}")
                seen[rule.name] = str(path)
                rules.append(rule)
        if len(_RULESETS) > 32:
            _RULESETS.clear()
        _RULESETS[key] = RuleSet(rules=rules, files=[str(p) for p in paths])
    return _RULESETS[key]


def _stamp(path: Path) -> tuple[int, int]:
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return st.st_mtime_ns, st.st_size


# --- running ----------------------------------------------------------------------------------------------


def open_at(events: Iterable[IncidentEvent], ts: float) -> list[IncidentEvent]:
    """The incidents open at event time `ts`: each incident's latest event at or before it, unless resolved."""
    latest: dict[str, IncidentEvent] = {}
    for ev in events:
        if ev.ts <= ts + 1e-6:
            latest[ev.incident_id] = ev
    return [ev for ev in latest.values() if ev.event != "resolved"]


def member_rules(ev: IncidentEvent) -> list[str]:
    return [r for r in (ev.labels.get("rules") or ev.rule).split(",") if r]


def mismatches(exp: IncidentExpect, ev: IncidentEvent) -> list[str]:
    """The fields of `exp` that `ev` does not match, as ``field: expected X, got Y`` (empty: a match)."""
    out: list[str] = []

    def differ(what: str, want: Any, got: Any) -> None:
        out.append(f"{what}: expected {want!r}, got {got!r}")

    for what, want, got in (
        ("root_cause", None if exp.root_cause is None else str(exp.root_cause), str(ev.root_cause)),
        ("severity", None if exp.severity is None else str(exp.severity), str(ev.severity)),
        ("rule", exp.rule, ev.rule),
        ("transient", exp.transient, ev.transient),
    ):
        if want is not None and want != got:
            differ(what, want, got)
    if exp.rules is not None and not set(exp.rules) <= set(member_rules(ev)):
        differ("rules", sorted(set(exp.rules) - set(member_rules(ev))), member_rules(ev))
    if exp.evidence is not None:
        shown = {e.signal for e in ev.evidence}
        shown |= {re.sub(r"^[a-z]+\((.*)\)$", r"\1", sig) for sig in shown}  # max(gpu.x) shows gpu.x too
        if not set(exp.evidence) <= shown:
            differ("evidence", sorted(set(exp.evidence) - shown), sorted({e.signal for e in ev.evidence}))
    s = exp.scope
    if s is not None:  # the keys written (`node: null`: the incident names no node), others not compared
        got_scope = ev.scope
        for key in ("node", "engine", "model", "endpoint"):
            if key in s.model_fields_set and getattr(s, key) != getattr(got_scope, key):
                differ(f"scope.{key}", getattr(s, key), getattr(got_scope, key))
        for key in ("gpus", "nodes"):
            if key in s.model_fields_set and sorted(getattr(s, key) or []) != sorted(getattr(got_scope, key)):
                differ(f"scope.{key}", sorted(getattr(s, key) or []), sorted(getattr(got_scope, key)))
    return out


def matches(exp: IncidentExpect, ev: IncidentEvent) -> bool:
    return not mismatches(exp, ev)


def pair_up(expected: list[IncidentExpect], got: list[IncidentEvent]) -> bool:
    """Whether every expected incident matches its own open incident and none is left over."""
    if len(expected) != len(got):
        return False

    def assign(i: int, used: frozenset[int]) -> bool:
        if i == len(expected):
            return True
        return any(j not in used and matches(expected[i], ev) and assign(i + 1, used | {j}) for j, ev in enumerate(got))

    return assign(0, frozenset())


def run_test(
    test: RuleTest,
    tf: RuleTestFile,
    ruleset,
    renderer_errors: Callable[[int, InputError], Exception],
) -> tuple[list[tuple[int, IncidentCheck, list[IncidentEvent]]], list[IncidentEvent]]:
    """Replay one test; returns (failed checks with the incidents that were open, every incident event)."""
    from tailhound.streams.replay import replay_records

    interval = test.interval or tf.evaluation_interval
    start = tf.start_ts
    nodes = {name: NodeSetup(n.engine, n.gpu_source, n.model) for name, n in test.nodes.items()}
    renderer = SeriesRenderer(default_catalog(), interval, start, nodes)
    for i, s in enumerate(test.input_series):
        entry = SeriesInput(
            series=s.series,
            values=s.values,
            node=s.node or test.node,
            source=s.source,
            count=s.count,
            buckets=s.buckets,
            type=s.type,
            each={k: v if isinstance(v, list) else [v] for k, v in (s.each or {}).items()},
        )
        try:
            renderer.add(entry)
        except InputError as exc:
            raise renderer_errors(i, exc) from None
    limits = CapacityFile(generated_at=0, source="test file", models=tf.capacity).limits() if tf.capacity else {}
    result = replay_records(renderer.records(), ruleset, sla={"ttft_p99_sla_s": dict(tf.ttft_p99_sla_s), **limits})
    failed = []
    for ci, check in enumerate(test.expect):
        got = open_at(result.events, start + check.eval_time)
        if check.rule is not None:
            got = [ev for ev in got if check.rule in member_rules(ev) or ev.rule == check.rule]
        if not pair_up(list(check.incidents), got):
            failed.append((ci, check, got))
    return failed, result.events


def _check_rule_names(tf: RuleTestFile, known: dict[str, Any], path: str | Path, node: yaml.Node | None) -> None:
    """A rule an expectation names must exist: a misspelt `rule:` filter would make a near miss pass
    whatever the rules do."""
    import difflib

    def check(name: str, loc: list[Any]) -> None:
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise RuleTestFileError(str(path), line_of(node, loc), f"no rule named {name!r} in the rule files{hint}")

    for ti, test in enumerate(tf.tests):
        for ci, c in enumerate(test.expect):
            if c.rule is not None:
                check(c.rule, ["tests", ti, "expect", ci, "rule"])
            for ii, inc in enumerate(c.incidents):
                for name in [inc.rule] if inc.rule else []:
                    check(name, ["tests", ti, "expect", ci, "incidents", ii, "rule"])
                for name in inc.rules or []:
                    check(name, ["tests", ti, "expect", ci, "incidents", ii, "rules"])


def run_file(
    path: str | Path,
    rules: Path | None = None,
    run: re.Pattern[str] | None = None,
    show_events: Callable[[str, list[IncidentEvent], float], None] | None = None,
) -> FileResult:
    """Run every test of one file (those whose name `run` matches); `rules` replaces its rule_files;
    `show_events(test name, events, start)` sees every test's incident events."""
    t0 = time.perf_counter()
    res = FileResult(path=str(path))
    try:
        tf, node = load_test_file(path)
        base = Path(path).resolve().parent
        try:
            files = resolve_rule_files([str(rules.resolve())] if rules is not None else tf.rule_files, base)
        except FileNotFoundError as exc:
            raise RuleTestFileError(str(path), line_of(node, ["rule_files"]), str(exc)) from None
        ruleset = load_ruleset(files)
        _check_rule_names(tf, ruleset.index, path, node)
        for ti, test in enumerate(tf.tests):
            if run is not None and not run.search(test.name):
                continue
            res.tests += 1

            def error(si: int, exc: InputError, ti: int = ti, name: str = test.name) -> Exception:
                loc = ["tests", ti, "input_series", si] + ([exc.where] if exc.where else [])
                col = f" (column {exc.column} of the value)" if exc.column else ""
                return RuleTestFileError(str(path), line_of(node, loc), f"tests[{ti}] {name!r}: {exc}{col}")

            failed, events = run_test(test, tf, ruleset, error)
            if show_events is not None:
                show_events(test.name, events, tf.start_ts)
            for ci, check, got in failed:
                res.failures.append(
                    CheckFailure(
                        test=test.name,
                        line=line_of(node, ["tests", ti, "expect", ci]),
                        eval_time=check.eval_time,
                        expected=list(check.incidents),
                        got=got,
                        start_ts=tf.start_ts,
                        rule=check.rule,
                    )
                )
            if not failed:
                res.passed += 1
    except ConfigFileError as exc:
        res.error = str(exc)
    res.seconds = time.perf_counter() - t0
    return res


# --- the report -------------------------------------------------------------------------------------------


def fmt_duration(seconds: float) -> str:
    """600 -> 10m, 3725 -> 1h2m5s, 0 -> 0s (the notation rule files use)."""
    s = round(seconds)
    sign = "-" if s < 0 else ""
    s = abs(s)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    out = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{sec}s" if sec or not (h or m) else "")
    return sign + out


def describe_incident(ev: IncidentEvent, start_ts: float) -> dict[str, Any]:
    scope = {k: v for k, v in ev.scope.model_dump(mode="json").items() if v not in (None, [], "")}
    return {
        "root_cause": str(ev.root_cause),
        "severity": str(ev.severity),
        "rule": ev.rule,
        "scope": scope,
        "transient": ev.transient,
        "rules": member_rules(ev),
        "evidence": list(dict.fromkeys(e.signal for e in ev.evidence)),
        "opened_at": fmt_duration(ev.opened_at - start_ts),
    }


def _closest_differences(expected: list[IncidentExpect], got: list[IncidentEvent]) -> list[str]:
    """For each expected incident no open one matches: how it differs from the closest one."""
    out = []
    for i, exp in enumerate(expected):
        if not got or any(matches(exp, ev) for ev in got):
            continue
        j, diff = min(((j, mismatches(exp, ev)) for j, ev in enumerate(got)), key=lambda t: len(t[1]))
        out.append(f"exp[{i}] vs got[{j}]: " + "; ".join(diff))
    if len(expected) != len(got):
        out.append(f"expected {len(expected)} open incidents, got {len(got)}")
    return out


def _flow(d: Any) -> str:
    return yaml.safe_dump(d, default_flow_style=True, sort_keys=False, width=10_000).strip()


def format_file_result(res: FileResult) -> str:
    lines = [f"Unit Testing: {res.path}"]
    if res.error is not None:
        lines.append(f"  ERROR: {res.error}")
        return "\n".join(lines) + "\n"
    if res.ok:
        lines.append(f"  SUCCESS ({res.passed} tests, {res.seconds:.2f} s)")
        return "\n".join(lines) + "\n"
    lines.append(f"  FAILED ({len({f.test for f in res.failures})} of {res.tests} tests):")
    for f in res.failures:
        where = f"{res.path}:{f.line}" if f.line else res.path
        lines.append(f"    test: {f.test}  ({where})")
        rule = f", rule: {f.rule}" if f.rule else ""
        lines.append(f"    eval_time: {fmt_duration(f.eval_time)}{rule}")
        lines.append("        exp:" + ("" if f.expected else " []"))
        lines.extend(f"          - {_flow(e.describe())}" for e in f.expected)
        lines.append("        got:" + ("" if f.got else " []"))
        lines.extend(f"          - {_flow(describe_incident(ev, f.start_ts))}" for ev in f.got)
        diffs = _closest_differences(f.expected, f.got)
        if diffs:
            lines.append("        diff:")
            lines.extend(f"          {d}" for d in diffs)
    return "\n".join(lines) + "\n"


def bundled_tests() -> list[Path]:
    """The bundled rule pack's own tests (``tests/*.yaml`` next to its rule files)."""
    from tailhound.resources import default_rules_dir

    found = sorted((default_rules_dir() / "tests").glob("*.yaml"))
    if not found:
        raise RuleTestFileError(str(default_rules_dir() / "tests"), None, "no rule tests here: name test files")
    return found
