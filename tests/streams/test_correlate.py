"""streams/correlate.py on its own (pure): grouping per domain, causal ranking, takeover, symptoms, the
fallback cause, and the ranked candidates with the differential of look-alike causes."""

from __future__ import annotations

from tailhound.incident import Evidence
from tailhound.snapshot import Snapshot
from tailhound.streams.candidates import DIFFERENTIALS, diagnose
from tailhound.streams.causal_rank import CAUSAL_RANK, domain_of, rank_of
from tailhound.streams.correlate import correlate
from tailhound.streams.episode import Episode, Firing
from tailhound.streams.ruleset.rulefile import RuleSet, parse_rule_text
from tailhound.vocabulary import RootCause

T0 = 1_767_225_600.0
RULES = """groups:
  - name: t
    rules:
      - {name: hot, scope: gpu, when: {signal: gpu.temperature, above: 85}, root_cause: gpu-thermal-throttle,
         severity: critical, actions: ["Check cooling on {node} GPUs {gpus}"]}
      - {name: kv-full, scope: engine, when: {signal: engine.kv_cache_usage, above: 0.95},
         root_cause: kv-cache-pressure}
      - {name: rejecting, scope: engine, when: {signal: engine.http_rejection_ratio, above: 0.1},
         root_cause: retry-storm}
      - {name: queue-full, scope: engine, when: {signal: engine.requests_waiting, above: 10}, root_cause: capacity}
      - {name: queue-long, scope: engine, when: {signal: engine.requests_waiting, above: 50}, root_cause: capacity}
      - {name: lossy, scope: node, when: {signal: net.tcp_retrans_ratio, above: 0.02}, root_cause: network-path}
      - {name: p99, scope: engine, when: {signal: engine.requests_waiting, above: 5}, symptom: true,
         fallback_root_cause: capacity, attach_grace: 2m}
"""


def ruleset() -> RuleSet:
    return RuleSet(rules=parse_rule_text(RULES, "test.yaml"))


def snap(minute: float) -> Snapshot:
    return Snapshot(ts=T0 + minute * 60, node="gpu-node-1", source="dcgm", samples=[])


def ev(signal: str, value: float, threshold: float) -> Evidence:
    return Evidence(signal=signal, value=value, op=">", threshold=threshold)


def fire(minute: float, *entities: str, evidence: list[Evidence] | None = None) -> Firing:
    return Firing(entities=list(entities), since=T0 + minute * 60, evidence=evidence or [])


class Node:
    """One node's correlation state across calls."""

    def __init__(self) -> None:
        self.rules = ruleset()
        self.episodes: dict[str, Episode] = {}
        self.orphans: dict[str, float] = {}

    def step(self, minute: float, firing: dict[str, Firing], pending: frozenset[str] = frozenset(), observe=None):
        return correlate(self.episodes, self.orphans, firing, self.rules, snap(minute), ["m"], pending, observe)


def test_causes_of_one_domain_are_one_incident_and_path_causes_another():
    node = Node()
    out = node.step(30, {"hot": fire(29, "3"), "kv-full": fire(29, "e"), "lossy": fire(29, "")})
    assert sorted((e.event, str(e.root_cause)) for e in out) == [
        ("opened", "gpu-thermal-throttle"),
        ("opened", "network-path"),
    ]
    gpu = next(e for e in out if e.root_cause == RootCause.GPU_THERMAL_THROTTLE)
    assert gpu.labels["rules"] == "hot,kv-full" and gpu.scope.gpus == ["3"] and gpu.severity == "critical"
    assert gpu.actions == ["Check cooling on gpu-node-1 GPUs 3"]
    assert {domain_of(c) for c in CAUSAL_RANK} == {"gpu", "path"}


def test_a_better_ranked_cause_that_fires_later_takes_over():
    node = Node()
    (opened,) = node.step(30, {"kv-full": fire(29, "e")})
    assert opened.root_cause == RootCause.KV_CACHE_PRESSURE
    (updated,) = node.step(31, {"kv-full": fire(29, "e"), "hot": fire(31, "5")})
    assert updated.event == "updated" and updated.root_cause == RootCause.GPU_THERMAL_THROTTLE
    assert updated.incident_id == opened.incident_id and updated.sequence == 2
    assert rank_of(RootCause.GPU_THERMAL_THROTTLE) < rank_of(RootCause.KV_CACHE_PRESSURE)


def test_a_cause_waits_for_a_better_ranked_pending_one():
    node = Node()
    assert node.step(30, {"kv-full": fire(30, "e")}, pending=frozenset({"hot"})) == []
    (opened,) = node.step(31, {"kv-full": fire(30, "e"), "hot": fire(31, "3")})
    assert opened.root_cause == RootCause.GPU_THERMAL_THROTTLE  # the first page names the better cause


def test_a_symptom_attaches_to_the_open_incident_and_it_resolves_when_causes_stop():
    node = Node()
    node.step(30, {"hot": fire(30, "3")})
    (updated,) = node.step(31, {"hot": fire(30, "3"), "p99": fire(31, "e")})
    assert "explains p99" in updated.summary and updated.root_cause == RootCause.GPU_THERMAL_THROTTLE
    (resolved,) = node.step(40, {"p99": fire(31, "e")})
    assert resolved.event == "resolved" and not node.episodes
    assert node.step(41, {"p99": fire(31, "e")}) == []  # a draining queue is explained: no fallback page


def test_a_lone_symptom_opens_its_fallback_cause_after_its_grace_and_a_real_cause_takes_over():
    node = Node()
    assert node.step(30, {"p99": fire(30, "e")}) == []
    (opened,) = node.step(32, {"p99": fire(30, "e")})
    assert opened.root_cause == RootCause.CAPACITY and opened.rule == "p99"
    (updated,) = node.step(33, {"p99": fire(30, "e"), "kv-full": fire(33, "e")})
    assert updated.root_cause == RootCause.KV_CACHE_PRESSURE and not node.episodes["gpu"].fallback


def test_candidates_rank_the_root_cause_first_with_evidence_for_and_against():
    node = Node()
    quiet = {"queue-long": [ev("engine.requests_waiting", 20, 50)]}
    (opened,) = node.step(
        30,
        {
            "hot": fire(29, "3", evidence=[ev("gpu.temperature", 91, 85)]),
            "queue-full": fire(29, "e", evidence=[ev("engine.requests_waiting", 20, 10)]),
        },
        pending=frozenset({"kv-full"}),
        observe=lambda rule, entities: quiet.get(rule, []),
    )
    causes = [c.root_cause for c in opened.candidates]
    assert causes[0] == RootCause.GPU_THERMAL_THROTTLE and set(causes) == {
        RootCause.GPU_THERMAL_THROTTLE,
        RootCause.CAPACITY,
        RootCause.KV_CACHE_PRESSURE,
    }
    lead, *others = opened.candidates
    assert lead.score == 1.0 and lead.supports[0].evidence[0].value == 91 and not lead.unexplained
    capacity = next(c for c in others if c.root_cause == RootCause.CAPACITY)
    # explains its own rule, not the thermal one; one of its two rules fires, the other is quiet
    assert capacity.unexplained == ["hot"] and capacity.score == 0.25
    assert [(f.rule, f.state) for f in capacity.supports] == [("queue-full", "firing")]
    assert [(f.rule, f.state, f.evidence[0].value) for f in capacity.against] == [("queue-long", "quiet", 20)]
    kv = next(c for c in others if c.root_cause == RootCause.KV_CACHE_PRESSURE)
    assert [(f.rule, f.state) for f in kv.supports] == [("kv-full", "pending")]
    assert opened.differential is None  # thermal throttling has no look-alike


def test_a_retry_storm_names_a_surge_as_runner_up_with_the_check_that_tells_them_apart():
    node = Node()
    (opened,) = node.step(30, {"rejecting": fire(29, "e"), "queue-full": fire(29, "e")})
    assert opened.root_cause == RootCause.RETRY_STORM
    d = opened.differential
    assert d is not None and d.lead == RootCause.RETRY_STORM and d.runner_up == RootCause.CAPACITY
    assert opened.runner_up == RootCause.CAPACITY and "per client IP" in d.check
    assert d.check == DIFFERENTIALS[frozenset({RootCause.RETRY_STORM, RootCause.CAPACITY})].check
    (resolved,) = node.step(40, {})
    assert resolved.event == "resolved" and resolved.runner_up == RootCause.CAPACITY  # what it was paged with


def test_a_retry_storm_alone_still_names_its_look_alike():
    """Its own evidence (rejections with more requests) is a rejecting surge's too."""
    cands, diff = diagnose(
        RootCause.RETRY_STORM, domain_of, rank_of, {"rejecting": ["e"]}, {"rejecting": []}, set(), ruleset().index
    )
    assert [c.root_cause for c in cands] == [RootCause.RETRY_STORM, RootCause.CAPACITY]
    assert cands[1].score == 0.0 and diff is not None and diff.runner_up == RootCause.CAPACITY


def test_a_capacity_lead_names_a_retry_storm_only_when_its_rule_holds():
    rules = ruleset().index
    cands, diff = diagnose(
        RootCause.CAPACITY, domain_of, rank_of, {"queue-full": ["e"]}, {"queue-full": []}, set(), rules
    )
    assert [c.root_cause for c in cands] == [RootCause.CAPACITY] and diff is None
    cands, diff = diagnose(
        RootCause.CAPACITY, domain_of, rank_of, {"queue-full": ["e"]}, {"queue-full": []}, {"rejecting"}, rules
    )
    assert diff is not None and diff.runner_up == RootCause.RETRY_STORM


def test_candidates_stay_in_the_incidents_domain():
    cands, _ = diagnose(
        RootCause.KV_CACHE_PRESSURE,
        domain_of,
        rank_of,
        {"kv-full": ["e"]},
        {"kv-full": [], "lossy": []},
        set(),
        ruleset().index,
    )
    assert [c.root_cause for c in cands] == [RootCause.KV_CACHE_PRESSURE]


def test_through_the_processor_a_quiet_rule_of_a_candidate_shows_what_it_compared():
    from tailhound.streams.processor import MemoryStateStore, SnapshotProcessor
    from tests.factories import dcgm_snapshot

    text = RULES.split("      - {name: kv-full")[0] + (
        "      - {name: slow-clock, scope: gpu, when: {signal: gpu.sm_clock, below: 1000},\n"
        "         root_cause: gpu-thermal-throttle}\n"
    )
    processor, store = SnapshotProcessor(RuleSet(rules=parse_rule_text(text, "test.yaml"))), MemoryStateStore()
    events = []
    for k in range(3):
        snap = dcgm_snapshot(T0 + 15 * k, hot={3: (91.0, 1500.0)})
        step = processor.step(store.get(snap.node), snap)
        store[snap.node] = step.state
        events += step.events
    (opened,) = events
    (lead,) = opened.candidates
    assert [(f.rule, f.state) for f in lead.supports] == [("hot", "firing")]
    (quiet,) = lead.against
    assert quiet.rule == "slow-clock" and quiet.state == "quiet"
    assert [(e.signal, e.value, e.threshold, e.labels) for e in quiet.evidence] == [
        ("gpu.sm_clock", 1500.0, 1000.0, {"gpu": "3"})
    ]
    assert lead.score == 0.5  # one of its two rules holds
