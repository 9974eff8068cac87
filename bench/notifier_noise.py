"""Notifier noise reduction: rule firings -> incident events -> notifications, on the scenario suite.

Method: every scenario of ``tests/scenarios/test_playbook.py`` (each fault the simulator can produce,
plus healthy swings, a short blip and an engine restart; a 2-node fleet, the fault from minute 25 for
10 minutes) is replayed through the default rule pack by :func:`tailhound.streams.replay.replay_records` (the
worker's own steps: the node stage and the model stage; same simulator and seed; no streams code
changed). The suite stops at minute 40; here each scenario runs to minute 60 (:data:`MINUTES`) so
that its incidents resolve (they do between minute 40 and 52) and the resolves are counted too.

- **Rule firings**: every state streams stores (the dict the worker keeps in its table per node, or per
  model for the model stage; written whenever a rule's firing entities change) is compared with the
  previous one for the same key: every ``(node, rule, entity)`` that appears among a rule's firing
  entities is one firing start (a GPU, an engine, the node or the model; a re-fire after it stopped
  counts again). Symptom rules that attach to an incident instead of opening their own are counted
  like every other rule. The stores are observed by wrapping ``MemoryStateStore.__setitem__`` during
  the replay (:func:`observe_firings`).
- **Incident events**: what streams emits (opened / updated / resolved) and the incidents they belong to.
- **Notifications**: what :class:`tailhound.notifier.pipeline.Notifier` (the pure core the service runs) creates
  with the default config (grouping by incident, ``wait`` 30 s, ``interval`` 5 min, ``repeat`` 4 h, flap
  control on) and one Slack receiver (bot mode: the page is a new channel message, later notifications
  edit it and reply in its thread). It is driven in event time: ``ingest([event], now=event.ts)``, and
  ``flush(now)`` at every event and at every group's next flush time (what a very fine tick gives),
  until 30 minutes after the replay ends; every notification is marked delivered at once.

The burst rows feed the core 50 incidents with the same root cause and node, opened 0.1 s apart
(GPUs 0-7 in turn), with ``grouping.by: [root_cause, node]`` and, for comparison, the default
``by: [incident]``.
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import iter_records
from tailhound.incident import IncidentEvent
from tailhound.notifier.config import NotifierConfig, parse_config
from tailhound.notifier.pipeline import Notifier
from tailhound.streams.processor import MemoryStateStore
from tailhound.streams.replay import replay_records
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules

RULES = Path(__file__).resolve().parent.parent / "rules"
SLACK_CONFIG = (
    "route: {receiver: slack}\n"
    "receivers: [{type: slack, name: slack, token: {env: SLACK_BOT_TOKEN}, channel: '#alerts'}]\n"
)
#: fleet minutes replayed per scenario (the suite's 40 plus 20, so that incidents resolve)
MINUTES = 60.0
#: how long the notifier keeps running after the replay's last snapshot (a resolve still goes out)
DRAIN_S = 1800.0
BURST = 50


def scenarios() -> dict[str, Any]:
    from tests.scenarios.test_playbook import SCENARIOS

    return dict(SCENARIOS)


def notifier_config(by: list[str] | None = None) -> NotifierConfig:
    cfg = SLACK_CONFIG if by is None else f"grouping: {{by: [{', '.join(by)}]}}\n" + SLACK_CONFIG
    return parse_config(cfg, "<bench notifier config>")


# --- streams side --------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def observe_firings() -> Iterator[list[tuple[str, str, str, float]]]:
    """Collect every firing start (state key, rule, entity, event time) from the states streams writes.

    Streams stores a state whenever a rule's firing entities change (``tailhound.streams.processor``); replay's
    stores (the node stage's and the model stage's) are :class:`MemoryStateStore`, whose
    ``__setitem__`` is wrapped here while the block runs (observation only; restored afterwards).
    """
    starts: list[tuple[str, str, str, float]] = []
    current: dict[tuple[int, str], set[tuple[str, str]]] = {}
    original = MemoryStateStore.__setitem__

    def observed(store: MemoryStateStore, node: str, state: dict) -> None:
        original(store, node, state)
        now = {
            (rule, entity) for rule, rs in (state or {}).get("rules", {}).items() for entity in (rs.get("firing") or {})
        }
        key = (id(store), node)
        for rule, entity in sorted(now - current.get(key, set())):
            starts.append((node, rule, entity, float((state or {}).get("persisted_at") or 0.0)))
        current[key] = now

    MemoryStateStore.__setitem__ = observed  # type: ignore[method-assign]
    try:
        yield starts
    finally:
        MemoryStateStore.__setitem__ = original  # type: ignore[method-assign]


def replay_with_firings(records, rules: RuleSet) -> tuple[list[IncidentEvent], list[tuple[str, str, str, float]]]:
    """:func:`tailhound.streams.replay.replay_records` as it is, plus every firing start it stored."""
    with observe_firings() as starts:
        events = replay_records(records, rules).events
    return events, list(starts)


# --- notifier side -------------------------------------------------------------------------------------------------
def notify(events: list[IncidentEvent], config: NotifierConfig, until: float) -> list[Any]:
    """Every notification the core creates for `events`, driven in event time up to `until`."""
    core = Notifier(config)
    created: list[Any] = []

    def flush(now: float) -> None:
        created.extend(core.flush(now).created)
        for gid, receiver, n, _receipt in core.deliverable(now):
            core.delivered(gid, receiver, n.sequence, {"channel": "C0123", "ts": f"{n.ts:.6f}"}, now)

    def advance(to: float) -> None:
        for _ in range(100_000):
            due = core.next_flush()
            if due is None or due > to:
                return
            flush(due)
        raise RuntimeError("the notifier kept asking to be flushed at the same time")

    for ev in sorted(events, key=lambda e: e.ts):
        advance(ev.ts)
        core.ingest([ev], ev.ts)
        flush(ev.ts)
    advance(until)
    return created


def _kinds(items, attr: str) -> dict[str, int]:
    c = Counter(getattr(i, attr) for i in items)
    return {k: c.get(k, 0) for k in ("opened", "updated", "resolved")}


def scenario_row(name: str, rules: RuleSet, config: NotifierConfig, minutes: float = MINUTES) -> dict:
    sc = scenarios()[name]
    sim = FleetSimulator(SimConfig(nodes=2, seed=3), [FaultSpec.parse(sc.fault)] if sc.fault else [])
    t0 = time.perf_counter()
    events, starts = replay_with_firings(iter_records(sim, minutes), rules)
    replay_s = time.perf_counter() - t0
    end = sim.config.start_ts + minutes * 60
    notes = notify(events, config, end + DRAIN_S)
    by_rule = Counter(rule for _, rule, _, _ in starts)
    symptom_rules = {r.name for r in rules.rules if r.symptom}
    opened = {e.incident_id: e for e in events if e.event == "opened"}
    page_delay = [n.ts - n.lead.opened_at for n in notes if n.kind == "opened"]
    return {
        "name": name,
        "fault": sc.fault,
        "replay_s": replay_s,
        "firings": len(starts),
        "rules_fired": dict(sorted(by_rule.items())),
        "symptom_firings": sum(c for r, c in by_rule.items() if r in symptom_rules),
        "rule_node_firings": len({(node, rule) for node, rule, _, _ in starts}),
        "events": _kinds(events, "event"),
        "incidents": len(opened),
        "root_causes": sorted({str(e.root_cause) for e in events}),
        "notifications": _kinds(notes, "kind"),
        "page_delay_s": statistics.median(page_delay) if page_delay else None,
    }


def burst_row(by: list[str], resolve_after_s: float | None = None) -> dict:
    from tests.notifier.factories import T0, incident_event

    events = []
    for i in range(BURST):
        gpu = str(i % 8)
        iid = f"inc-burst-{i:03d}"
        events.append(
            incident_event(
                incident_id=iid,
                ts=T0 + 0.1 * i,
                opened_at=T0 + 0.1 * i,
                gpus=(gpu,),
                node="gpu-node-3",
                root_cause="gpu-thermal-throttle",
            )
        )
        if resolve_after_s is not None:
            at = T0 + resolve_after_s + 0.1 * i
            events.append(
                incident_event(
                    incident_id=iid,
                    event="resolved",
                    sequence=2,
                    ts=at,
                    opened_at=T0 + 0.1 * i,
                    gpus=(gpu,),
                    node="gpu-node-3",
                    root_cause="gpu-thermal-throttle",
                )
            )
    last = max(e.ts for e in events)
    notes = notify(events, notifier_config(by), last + DRAIN_S)
    label = f"{BURST} related incidents in 5 s (same root cause and node), by [{', '.join(by)}]"
    if resolve_after_s is not None:
        label += f", all resolved {resolve_after_s / 60:g} min later"
    return {
        "name": label,
        "firings": BURST,
        "events": _kinds(events, "event"),
        "incidents": BURST,
        "notifications": _kinds(notes, "kind"),
        "groups": len({n.group_id for n in notes}),
    }


def run(names: list[str] | None = None, burst: bool = True, minutes: float = MINUTES) -> dict:
    rules = load_rules(RULES)
    config = notifier_config()
    names = names or list(scenarios())
    rows = []
    for name in names:
        rows.append(scenario_row(name, rules, config, minutes))
        r = rows[-1]
        print(
            f"  {name}: {r['firings']} firings -> {sum(r['events'].values())} incident events -> "
            f"{sum(r['notifications'].values())} notifications ({r['replay_s']:.1f} s)",
            file=sys.stderr,
        )
    bursts = []
    if burst:
        bursts = [
            burst_row(["root_cause", "node"]),
            burst_row(["incident"]),
            burst_row(["root_cause", "node"], resolve_after_s=600.0),
        ]
    return {
        "rows": rows,
        "bursts": bursts,
        "minutes": minutes,
        "config": config.grouping.model_dump(),
        "flap": config.flap.model_dump(),
    }


def _total(n: dict[str, int]) -> int:
    return sum(n.values())


def _split(n: dict[str, int]) -> str:
    return f"{_total(n)} ({n['opened']}/{n['updated']}/{n['resolved']})"


def _ratio(firings: int, notes: int) -> str:
    if notes == 0:
        return "-" if firings == 0 else f"{firings} -> 0"
    return f"{firings / notes:.1f}x"


def totals(rows: list[dict]) -> dict:
    kinds = ("opened", "updated", "resolved")
    return {
        "firings": sum(r["firings"] for r in rows),
        "symptom_firings": sum(r["symptom_firings"] for r in rows),
        "rule_node_firings": sum(r["rule_node_firings"] for r in rows),
        "events": {k: sum(r["events"][k] for r in rows) for k in kinds},
        "incidents": sum(r["incidents"] for r in rows),
        "notifications": {k: sum(r["notifications"][k] for r in rows) for k in kinds},
    }


def report(result: dict) -> str:
    rows = result["rows"]
    lines = [
        f"Scenarios: 2 nodes, {result['minutes']:g} fleet minutes each, default rules; notifier core with the "
        "default config and one Slack receiver, in event time. o/u/r = opened/updated/resolved; a page is "
        "an `opened` notification (a new Slack message; updates and resolves edit it and reply in its "
        "thread).",
        "",
        "| scenario | rule firings: entities (rule x node) | of which symptom rules | rules that fired "
        "| incident events o/u/r | incidents | notifications o/u/r | firings per notification "
        "| firings per page |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]

    def row(name: str, r: dict, rules: str) -> str:
        notes = r["notifications"]
        return (
            f"| {name} | {r['firings']} ({r['rule_node_firings']}) | {r['symptom_firings']} | {rules} "
            f"| {_split(r['events'])} | {r['incidents']} | {_split(notes)} | {_ratio(r['firings'], _total(notes))} "
            f"| {_ratio(r['firings'], notes['opened'])} |"
        )

    for r in rows:
        rules = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in r["rules_fired"].items()) or "-"
        lines.append(row(r["name"], r, rules))
    if len(rows) > 1:
        t = totals(rows)
        lines.append(row(f"**all {len(rows)} scenarios**", t, "-"))
    for b in result["bursts"]:
        b = {**b, "rule_node_firings": "-", "symptom_firings": "-"}
        lines.append(row(b["name"], b, "(synthetic incidents)"))
    delays = [r["page_delay_s"] for r in rows if r.get("page_delay_s") is not None]
    g = result["config"]
    lines += [
        "",
        f"Default grouping: by {g['by']}, wait {g['wait']:g} s, interval {g['interval']:g} s, "
        f"repeat {g['repeat']:g} s; flap window {result['flap']['window']:g} s, max flips "
        f"{result['flap']['max_flips']}, min flip interval {result['flap']['min_flip_interval']:g} s."
        + (
            f" Page after the incident opened (event time, median per scenario): {min(delays):g}-{max(delays):g} s."
            if delays
            else ""
        ),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run(sys.argv[1:] or None)))
