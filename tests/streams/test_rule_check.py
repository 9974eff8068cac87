"""``tailhound rules check`` (streams/ruleset/check.py): every problem of every file, at its line and column, with
a hint; duplicate keys, placeholders, Prometheus durations, GitHub annotations and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tailhound.streams.ruleset.check import Problem, check_paths, check_text

ROOT = Path(__file__).resolve().parents[2]

BAD = """\
groups:
  - name: g
    rules:
      - name: hot
        scope: gpu
        when:
          all:
            - {signal: gpu.temperature, above: 80}
            - {signal: gpu.temprature, above: 80}
        for: 1h30m
        for: 30m
        severity: critcal
        root_cause: gpu-thermal-throttle
        actions: ["check {gpuz} on {node}"]
      - name: hot
        scope: gpu
        whn: {signal: gpu.temperature, above: 80}
        root_cause: gpu-thermal-throttle
      - name: fine
        scope: node
        when: {signal: gpu.temperature, above: 80}
        root_cause: gpu-thermal-throttle
        actions: ["{node}: hottest {max(gpu.temperature)}"]
"""


def texts(problems: list[Problem]) -> list[str]:
    return [p.text() for p in problems]


def test_every_problem_of_the_file_at_its_line_and_column_with_a_hint(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    problems, count = check_paths([f])
    assert count == 3
    assert texts(problems) == [
        f"{f}:9:24: rule hot: unknown signal 'gpu.temprature' (did you mean 'gpu.temperature'?)",
        f"{f}:11:9: duplicate key 'for' (first at line 10; YAML keeps only the last one)",
        f"{f}:12:19: rule hot: severity: Input should be 'info', 'warning' or 'critical' (did you mean 'critical'?)",
        f"{f}:14:26: rule hot: action placeholder {{gpuz}} names nothing this rule reports (people would "
        "read n/a) (did you mean 'gpus'?)",
        f"{f}:15: rule 'hot' is defined twice (also at {f}:4)",
        f"{f}:15:9: rule hot: missing key 'when'",
        f"{f}:17:9: rule hot: unknown key 'whn' (did you mean 'when'?)",
        f"{f}:21:24: rule fine: signal gpu.temperature is per gpu, the rule's scope is node (add `reduce: "
        "max|min|mean|sum|count` to fold it onto the rule's scope)",
        f"{f}:23:36: rule fine: action placeholder {{max(gpu.temperature)}} names nothing this rule reports "
        "(people would read n/a) (did you mean 'gpu.temperature'?)",
    ]


def test_all_files_and_rules_defined_in_two_files(tmp_path):
    one = tmp_path / "a.yaml"
    two = tmp_path / "b.yaml"
    rule = (
        "groups:\n  - name: g\n    rules:\n      - name: same\n        scope: gpu\n"
        "        when: {signal: gpu.temperature, above: 80}\n        for: 1h30m\n"
        "        root_cause: gpu-thermal-throttle\n"
    )
    one.write_text(rule)
    two.write_text("# another team's file\n" + rule + "oops: 1\n")
    problems, count = check_paths([tmp_path])
    assert count == 2
    assert texts(problems) == [
        f"{two}:5: rule 'same' is defined twice (also at {one}:4)",
        f"{two}:10:1: unknown key 'oops' in a rule file (valid keys here: groups)",
    ]


def test_conditions_deep_inside_name_their_path_and_nearest_key():
    text = (
        "groups:\n  - name: g\n    rules:\n      - name: r\n        scope: engine\n        when:\n"
        "          any:\n            - {signal: latency.ttft.p99, abve: 1}\n        symptom: true\n"
    )
    problems, _ = check_text(text, "r.yaml")
    assert [p.text() for p in problems] == [
        "r.yaml:8:42: rule r: when.any[0]: unknown key 'abve' (did you mean 'above'?)"
    ]


def test_yaml_syntax_errors_and_the_default_pack():
    problems, _ = check_text("groups: [\n", "x.yaml")
    assert problems[0].path == "x.yaml" and problems[0].line == 2 and "invalid YAML" in problems[0].message
    problems, count = check_paths([ROOT / "rules"])
    assert problems == [] and count >= 20


def test_github_annotations_escape_what_the_format_needs():
    p = Problem("rules/a,b.yaml", 3, 7, "bad: thing\nsecond line", "did you mean 'x'?")
    assert p.github("tailhound rules check") == (
        "::error file=rules/a%2Cb.yaml,line=3,col=7,title=tailhound rules check::"
        "bad: thing%0Asecond line (did you mean 'x'?)"
    )


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tailhound", "rules", "check", *args], capture_output=True, text=True, timeout=60
    )


def test_exit_codes_and_formats(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    ok = run(str(ROOT / "rules" / "gpu.yaml"), str(ROOT / "rules" / "engine.yaml"))
    assert ok.returncode == 0 and ok.stdout == "" and "rules OK" in ok.stderr
    found = run("--format", "github", str(bad))
    assert found.returncode == 1
    assert found.stdout.splitlines()[0].startswith(f"::error file={bad},line=9,col=24,title=tailhound rules check::")
    assert "9 problems in 1 files (3 rules read)" in found.stderr
    missing = run(str(ROOT / "rules"), str(tmp_path / "nope"))
    assert missing.returncode == 2 and "no such file or directory" in missing.stdout
