"""Which engines can feed a rule: from the catalog, from real scrapes, and as the default rules declare it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.recording import ScrapeRecord
from tailhound.streams.ruleset.docs import engines_text
from tailhound.streams.ruleset.engine_support import (
    base_signals,
    catalog_signals,
    fed,
    is_engine_signal,
    missing,
    snapshot_signals,
    supported_engines,
)
from tailhound.streams.ruleset.rulefile import load_rules, parse_rule_text

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "agents" / "fixtures"
#: engine -> its real fixtures (origin in each file's header); vLLM: V1 and V0
ENGINE_FIXTURES = {
    "vllm": ["vllm_v1_dp2.prom", "vllm_v0_opt125m.prom"],
    "tgi": ["tgi_v3.prom"],
    "nim": ["nim_llama31_8b.prom"],
    "sglang": ["sglang.prom"],
}
#: what the worker itself computes for every engine (the model stage), never in a scrape
WORKER_SIGNALS = frozenset({"model.nodes_with_cause"})


def fixture_signals() -> dict[str, frozenset[str]]:
    out = {}
    for engine, names in ENGINE_FIXTURES.items():
        snaps = [
            SnapshotBuilder().build(
                ScrapeRecord(
                    ts=1_764_400_000,
                    node="gpu-node-1",
                    job=engine,
                    body=(FIXTURES / n).read_text(encoding="utf-8"),
                    labels={"instance": "10.0.0.5:8000"},
                    interval_s=5,
                )
            )
            for n in names
        ]
        out[engine] = snapshot_signals(snaps) | WORKER_SIGNALS
    return out


FROM_FIXTURES = fixture_signals()
RULES = load_rules(ROOT / "rules")


def when(text: str):
    """A rule around one `when:` block (scope engine), parsed by the real loader."""
    [rule] = parse_rule_text(
        "groups:\n  - name: g\n    rules:\n      - name: r\n        scope: engine\n        symptom: true\n"
        "        when:\n" + "".join(f"          {line}\n" for line in text.strip().splitlines()),
        "x.yaml",
    )
    return rule


@pytest.mark.parametrize(
    ("signal", "bases"),
    [
        ("latency.tpot.p95", {"latency.tpot"}),
        ("latency.queue.mean", {"latency.queue"}),
        ("engine.preemptions.rate", {"engine.preemptions"}),
        ("engine.http_rejection_ratio", {"engine.http_rejections", "engine.http_requests"}),
        ("engine.request_failure_ratio", {"engine.http_rejections", "engine.requests_received"}),
        ("engine.kv_cache_reserved", {"engine.batch_max_tokens", "engine.batch_token_capacity"}),
        ("engine.arrival_rate", {"latency.e2e", "engine.requests_running", "engine.requests_waiting"}),
        ("gpu.thermal_throttle_flag", {"gpu.clock_event_reasons"}),
        ("sla.ttft_p99", set()),
        ("gpu.temperature", {"gpu.temperature"}),
    ],
)
def test_base_signals(signal, bases):
    assert base_signals(signal) == bases


def test_engine_signals_are_those_an_engine_source_maps():
    assert is_engine_signal("latency.ttft") and is_engine_signal("model.nodes_with_cause")
    assert not is_engine_signal("gpu.dram_bw_util") and not is_engine_signal("stream.ttft")
    assert "latency.ttft" not in catalog_signals("tgi") and "latency.queue" not in catalog_signals("nim")


def test_all_needs_every_branch_any_one():
    ttft_or_queue = when("""
any:
  - {signal: latency.ttft.p99, above: {signal: sla.ttft_p99}}
  - {signal: latency.queue.p99, above: {signal: sla.ttft_p99}}
""")
    assert supported_engines(ttft_or_queue) == {"vllm", "tgi", "nim", "sglang"}
    both = when("""
all:
  - {signal: latency.ttft.p99, above: {signal: sla.ttft_p99}}
  - {signal: latency.queue.p99, above: {signal: sla.ttft_p99}}
""")
    assert supported_engines(both) == {"vllm", "sglang"}
    assert missing(both.when, catalog_signals("nim")) == ["latency.queue"]
    assert fed(both.when, catalog_signals("vllm"))
    gpu_only = when("{signal: gpu.dram_bw_util, reduce: max, above: 0.75}")
    assert supported_engines(gpu_only) == {"any"}
    assert supported_engines(when("not: {signal: latency.ttft.p99, above: 1}")) == {"vllm", "nim", "sglang"}


@pytest.mark.parametrize("rule", RULES.rules, ids=lambda r: r.name)
def test_catalog_support_matches_what_real_scrapes_give(rule):
    """The catalog's answer is the one the engines' real /metrics output gives."""
    assert supported_engines(rule) == supported_engines(rule, available=FROM_FIXTURES)


@pytest.mark.parametrize("rule", [r for r in RULES.rules if r.engines is not None], ids=lambda r: r.name)
def test_declared_engines_are_the_computed_ones(rule):
    declared = {e.value for e in rule.engines}
    computed = supported_engines(rule)
    assert declared == computed, f"{rule.name}: declares {sorted(declared)}, the catalog says {sorted(computed)}"
    assert declared == supported_engines(rule, available=FROM_FIXTURES)


# Rewrites that keep rules alive on engines that lack a signal, with what each engine exposes instead (the
# lead engineer owns rules/*.yaml: these are proposals, checked here so that they stay true).
PROPOSALS = {
    # TTFT >= queue wait: a queue P99 over the TTFT SLA is a TTFT breach; TGI has a queue but no TTFT histogram
    "tail-latency-breach": (
        """
any:
  - {signal: latency.ttft.p99, above: {signal: sla.ttft_p99}, min_observations: 20}
  - {signal: latency.queue.p99, above: {signal: sla.ttft_p99}, min_observations: 20}
""",
        {"vllm", "tgi", "nim", "sglang"},
    ),
    # vLLM preempts; NIM has no preemption counter; TGI never preempts and has no usage gauge, but its reserved
    # token budget full while requests wait is the same admission stall
    "kv-cache-pressure": (
        """
any:
  - all:
      - {signal: engine.kv_cache_usage, at_least: 0.95}
      - any:
          - {signal: engine.preemptions.rate, above: 0}
          - {signal: engine.requests_waiting, above: 0}
  - all:
      - {signal: engine.kv_cache_reserved, at_least: 0.95}
      - {signal: engine.requests_waiting, above: 0}
""",
        {"vllm", "tgi", "nim", "sglang"},
    ),
    # reserved >= used, so reserved < 0.9 implies usage < 0.9 (TGI); NIM still lacks a queue-time histogram
    "head-of-line-blocking": (
        """
all:
  - {signal: latency.queue.mean, above: 0.2}
  - {signal: tokens.generation.mean, above: 1000}
  - any:
      - {signal: engine.kv_cache_usage, below: 0.9}
      - {signal: engine.kv_cache_reserved, below: 0.9}
""",
        {"vllm", "tgi", "sglang"},
    ),
    # TGI: failures by reason over arrivals (engine.request_failure_ratio) instead of HTTP status classes
    "retry-storm": (
        """
all:
  - {signal: engine.http_rejections.rate, reduce: sum, above: 1}
  - any:
      - {signal: engine.http_rejection_ratio, reduce: max, above: 0.1}
      - {signal: engine.request_failure_ratio, reduce: max, above: 0.1}
  - any:
      - {signal: engine.http_requests.rate, reduce: sum, above_baseline: 1.3}
      - {signal: engine.requests_received.rate, reduce: sum, above_baseline: 1.3}
      - {signal: engine.http_rejection_ratio, reduce: max, above: 0.3}
      - {signal: engine.request_failure_ratio, reduce: max, above: 0.3}
  - {signal: latency.e2e.p99, above: 12, min_observations: 20}
""",
        {"vllm", "tgi"},
    ),
}


@pytest.mark.parametrize("name", sorted(PROPOSALS))
def test_proposed_rewrites_are_fed_by_more_engines(name):
    text, engines = PROPOSALS[name]
    rule = when(text)
    assert supported_engines(rule) == engines
    assert supported_engines(rule, available=FROM_FIXTURES) == engines


def test_rule_docs_show_declared_or_computed_engines():
    declared = parse_rule_text(
        """\
groups:
  - name: g
    rules:
      - name: r
        scope: engine
        engines: [vllm, nim]
        symptom: true
        when: {signal: latency.ttft.p99, above: 1}
""",
        "x.yaml",
    )[0]
    assert engines_text(declared) == "engines: vllm, nim"
    assert (
        engines_text(when("{signal: latency.ttft.p99, above: 1}"))
        == "engines: vllm, nim, sglang (computed, not declared)"
    )
    assert engines_text(when("{signal: gpu.dram_bw_util, reduce: max, above: 1}")).startswith("any engine")
