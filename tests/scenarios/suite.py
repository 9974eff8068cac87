"""The real-fleet scenario suite (issue 12): scenario definitions, their target expectations, and the one
pure function that scores a replay against them (used by test_real_fleets.py and ``python -m bench.scenarios``).

Each scenario is a simulated fleet (2-4 nodes, "realistic" noise: fleet-wide traffic swings and bursts,
request-mix and inlet-temperature drift, probe outliers, retransmit blips, missed scrapes) with zero, one
or two faults, 40 minutes of fleet time (faults from minute 25: rolling baselines need 20), replayed through
the default rule pack. The trace negatives drive arrivals and token mix from real request traces
(../shared/data/traces, docs/simulator.md); without the files they skip locally and fail under CI. The
expectations are the targets, what a correct system reports: one incident per fault, at the fault's place
(a node and its GPUs, or the whole model/fleet for a fleet-wide fault), with the right root cause from its
first event; nothing at all for the negatives.

Scoring (:func:`score`), per fault:

- an incident (all events sharing an ``incident_id``) belongs to a fault when it opened inside the fault's
  window (start .. end + :data:`GRACE_S`) and at one of its places: a node-scope incident on one of the
  fault's nodes, or a model- or fleet-scope incident (those cover every node). When two faults claim an
  incident, the one it names correctly (cause and place) wins, then the earlier fault. An incident no
  fault claims is *spurious*;
- **right cause and place**: one of its incidents ends with the expected root cause at the expected
  place (node, and the GPU set when one is expected; for a fleet-wide fault: model or fleet scope);
- **time to detect**: fault start -> the first ``opened`` event of its incidents (minutes);
- **incidents per fault**: how many incidents it got (node-, model- and fleet-scope all count: a fault on
  4 nodes that opens one model-scope incident listing them is 1, four node incidents are 4);
- **first cause right**: of its incidents, how many name their final root cause in their first event;
- **wrong causes**: its incidents whose final root cause is not the expected one, plus spurious
  incidents, plus any incident of a negative (a fault that must not page).

A scenario marked ``ambiguous`` is one whose causes the recorded signals cannot separate (a TGI surge and a
retry storm): an incident names a cause when it is the root cause or the runner-up of its differential
(``IncidentEvent.differential``), so the target is "never a confident wrong cause; the right cause is the
lead or the named runner-up".
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.faults import fault_nodes
from tailhound.agents.simulator.recording import iter_records
from tailhound.incident import IncidentEvent
from tailhound.streams.replay import replay_records
from tailhound.streams.ruleset.rulefile import load_rules

RULES = Path(__file__).resolve().parents[2] / "rules"
#: The public request traces (../shared/data/traces next to the checkout; not in the wheel, see its README);
#: TAILHOUND_TRACES_DIR points elsewhere.
TRACES = Path(os.environ.get("TAILHOUND_TRACES_DIR") or Path(__file__).resolve().parents[3] / "shared/data/traces")

FAULT_AT_MIN = 25
MINUTES = 40
#: An incident opened this long after its fault ended still belongs to it (a slow rule, a resolve lag).
GRACE_S = 300.0
#: 2026-01-01 05:00 UTC: the off-peak window rolling deploys are scheduled in (~53 % of the daily peak).
DEPLOY_WINDOW_TS = 1_767_243_600.0
#: The aggregate targets (issue 12; first cause and time to page: issue 27).
TARGET_INCIDENTS_PER_FAULT = 1.1
TARGET_FIRST_CAUSE_RIGHT = 0.95
TARGET_MEDIAN_PAGE_MIN = 2.0  # median time from a fault's onset to its first page
TARGET_MAX_PAGE_MIN = 6.0  # ... and the slowest fault's
FLEET = "fleet"  # Expect.place of a fleet-wide fault: one model- or fleet-scope incident


@dataclass(frozen=True)
class Expect:
    """What a correct system opens for one fault."""

    root_cause: str
    place: str  # a node name, or FLEET (one model- or fleet-scope incident)
    gpus: tuple[str, ...] = ()  # the GPU set the final event names (empty: not checked)
    max_delay_min: float = 5.0  # at most TARGET_MAX_PAGE_MIN

    def describe(self) -> str:
        where = "model/fleet" if self.place == FLEET else self.place
        if self.gpus:
            where += " GPUs " + ",".join(self.gpus)
        return f"{self.root_cause} @ {where}"


@dataclass(frozen=True)
class Fault:
    spec: str
    expect: Expect | None  # None: a negative (must open nothing)

    @property
    def fault(self) -> FaultSpec:
        return FaultSpec.parse(self.spec)


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # the scenario class
    faults: tuple[Fault, ...]
    config: dict = field(default_factory=dict)  # SimConfig keywords on top of the suite's defaults
    minutes: float = MINUTES
    #: what today's rules/correlation get wrong (the test is xfail(strict) while this is set)
    gap: str | None = None
    #: the telemetry cannot separate its cause from a look-alike: the runner-up counts (module docstring)
    ambiguous: bool = False

    def sim_config(self) -> SimConfig:
        # vLLM's API server always exports http_requests_total: so does every scenario
        return SimConfig(**{"nodes": 2, "seed": 3, "noise": "realistic", "http_metrics": True, **self.config})

    @property
    def negative(self) -> bool:
        return all(f.expect is None for f in self.faults)


def _at(minutes: float) -> str:
    return f"{minutes:g}m"


def _trace(name: str) -> str:
    return str(TRACES / f"azure_llm_2023_{name}.csv")


F = FAULT_AT_MIN
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("healthy", "negative: healthy fleet with realistic noise", (), {"nodes": 4}),
        Scenario("short-blip", "negative: one slow tick", (Fault(f"short-blip@{_at(F)}:node=gpu-node-1", None),)),
        Scenario(
            "warm-gpu",
            "negative: a GPU 6.5 C warmer than its peers, no clock drop",
            (Fault(f"warm-gpu@{_at(F - 5)}:node=gpu-node-2", None),),
        ),
        Scenario(
            "rolling-deploy",
            "negative: engines restart one by one (counters reset, scrape gaps)",
            (Fault(f"rolling-deploy@{_at(F - 3)}+12m", None),),
            {"nodes": 4, "start_ts": DEPLOY_WINDOW_TS},
        ),
        Scenario(
            "dcgm-default-thermal",
            "default dcgm-exporter counters",
            (
                Fault(
                    f"thermal-throttle@{_at(F)}+10m:node=gpu-node-2:gpus=3,5",
                    Expect("gpu-thermal-throttle", "gpu-node-2", ("3", "5")),
                ),
            ),
            {"dcgm_fields": "default"},
        ),
        # tail-latency-bandwidth-bound holds 1-5 minutes (shorter the further TPOT P95 is past 2x its baseline, which
        # grows as the 5-minute window fills); until then nothing opens: the node got no more work (no capacity),
        # and the residual node-slowdown waits for the better cause
        Scenario(
            "dcgm-default-membw",
            "default dcgm-exporter counters",
            (
                Fault(
                    f"memory-bandwidth-saturation@{_at(F)}+10m:node=gpu-node-1",
                    Expect("gpu-memory-bandwidth", "gpu-node-1"),
                ),
            ),
            {"dcgm_fields": "default"},
        ),
        Scenario(
            "surge-fleet",
            "fleet-wide traffic surge",
            (Fault(f"traffic-surge@{_at(F)}+10m", Expect("capacity", FLEET)),),
            {"nodes": 4},
        ),
        Scenario(
            "network-path-fleet",
            "fleet-wide network path",
            (Fault(f"network-path-degradation@{_at(F)}+10m:node=*", Expect("network-path", FLEET)),),
            {"nodes": 4},
        ),
        Scenario(
            "retry-storm-fleet",
            "retry storm (fleet-wide)",
            (Fault(f"retry-storm@{_at(F)}+10m", Expect("retry-storm", FLEET)),),
            {"nodes": 4},
        ),
        Scenario(
            "retry-storm-node",
            "retry storm (one node's clients)",
            (Fault(f"retry-storm@{_at(F)}+10m:node=gpu-node-1", Expect("retry-storm", "gpu-node-1")),),
        ),
        Scenario(
            "tgi-thermal",
            "TGI fleet",
            (
                Fault(
                    f"thermal-throttle@{_at(F)}+10m:node=gpu-node-2:gpus=3,5",
                    Expect("gpu-thermal-throttle", "gpu-node-2", ("3", "5")),
                ),
            ),
            {"engine": "tgi"},
        ),
        Scenario(
            "slow-node",
            "a node slower than its peers at the same load, no hardware signature",
            (Fault(f"slow-node@{_at(F)}+10m:node=gpu-node-2", Expect("node-degraded", "gpu-node-2")),),
            {"nodes": 3},
        ),
        # minute 3: no rolling baseline yet (20 minutes), only the other engines of the model can tell
        Scenario(
            "slow-node-early",
            "a slow node before any baseline exists (peers only)",
            (Fault("slow-node@3m+20m:node=gpu-node-2", Expect("node-degraded", "gpu-node-2")),),
            {"nodes": 3},
            minutes=30,
        ),
        # TGI answers the surge's excess with 429: from aggregate counters a retry storm looks the same
        Scenario(
            "tgi-surge",
            "TGI fleet",
            (Fault(f"traffic-surge@{_at(F)}+10m", Expect("capacity", FLEET)),),
            {"engine": "tgi"},
            ambiguous=True,
        ),
        Scenario("tgi-healthy", "TGI fleet (negative)", (), {"engine": "tgi"}),
        Scenario(
            "two-faults",
            "two simultaneous faults on different nodes",
            (
                Fault(
                    f"thermal-throttle@{_at(F)}+10m:node=gpu-node-1:gpus=3,5",
                    Expect("gpu-thermal-throttle", "gpu-node-1", ("3", "5")),
                ),
                Fault(f"kv-cache-pressure@{_at(F)}+10m:node=gpu-node-2", Expect("kv-cache-pressure", "gpu-node-2")),
            ),
            {"nodes": 3},
        ),
        # the 5-minute mean of generated tokens passes 1000 ~4.25 min in; the queue wait is then far past its 0.2 s
        # bound (strong evidence), so the rule holds its `min_for` (30 s), not its `for` (3 minutes)
        Scenario(
            "long-prompt-hol",
            "long-prompt head-of-line blocking on one node",
            (
                Fault(
                    f"long-prompt-hol@{_at(F)}+10m:node=gpu-node-2",
                    Expect("head-of-line-blocking", "gpu-node-2", max_delay_min=TARGET_MAX_PAGE_MIN),
                ),
            ),
        ),
        # --- issue 27: hardware errors, flapping, the batch knee, scale-out lag ---
        # off-peak (like the rolling deploy): the other engines absorb the dead one's traffic; at peak the queue
        # they build is a second, capacity incident (correlation does not yet fold it into the hardware error)
        Scenario(
            "gpu-xid-error",
            "a GPU's double-bit ECC error (XID 48, a remapped row) takes its engine down",
            (
                Fault(
                    f"gpu-xid-error@{_at(F)}+10m:node=gpu-node-2:gpus=4",
                    Expect("gpu-hardware-error", "gpu-node-2", ("4",), max_delay_min=1),
                ),
            ),
            {"nodes": 3, "dcgm_fields": "default", "start_ts": DEPLOY_WINDOW_TS},
        ),
        # SGLang: KV usage is sglang:token_usage, preemptions its retractions (no engine label: the instance)
        Scenario(
            "sglang-kv-pressure",
            "SGLang fleet",
            (Fault(f"kv-cache-pressure@{_at(F)}+10m:node=gpu-node-2", Expect("kv-cache-pressure", "gpu-node-2")),),
            {"engine": "sglang"},
        ),
        # --- engine-side causes of issue 27: long prompts, longer outputs, an unbalanced load balancer
        Scenario(
            "long-prompt-prefill",
            "long prompts prefilled in one piece (no chunked prefill) on one node",
            (
                Fault(
                    f"long-prompt-prefill@{_at(F)}+10m:node=gpu-node-2", Expect("head-of-line-blocking", "gpu-node-2")
                ),
            ),
        ),
        Scenario(
            "generation-length-growth",
            "a canary build whose outputs are twice as long, same arrivals",
            (
                Fault(
                    f"generation-length-growth@{_at(F)}+10m:node=gpu-node-2",
                    Expect("generation-length-growth", "gpu-node-2"),
                ),
            ),
        ),
        # the balancer sends gpu-node-2 1.8x its share: it queues (its own view: capacity) while its peers idle
        Scenario(
            "load-imbalance",
            "one replica gets 1.8x its share, its peers idle (round-robin, stickiness)",
            (Fault(f"load-imbalance@{_at(F)}+10m:node=gpu-node-2", Expect("load-imbalance", "gpu-node-2")),),
            {"nodes": 3},
        ),
        # real request arrivals and token mixes (Azure LLM inference 2023), the busiest minute at 80 % of capacity
        # (agents/simulator/trace.py): the conversation trace rises 60 % over minutes 22-37; the code trace, started
        # at its minute 46 (it loops at 57.3), bursts from nothing to 8.8x, 11.7x and 6.6x its mean within 15 s at
        # minutes 20.8, 25.5 and 34.8, after the rolling baselines have their 20 minutes
        Scenario(
            "trace-conv-healthy",
            "negative: healthy fleet under the Azure conversation trace",
            (),
            {"nodes": 4, "load_trace": _trace("conv")},
        ),
        Scenario(
            "trace-code-healthy",
            "negative: healthy fleet under the Azure code trace (on/off bursts)",
            (),
            {"nodes": 4, "load_trace": _trace("code"), "load_trace_start_s": 46 * 60.0},
        ),
        # the GPUs' power limit cut to 500 W (of 700) at minute 20: under load the SM clock drops (clock-event reason
        # sw_power_cap), temperatures stay normal; decode is memory-bound, so the engines lose a few percent only
        Scenario(
            "power-capped",
            "negative: power-capped fleet near its daily peak (sw_power_cap, normal temperatures)",
            (Fault(f"power-cap@{_at(F - 5)}", None),),
            {"nodes": 4},
        ),
        # /health queues behind inference: under load it answers in ~2.5 s, then times out; the balancer removes
        # the node for 45 s and re-adds it, every 2 minutes (agents/simulator/faults.py). The second drop of its
        # traffic (~3.25 min in) is what tells flapping from one removal
        Scenario(
            "health-check-flap",
            "the load balancer keeps removing and re-adding a node (slow /health)",
            (
                Fault(
                    f"health-check-flap@{_at(F)}+10m:node=gpu-node-2",
                    Expect("health-check-flapping", "gpu-node-2", max_delay_min=4),
                ),
            ),
            {"nodes": 3},
        ),
        Scenario(
            "health-check-one-removal",
            "negative: the balancer removes a node once and re-adds it",
            (Fault(f"health-check-flap@{_at(F)}+2m:node=gpu-node-2", None),),
            {"nodes": 3},
        ),
        # a fleet-wide surge; a minute in, the autoscaler adds gpu-node-4, which loads its weights for 4 minutes
        # (scraped, serving nothing: agents/simulator/scale_out.py): the capacity incident says the replica is not
        # ready (scale-out-not-ready) and asks for a warm pool
        Scenario(
            "surge-scale-out",
            "an autoscaler adds a node mid-surge; it is not ready for 4 minutes",
            (
                Fault(f"traffic-surge@{_at(F)}+10m", Expect("capacity", FLEET)),
                Fault(f"scale-out@{_at(F + 1)}:node=gpu-node-4", None),
            ),
            {"nodes": 4},
        ),
    )
}

#: What today's rules and correlation get wrong, per scenario (issue 12). Each one makes the scenario's test
#: xfail(strict): it turns into a loud XPASS failure once fixed, and then its line goes.
GAPS: dict[str, str] = {}
#: Why the aggregate targets are not met today (None once they are).
AGGREGATE_GAP: str | None = None
SCENARIOS = {name: replace(sc, gap=GAPS.get(name)) for name, sc in SCENARIOS.items()}


def missing_trace(scenario: Scenario) -> str | None:
    """Why the scenario cannot run here (its load trace is missing), or None."""
    trace = scenario.config.get("load_trace")
    if trace is None or Path(trace).is_file():
        return None
    return (
        f"{scenario.name}: needs the request trace {trace} (the public traces live in ../shared/data/traces "
        "next to the checkout, see its README; TAILHOUND_TRACES_DIR points elsewhere)"
    )


def replay(scenario: Scenario, rules_dir: Path = RULES) -> tuple[list[IncidentEvent], float]:
    """Simulate the scenario and replay it through the rule pack: (incident events, fleet start time)."""
    missing = missing_trace(scenario)
    if missing:
        raise FileNotFoundError(missing)
    sim = FleetSimulator(scenario.sim_config(), [f.fault for f in scenario.faults])
    result = replay_records(iter_records(sim, scenario.minutes), load_rules(rules_dir))
    return result.events, sim.config.start_ts


# --- scoring ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Incident:
    incident_id: str
    events: tuple[IncidentEvent, ...]
    #: of an ambiguous scenario: the runner-up of an event's differential counts as named
    ambiguous: bool = False

    def named(self, event: IncidentEvent) -> set[str]:
        """The causes an event names: its root cause, and in an ambiguous scenario its runner-up."""
        runner = event.runner_up if self.ambiguous else None
        return {str(event.root_cause)} | ({str(runner)} if runner else set())

    @property
    def first_right(self) -> bool:
        """The first event already names the final cause (or, ambiguous, the final lead is among what it names)."""
        return self.final_cause in self.named(self.events[0])

    @property
    def opened(self) -> float:
        return self.events[0].ts

    @property
    def first_cause(self) -> str:
        return str(self.events[0].root_cause)

    @property
    def final_cause(self) -> str:
        return str(self.events[-1].root_cause)

    @property
    def place(self) -> str:
        """Where the incident ended up: its node, or FLEET for a model- or fleet-scope incident (correlation
        may fold node incidents into one model-scope incident; the final event says where it is)."""
        return self.events[-1].scope.node or FLEET

    @property
    def nodes(self) -> set[str]:
        """Every node the incident named on the way (its node, or the nodes a rolled-up incident lists)."""
        out = {e.scope.node for e in self.events if e.scope.node}
        for e in self.events:
            out.update(getattr(e.scope, "nodes", None) or ())
        return out

    def describe(self) -> str:
        scope = self.events[-1].scope
        where = "model/fleet" if self.place == FLEET else self.place
        listed = getattr(scope, "nodes", None)
        if self.place == FLEET and listed:
            where += f" ({len(listed)} nodes)"
        if scope.gpus:
            where += " GPUs " + ",".join(scope.gpus)
        first = "" if self.first_cause == self.final_cause else f" (opened as {self.first_cause})"
        runner = self.events[-1].runner_up
        close = f" (runner-up {runner})" if runner else ""
        return f"{self.final_cause}{close} @ {where}{first}"

    def matches(self, expect: Expect) -> bool:
        if expect.root_cause not in self.named(self.events[-1]) or self.place != expect.place:
            return False
        return not expect.gpus or set(self.events[-1].scope.gpus) == set(expect.gpus)


@dataclass(frozen=True)
class FaultScore:
    spec: str
    expect: Expect | None
    incidents: tuple[Incident, ...]
    right: bool  # right cause and place
    detect_min: float | None  # fault start -> first opened
    first_right: int  # incidents whose first event names the final cause
    wrong: tuple[str, ...]  # incidents with a wrong final cause (all incidents of a negative)

    @property
    def met(self) -> bool:
        if self.expect is None:
            return not self.incidents
        return (
            self.right
            and len(self.incidents) == 1
            and self.first_right == 1
            and not self.wrong
            and self.detect_min is not None
            and self.detect_min <= self.expect.max_delay_min
        )


@dataclass(frozen=True)
class ScenarioScore:
    name: str
    faults: tuple[FaultScore, ...]
    spurious: tuple[Incident, ...]  # incidents no fault claims

    @property
    def incidents(self) -> list[Incident]:
        return [i for f in self.faults for i in f.incidents] + list(self.spurious)

    @property
    def wrong(self) -> list[str]:
        return [w for f in self.faults for w in f.wrong] + [f"{i.describe()} (no fault)" for i in self.spurious]

    @property
    def met(self) -> bool:
        return not self.spurious and all(f.met for f in self.faults)

    def problems(self) -> list[str]:
        """What keeps this scenario from its target, in words."""
        out: list[str] = []
        for f in self.faults:
            if f.expect is None:
                out += [f"{f.spec}: opened {i.describe()}" for i in f.incidents]
                continue
            got = "; ".join(i.describe() for i in f.incidents) or "nothing"
            if not f.right:
                out.append(f"{f.spec}: expected {f.expect.describe()}, got {got}")
            elif len(f.incidents) != 1:
                out.append(f"{f.spec}: {len(f.incidents)} incidents ({got})")
            if f.first_right < len(f.incidents):
                out.append(f"{f.spec}: first event names another cause ({got})")
            if f.wrong and f.right:
                out.append(f"{f.spec}: wrong cause {', '.join(f.wrong)}")
            if f.right and (f.detect_min is None or f.detect_min > f.expect.max_delay_min):
                out.append(f"{f.spec}: detected after {f.detect_min} min (> {f.expect.max_delay_min})")
        out += [f"spurious: {i.describe()}" for i in self.spurious]
        return out


def incidents_of(events: Iterable[IncidentEvent], ambiguous: bool = False) -> list[Incident]:
    by_id: dict[str, list[IncidentEvent]] = {}
    for e in events:
        by_id.setdefault(e.incident_id, []).append(e)
    return sorted((Incident(k, tuple(v), ambiguous) for k, v in by_id.items()), key=lambda i: (i.opened, i.incident_id))


def _window(f: FaultSpec, interval_s: float) -> tuple[float, float]:
    end = f.start_s + interval_s if f.one_shot else f.end_s
    return f.start_s, end + GRACE_S


def score(scenario: Scenario, events: Sequence[IncidentEvent], start_ts: float) -> ScenarioScore:
    """Score one replay against the scenario's expectations (pure: same events, same score)."""
    cfg = scenario.sim_config()
    names = cfg.node_names()
    specs = [f.fault for f in scenario.faults]
    claimed: dict[int, list[Incident]] = {k: [] for k in range(len(specs))}
    spurious: list[Incident] = []
    for inc in incidents_of(events, scenario.ambiguous):
        t = inc.opened - start_ts
        candidates = []
        for k, (case, spec) in enumerate(zip(scenario.faults, specs, strict=True)):
            lo, hi = _window(spec, cfg.interval_s)
            at_place = inc.place == FLEET or bool(inc.nodes & set(fault_nodes(spec, names)))
            if lo <= t <= hi and at_place:
                candidates.append((not (case.expect and inc.matches(case.expect)), spec.start_s, k))
        if candidates:
            claimed[min(candidates)[2]].append(inc)
        else:
            spurious.append(inc)
    out: list[FaultScore] = []
    for k, (case, spec) in enumerate(zip(scenario.faults, specs, strict=True)):
        incs = tuple(claimed[k])
        exp = case.expect
        detect = min((i.opened for i in incs), default=None)
        detect_min = None if detect is None else round((detect - start_ts - spec.start_s) / 60.0, 2)
        if exp is None:
            wrong = tuple(i.describe() for i in incs)
        else:
            wrong = tuple(i.describe() for i in incs if exp.root_cause not in i.named(i.events[-1]))
        out.append(
            FaultScore(
                spec=case.spec,
                expect=exp,
                incidents=incs,
                right=exp is not None and any(i.matches(exp) for i in incs),
                detect_min=detect_min,
                first_right=sum(i.first_right for i in incs),
                wrong=wrong,
            )
        )
    return ScenarioScore(scenario.name, tuple(out), tuple(spurious))


@dataclass(frozen=True)
class Aggregate:
    faults: int  # faults with an expected incident
    incidents: int  # incidents of those faults
    first_right: int  # incidents (all scenarios) whose first event names the final cause
    all_incidents: int
    wrong: int  # wrong-cause incidents, spurious ones and negatives' ones
    negative_incidents: int
    right: int  # faults with the right cause and place
    #: minutes from each detected fault's onset to its first page (time to detect), in fault order
    pages_min: tuple[float, ...] = ()

    @property
    def median_page_min(self) -> float:
        return statistics.median(self.pages_min) if self.pages_min else math.nan

    @property
    def p90_page_min(self) -> float:
        """The 90th percentile (nearest rank: the value 90 % of the faults paged within)."""
        if not self.pages_min:
            return math.nan
        ordered = sorted(self.pages_min)
        return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]

    @property
    def max_page_min(self) -> float:
        return max(self.pages_min) if self.pages_min else math.nan

    @property
    def pages_in_time(self) -> bool:
        return not self.pages_min or (
            self.median_page_min <= TARGET_MEDIAN_PAGE_MIN and self.max_page_min <= TARGET_MAX_PAGE_MIN
        )

    @property
    def incidents_per_fault(self) -> float:
        return self.incidents / self.faults if self.faults else math.nan

    @property
    def first_cause_right(self) -> float:
        return self.first_right / self.all_incidents if self.all_incidents else 1.0

    @property
    def met(self) -> bool:
        return (
            self.incidents_per_fault <= TARGET_INCIDENTS_PER_FAULT
            and self.first_cause_right >= TARGET_FIRST_CAUSE_RIGHT
            and self.wrong == 0
            and self.negative_incidents == 0
            and self.right == self.faults
            and self.pages_in_time
        )

    def problems(self) -> list[str]:
        out = []
        if self.incidents_per_fault > TARGET_INCIDENTS_PER_FAULT:
            out.append(f"{self.incidents_per_fault:.2f} incidents per fault (target <= {TARGET_INCIDENTS_PER_FAULT})")
        if self.first_cause_right < TARGET_FIRST_CAUSE_RIGHT:
            out.append(
                f"first cause right in {self.first_cause_right:.0%} of incidents "
                f"(target >= {TARGET_FIRST_CAUSE_RIGHT:.0%})"
            )
        if self.wrong:
            out.append(f"{self.wrong} incidents with a wrong cause (target 0)")
        if self.negative_incidents:
            out.append(f"{self.negative_incidents} incidents on the negatives (target 0)")
        if self.right < self.faults:
            out.append(f"right cause and place for {self.right} of {self.faults} faults")
        if not self.pages_in_time:
            out.append(
                f"time to page: median {self.median_page_min:.2f} min, max {self.max_page_min:.2f} min "
                f"(targets <= {TARGET_MEDIAN_PAGE_MIN:g}, <= {TARGET_MAX_PAGE_MIN:g})"
            )
        return out


def aggregate(scores: Iterable[ScenarioScore]) -> Aggregate:
    scores = list(scores)
    pos = [f for s in scores for f in s.faults if f.expect is not None]
    all_incs = [i for s in scores for i in s.incidents]
    return Aggregate(
        faults=len(pos),
        incidents=sum(len(f.incidents) for f in pos),
        first_right=sum(i.first_right for i in all_incs),
        all_incidents=len(all_incs),
        wrong=sum(len(s.wrong) for s in scores),
        negative_incidents=sum(len(f.incidents) for s in scores for f in s.faults if f.expect is None)
        + sum(len(s.spurious) for s in scores if all(f.expect is None for f in s.faults)),
        right=sum(f.right for f in pos),
        pages_min=tuple(f.detect_min for f in pos if f.detect_min is not None),
    )


# --- the report table ------------------------------------------------------------------------------------------------
def table(scores: Sequence[ScenarioScore], seconds: dict[str, float] | None = None) -> str:
    """The Markdown table BENCHMARKS.md quotes: one row per fault (a scenario without faults: one row)."""
    head = (
        "| scenario | fault | expected | got (final cause @ place) | right cause & place | time to detect "
        "| incidents / fault | first cause right | wrong causes | target |"
    )
    lines = [head, "|" + "---|" * 10]
    for s in scores:
        rows = list(s.faults) or [None]
        for k, f in enumerate(rows):
            spurious = list(s.spurious) if k == len(rows) - 1 else []
            if f is None:
                got = "; ".join(i.describe() for i in spurious) or "nothing"
                lines.append(
                    f"| {s.name} | - | nothing | {got} | - | - | {len(spurious)} | "
                    f"{sum(i.first_right for i in spurious)}/{len(spurious)} | "
                    f"{len(spurious)} | {'yes' if s.met else 'no'} |"
                )
                continue
            incs = list(f.incidents) + spurious
            got = "; ".join(i.describe() for i in f.incidents) or "nothing"
            if spurious:
                got += "; elsewhere: " + "; ".join(i.describe() for i in spurious)
            exp = f.expect.describe() if f.expect else "nothing"
            right = "-" if f.expect is None else ("yes" if f.right else "no")
            ttd = "-" if f.detect_min is None else f"{f.detect_min:.2f} min"
            wrong = len(f.wrong) + len(spurious)
            lines.append(
                f"| {s.name} | `{f.spec}` | {exp} | {got} | {right} | {ttd} | {len(f.incidents)} | "
                f"{sum(i.first_right for i in incs)}/{len(incs)} | {wrong} | "
                f"{'yes' if f.met and not spurious else 'no'} |"
            )
    return "\n".join(lines)


def summary(agg: Aggregate) -> str:
    return "\n".join(
        [
            f"- faults with an expected incident: {agg.faults}; right cause and place: {agg.right}",
            f"- incidents per fault: {agg.incidents_per_fault:.2f} (target <= {TARGET_INCIDENTS_PER_FAULT})",
            f"- first event names the final cause: {agg.first_right}/{agg.all_incidents} incidents "
            f"({agg.first_cause_right:.0%}, target >= {TARGET_FIRST_CAUSE_RIGHT:.0%})",
            f"- incidents with a wrong cause (incl. spurious and negatives): {agg.wrong} (target 0)",
            f"- incidents on the negatives: {agg.negative_incidents} (target 0)",
            f"- time from fault onset to the first page: median {agg.median_page_min:.2f} min "
            f"(target <= {TARGET_MEDIAN_PAGE_MIN:g}), p90 {agg.p90_page_min:.2f}, max {agg.max_page_min:.2f} "
            f"(target <= {TARGET_MAX_PAGE_MIN:g}) over {len(agg.pages_min)} faults",
        ]
    )
