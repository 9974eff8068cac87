from __future__ import annotations

from pathlib import Path

import pytest

from tailhound.errors import RuleFileError
from tailhound.streams.ruleset.rulefile import load_rules, parse_duration, parse_rule_text

REPO_RULES = Path(__file__).resolve().parents[2] / "rules"

GOOD = """\
groups:
  - name: g
    rules:
      - name: hot
        scope: gpu
        when:
          all:
            - {signal: gpu.temperature, at_least: 85}
            - not: {signal: gpu.sm_clock_ratio, at_least: 0.8}
        for: 90s
        severity: warning
        root_cause: gpu-thermal-throttle
"""


def test_default_pack_loads():
    rs = load_rules(REPO_RULES)
    rule = rs.by_name("gpu-thermal-throttle")
    assert rule is not None and rule.for_ == 60 and rule.keep_firing_for == 60
    assert rule.root_cause == "gpu-thermal-throttle" and rule.actions


def test_good_rule_with_not():
    [rule] = parse_rule_text(GOOD, "x.yaml")
    assert rule.for_ == 90 and rule.severity == "warning"
    assert [t.signal for t in rule.thresholds()] == ["gpu.temperature", "gpu.sm_clock_ratio"]


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (lambda t: t.replace("at_least: 85", "at_least: 85, below: 99"), 8, "exactly one"),
        (lambda t: t.replace("for: 90s", "for: soon"), 10, "invalid duration"),
        (lambda t: t.replace("severity: warning", "severity: loud"), 11, "severity"),
        (lambda t: t.replace("root_cause: gpu-thermal-throttle", "root_cause: gremlins"), 12, "root_cause"),
        (lambda t: t.replace("        for: 90s\n", "        for: 90s\n        fro: 1m\n"), 11, "fro"),
        (lambda t: t.replace("gpu.temperature", "gpu.temprature"), 4, "unknown signal 'gpu.temprature'"),
        (lambda t: t.replace("scope: gpu", "scope: engine"), 4, "is per gpu"),
        (lambda t: t.replace("severity: warning", "severity: warning\n        context: [gpu.nope]"), 4, "'gpu.nope'"),
        (lambda t: t.replace("        root_cause: gpu-thermal-throttle\n", ""), 4, "root_cause"),
        (lambda t: t.replace("    rules:", "    rules: [").replace("root_cause: gpu-thermal-throttle", "x"), 4, "YAML"),
    ],
)
def test_bad_rule_names_file_and_line(mutate, line, needle):
    with pytest.raises(RuleFileError) as exc:
        parse_rule_text(mutate(GOOD), "rules/bad.yaml")
    err = exc.value
    assert err.path == "rules/bad.yaml"
    assert needle in str(err)
    assert err.line == line, str(err)
    assert str(err).startswith(f"rules/bad.yaml:{line}: ")


def test_duplicate_rule_names_across_files(tmp_path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleFileError, match="also defined in"):
        load_rules(tmp_path)


def test_empty_or_missing_directory(tmp_path):
    with pytest.raises(RuleFileError, match="no \\*.yaml"):
        load_rules(tmp_path)
    with pytest.raises(RuleFileError, match="no such rules directory or file"):
        load_rules(tmp_path / "nope")


def test_one_rule_file_loads_and_duplicate_keys_are_refused(tmp_path):
    assert {r.name for r in load_rules(REPO_RULES / "gpu.yaml").rules} >= {"gpu-thermal-throttle"}
    dup = tmp_path / "dup.yaml"
    dup.write_text(
        "groups:\n  - name: g\n    rules:\n      - name: x\n        scope: gpu\n"
        "        when: {signal: gpu.temperature, above: 80}\n        for: 1m\n        for: 30m\n"
        "        root_cause: gpu-thermal-throttle\n"
    )
    with pytest.raises(RuleFileError, match=r"dup.yaml:8: duplicate key 'for' \(first at line 7\)"):
        load_rules(dup)


@pytest.mark.parametrize(
    ("text", "seconds"), [(30, 30.0), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("250ms", 0.25), ("1.5m", 90.0)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


ENGINE_RULE = """\
groups:
  - name: e
    rules:
      - name: slow-decode
        scope: engine
        engines: [vllm, tgi, nim]
        when:
          {signal: latency.tpot.p95, above_baseline: 2.0}
        severity: warning
        symptom: true
"""


def test_engines_field_is_optional_and_kept():
    [rule] = parse_rule_text(ENGINE_RULE, "x.yaml")
    assert [e.value for e in rule.engines] == ["vllm", "tgi", "nim"]
    [rule] = parse_rule_text(ENGINE_RULE.replace("        engines: [vllm, tgi, nim]\n", ""), "x.yaml")
    assert rule.engines is None
    [rule] = parse_rule_text(GOOD.replace("scope: gpu", "scope: gpu\n        engines: [any]"), "x.yaml")
    assert [e.value for e in rule.engines] == ["any"]


@pytest.mark.parametrize(
    ("mutate", "line", "needle"),
    [
        (
            lambda t: t.replace("[vllm, tgi, nim]", "[vllm, llamacpp]"),
            6,
            "engines.1: Input should be 'vllm', 'tgi', 'nim', 'sglang'",
        ),
        (lambda t: t.replace("[vllm, tgi, nim]", "[]"), 6, "at least one engine"),
        (lambda t: t.replace("[vllm, tgi, nim]", "[vllm, vllm]"), 6, "listed twice"),
        (lambda t: t.replace("[vllm, tgi, nim]", "[any, vllm]"), 6, "`any` stands alone"),
        (lambda t: t.replace("[vllm, tgi, nim]", "vllm"), 6, "valid list"),
        (lambda t: t.replace("[vllm, tgi, nim]", "[any]"), 6, "reads engine signals"),
        # TGI has no TTFT histogram: it cannot feed a TTFT rule (the catalog's `engines` coverage says so)
        (
            lambda t: t.replace("latency.tpot.p95", "latency.ttft.p95"),
            6,
            "tgi cannot feed it (it does not expose latency.ttft",
        ),
        (lambda t: t.replace("latency.tpot.p95", "latency.queue.mean"), 6, "nim cannot feed it"),
        # SGLang counts no rejections (signals.yaml engines.sglang.not_exposed)
        (
            lambda t: t.replace("[vllm, tgi, nim]", "[vllm, sglang]").replace(
                "{signal: latency.tpot.p95, above_baseline: 2.0}", "{signal: engine.http_rejections.rate, above: 1}"
            ),
            6,
            "sglang cannot feed it (it does not expose engine.http_rejections",
        ),
    ],
)
def test_bad_engines_name_file_and_line(mutate, line, needle):
    with pytest.raises(RuleFileError) as exc:
        parse_rule_text(mutate(ENGINE_RULE), "rules/bad.yaml")
    assert needle in str(exc.value)
    assert exc.value.line == line, str(exc.value)
    assert str(exc.value).startswith(f"rules/bad.yaml:{line}: ")


def test_a_rule_without_engine_signals_must_say_any():
    text = GOOD.replace("scope: gpu", "scope: gpu\n        engines: [vllm]")
    with pytest.raises(RuleFileError, match="reads no engine signal: write `engines: \\[any\\]`") as exc:
        parse_rule_text(text, "rules/bad.yaml")
    assert exc.value.line == 6  # the engines: line


def test_an_any_branch_an_engine_can_feed_is_enough():
    text = ENGINE_RULE.replace("[vllm, tgi, nim]", "[vllm, tgi]").replace(
        "          {signal: latency.tpot.p95, above_baseline: 2.0}\n",
        "          any:\n"
        "            - {signal: latency.ttft.p99, above: {signal: sla.ttft_p99}}\n"
        "            - {signal: latency.queue.p99, above: {signal: sla.ttft_p99}}\n",
    )
    [rule] = parse_rule_text(text, "x.yaml")
    assert [e.value for e in rule.engines] == ["vllm", "tgi"]


def test_default_pack_engines_load():
    rs = load_rules(REPO_RULES)
    declared = {r.name: [e.value for e in r.engines] for r in rs.rules if r.engines is not None}
    assert all(declared.values())
