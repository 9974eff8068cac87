"""Rule coverage (streams/coverage.py): which rules can fire with the signals that arrive, and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.catalog.dcgm_counters import default_fields
from tailhound.recording import ScrapeRecord
from tailhound.resources import default_rules_dir
from tailhound.streams.coverage import (
    BLIND_ON_DEFAULT_EXPORTERS,
    CONFIGURED_SIGNALS,
    coverage,
    needs,
    problem_lines,
    requirements,
    rule_coverage,
    signals_of_metrics,
    summary,
)
from tailhound.streams.ruleset.rulefile import RuleSet, load_rules, parse_rule_text

FIXTURES = Path(__file__).resolve().parents[1] / "agents" / "fixtures"
CATALOG = default_catalog()


def rule(scope: str, when: str, severity: str = "critical", name: str = "r"):
    text = (
        f"groups:\n  - name: g\n    rules:\n      - name: {name}\n        scope: {scope}\n"
        f"        severity: {severity}\n        root_cause: capacity\n        when:\n"
        + "".join(f"          {line}\n" for line in when.strip().splitlines())
    )
    return parse_rule_text(text, "test.yaml")[0]


def check(scope: str, when: str, present: set[str], seen: set[str] = frozenset()):
    return rule_coverage(rule(scope, when), present, CATALOG, seen)


# --- what a signal a rule names needs --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signal", "needed"),
    [
        ("gpu.temperature", {"gpu.temperature"}),
        ("gpu.sm_clock_ratio", {"gpu.sm_clock", "gpu.sm_clock_max"}),  # derived ratio: both inputs
        ("gpu.thermal_throttle_flag", {"gpu.clock_event_reasons"}),  # flag: its bitmask
        ("net.listen_overflows.rate", {"net.listen_overflows"}),  # rate: the counter
        ("latency.tpot.p95", {"latency.tpot"}),  # window statistic: the histogram
        ("latency.ttft.window_count", {"latency.ttft"}),
        ("engine.http_rejection_ratio", {"engine.http_rejections", "engine.http_requests"}),  # ratio of rates
        ("engine.arrival_rate", {"latency.e2e", "engine.requests_running", "engine.requests_waiting"}),
        ("sla.ttft_p99", set()),  # from the settings
        ("model.nodes_with_cause", set()),  # the model stage's own
        ("model.engine_request_rate", {"latency.e2e"}),  # peer gauge, computed
        ("model.engine_tpot_mean", {"latency.tpot"}),
        ("no.such_signal", {"no.such_signal"}),  # nothing can send it
    ],
)
def test_requirements(signal, needed):
    assert requirements(signal, CATALOG) == needed


def test_every_signal_the_default_pack_reads_comes_down_to_catalog_signals():
    """A new computed signal must be taught to requirements(), or doctor calls it unknown (the signals a
    configuration file gives, the capacity file's, are required as themselves: present when it is there)."""
    for r in load_rules(default_rules_dir()).rules:
        for leaf in r.leaves():
            for name in leaf.signals():
                assert all(CATALOG.spec(s) or s in CONFIGURED_SIGNALS for s in requirements(name, CATALOG)), (
                    r.name,
                    name,
                )


# --- rules -------------------------------------------------------------------------------------------------------


def test_all_needs_every_child_and_a_derived_signal_needs_both_inputs():
    c = check(
        "gpu",
        """
all:
  - {signal: gpu.temperature, at_least: 85}
  - {signal: gpu.sm_clock_ratio, below: 0.8}
""",
        {"gpu.temperature", "gpu.sm_clock"},
        {"dcgm"},
    )
    assert (c.status, c.missing) == ("blind", ("gpu.sm_clock_max",))
    assert c.via == {"gpu.sm_clock_max": ("gpu.sm_clock_ratio",)}
    first = c.fixes["gpu.sm_clock_max"][0]
    assert first.source == "dcgm"  # the source already there comes first
    assert first.line == "DCGM_FI_DEV_MAX_SM_CLOCK, gauge, Maximum supported SM clock for the device (in MHz)."
    assert c.fixes["gpu.sm_clock_max"][1].action.startswith("enable the nvml collector in agent.yaml")
    assert check("gpu", "{signal: gpu.sm_clock_ratio, below: 0.8}", {"gpu.sm_clock", "gpu.sm_clock_max"}).status == "ok"


def test_any_with_a_blind_branch_is_partial():
    c = check(
        "gpu",
        """
any:
  - {signal: gpu.temperature, at_least: 85}
  - {signal: gpu.thermal_throttle_flag, at_least: 1}
""",
        {"gpu.temperature"},
    )
    assert (c.status, c.missing, c.via) == (
        "partial",
        ("gpu.clock_event_reasons",),
        {"gpu.clock_event_reasons": ("gpu.thermal_throttle_flag",)},
    )
    blind = check(
        "gpu",
        """
any:
  - {signal: gpu.sm_clock_ratio, below: 0.8}
  - {signal: gpu.thermal_throttle_flag, at_least: 1}
""",
        {"gpu.sm_clock"},
    )
    assert blind.status == "blind"
    assert blind.alternatives == (("gpu.clock_event_reasons",), ("gpu.sm_clock_max",))
    assert problem_lines(blind)[-1] == "r (critical) blind: or it fires with gpu.sm_clock_max"


def test_not_needs_its_child_to_be_false():
    # not(x) is true when x is false: a leaf without data is never false
    c = check("gpu", "not: {signal: gpu.sm_clock_ratio, below: 0.8}", {"gpu.sm_clock"})
    assert (c.status, c.missing) == ("blind", ("gpu.sm_clock_max",))
    # all(...) is false as soon as one child is: not(all(temperature, blind)) can hold
    c = check(
        "gpu",
        """
not:
  all:
    - {signal: gpu.temperature, at_least: 85}
    - {signal: gpu.sm_clock_ratio, below: 0.8}
""",
        {"gpu.temperature", "gpu.sm_clock"},
    )
    assert (c.status, c.missing) == ("partial", ("gpu.sm_clock_max",))


def test_needs_follows_the_evaluators_three_valued_logic():
    temp, ratio = "{signal: gpu.temperature, at_least: 85}", "{signal: gpu.sm_clock_ratio, below: 0.8}"
    when = rule("gpu", f"any:\n  - {temp}\n  - {ratio}").when
    true, false = needs(when, {"gpu.temperature", "gpu.sm_clock"}, CATALOG)
    assert frozenset() in true and frozenset() in false  # any: one branch decides either way


def test_rates_histograms_refs_baselines_absence_and_computed_signals():
    assert check("node", "{signal: net.listen_overflows.rate, above: 0}", set()).missing == ("net.listen_overflows",)
    assert check("node", "{signal: net.listen_overflows.rate, above: 0}", {"net.listen_overflows"}).status == "ok"
    c = check("engine", "{signal: latency.tpot.p95, above_baseline: 2.0, min_observations: 20}", {"latency.ttft"})
    assert c.missing == ("latency.tpot",)
    assert c.via == {"latency.tpot": ("latency.tpot.p95", "latency.tpot.window_count")}
    c = check("endpoint", "{signal: lb.health_timeout, below: {signal: health.p95, times: 1.5}}", {"lb.health_timeout"})
    assert (c.status, c.missing) == ("blind", ("health.p95",))
    assert (
        check(
            "node", "{signal: probe.http_connect_duration, above_baseline: 4.0}", {"probe.http_connect_duration"}
        ).status
        == "ok"
    )
    assert check("gpu", "{signal: gpu.sm_clock, below: {peers: 0.8}}", {"gpu.sm_clock"}).status == "ok"
    assert check("gpu", "{absent: gpu.temperature, for: 2m}", set()).missing == ("gpu.temperature",)
    assert check("engine", "{signal: latency.ttft.p99, above: {signal: sla.ttft_p99}}", {"latency.ttft"}).status == "ok"
    c = check(
        "engine",
        "{signal: engine.arrival_rate, reduce: sum, above_baseline: 1.15}",
        {"engine.requests_running", "engine.requests_waiting"},
    )
    assert (c.missing, c.via) == (("latency.e2e",), {"latency.e2e": ("engine.arrival_rate",)})


def test_a_blind_rule_asks_first_for_what_the_sources_already_there_can_send():
    when = """
any:
  - {signal: gpu.nvlink_up, reduce: min, below: 1}
  - {signal: gpu.nvlink_bandwidth_total.rate, below: {baseline: 0.5}}
"""
    on_dcgm = check("gpu", when, {"gpu.util"}, {"dcgm"})
    assert on_dcgm.missing == ("gpu.nvlink_bandwidth_total",)
    assert "on in its default counters" in on_dcgm.fixes["gpu.nvlink_bandwidth_total"][0].action
    assert check("gpu", when, {"gpu.util"}, {"nvml"}).missing == ("gpu.nvlink_up",)
    unavailable = [f for f in on_dcgm.fixes["gpu.nvlink_up"] if f.unavailable]
    assert [f.source for f in unavailable] == ["dcgm"]  # dcgm-exporter has no link-state field


def test_engine_fixes_name_the_versions_and_the_engines_that_lack_the_metric():
    c = check("engine", "{signal: engine.preemptions.rate, above: 0}", {"engine.requests_running"}, {"tgi"})
    texts = [(f.source, f.text, f.unavailable) for f in c.fixes["engine.preemptions"]]
    assert texts == [
        (
            "vllm",
            "scrape vLLM's OpenAI server (http://<node>:8000/metrics) as job `vllm` in agent.yaml: it sends "
            "vllm:num_preemptions_total (vLLM V0 and V1)",
            False,
        ),
        (
            "sglang",
            "start SGLang with --enable-metrics and scrape http://<node>:30000/metrics as job `sglang` in "
            "agent.yaml: it sends sglang:num_retracted_requests_total (recent SGLang releases; older ones "
            "only have the gauge sglang:num_retracted_reqs)",
            False,
        ),
        ("tgi", "TGI sends nothing that carries engine.preemptions", True),
    ]
    assert problem_lines(c) == [
        "r (critical) blind: engine.preemptions missing (for engine.preemptions.rate): scrape vLLM's OpenAI "
        "server (http://<node>:8000/metrics) as job `vllm` in agent.yaml: it sends vllm:num_preemptions_total "
        "(vLLM V0 and V1)"
    ]


def test_signals_of_metrics_by_name():
    found = signals_of_metrics({"vllm": ["http_requests_total", "vllm:num_requests_waiting"], "dcgm": ["nope"]})
    assert found == {"engine.http_requests", "engine.http_rejections", "engine.requests_waiting"}


def test_summary_counts_blind_critical_rules():
    rs = RuleSet(
        rules=[
            rule("gpu", "{signal: gpu.sm_clock_ratio, below: 0.8}", name="a"),
            rule("gpu", "{signal: gpu.temperature, above: 80}", severity="warning", name="b"),
        ]
    )
    report = coverage(rs, {"gpu.temperature"}, CATALOG)
    assert summary(report) == "2 rules: 1 ok, 0 partial, 1 blind (1 critical)"
    assert report[0].to_dict()["fixes"]["gpu.sm_clock"][0]["source"] == "dcgm"


# --- the default pack on dcgm-exporter defaults + vLLM + node_exporter + blackbox_exporter -----------------------


def _names(fixture: str, job: str) -> set[str]:
    body = (FIXTURES / fixture).read_text(encoding="utf-8")
    snap = SnapshotBuilder().build(ScrapeRecord(ts=1_764_400_000, node="gpu-node-1", job=job, body=body))
    return {s.name for s in snap.samples}


def default_exporters() -> dict[str, set[str]]:
    """dcgm-exporter: the fields of its default counters file (the real file; no captured dcgm fixture has all of
    them: none carries DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL); vLLM V1, node_exporter, blackbox_exporter: what their
    fixtures carry."""
    return {
        "dcgm": set(default_fields()),
        "vllm": _names("vllm_v1.prom", "vllm") | _names("vllm_v1_dp2.prom", "vllm"),
        "node": _names("node_exporter.prom", "node"),
        "blackbox": _names("blackbox.prom", "blackbox"),
    }


def test_real_dcgm_fixtures_carry_only_default_fields_we_know():
    for fixture in ("dcgm_exporter.prom", "dcgm_exporter_3x.prom"):
        names = _names(fixture, "dcgm") & default_fields()
        assert {"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"} <= names


def test_no_critical_rule_of_the_default_pack_is_blind_on_default_exporters():
    """Issue 12, item 5: with dcgm-exporter defaults + vLLM + node_exporter + blackbox, no critical rule may be
    blind unless the data cannot show that fault at all (BLIND_ON_DEFAULT_EXPORTERS says which, and why)."""
    metrics = default_exporters()
    report = coverage(load_rules(default_rules_dir()), signals_of_metrics(metrics), CATALOG, metrics.keys())
    blind = {c.rule: c for c in report if c.status == "blind"}
    critical = {name for name, c in blind.items() if c.critical}
    assert critical <= BLIND_ON_DEFAULT_EXPORTERS.keys(), {n: problem_lines(blind[n]) for n in critical}
    stale = BLIND_ON_DEFAULT_EXPORTERS.keys() - blind.keys()
    assert not stale, f"documented as blind but they can fire now: {stale}"


def test_blind_exceptions_have_reasons():
    assert all(len(reason) > 40 for reason in BLIND_ON_DEFAULT_EXPORTERS.values())


#: Issue 27's rules on dcgm-exporter defaults + vLLM + node_exporter + blackbox: each can fire; "partial" only
#: where an alternative branch reads what those exporters cannot send (the capacity file, the stream probe,
#: dcgm fields outside its defaults), and exactly those signals are missing.
ISSUE_27_COVERAGE: dict[str, tuple[str, tuple[str, ...]]] = {
    "gpu-hardware-error": ("partial", ("gpu.ecc_uncorrected", "gpu.xid_errors")),
    "head-of-line-blocking-long-prompts": ("ok", ()),
    "generation-length-growth": ("ok", ()),
    "load-imbalance": ("ok", ()),
    "batch-past-tpot-knee": ("partial", ("capacity.max_num_seqs", "capacity.tpot_knee_s")),
    "health-check-flapping": ("partial", ("lb.health_timeout_margin",)),
    "scale-out-not-ready": ("ok", ()),
}


def test_issue_27_rules_show_their_coverage_on_default_exporters():
    metrics = default_exporters()
    report = coverage(load_rules(default_rules_dir()), signals_of_metrics(metrics), CATALOG, metrics.keys())
    got = {c.rule: (c.status, tuple(sorted(c.missing))) for c in report}
    assert {name: got.get(name) for name in ISSUE_27_COVERAGE} == ISSUE_27_COVERAGE
