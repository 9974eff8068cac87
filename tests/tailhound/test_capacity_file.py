"""The capacity file (tailhound/capacity_file.py): strict, errors at their line, the capacity.* limits per
model pattern, and the rule that reads them firing only where a file gives them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tailhound.capacity_file import CAPACITY_SIGNALS, capacity_limits, load_capacity_file
from tailhound.cli import app
from tailhound.doctor.observed import Observed
from tailhound.doctor.report import diagnose
from tailhound.errors import ConfigFileError
from tailhound.streams.coverage import COMPUTED_SIGNALS, CONFIGURED_SIGNALS, problem_lines
from tailhound.streams.extract import SLA_SIGNALS
from tailhound.streams.ruleset.rulefile import load_rules

ROOT = Path(__file__).resolve().parents[2]
GOOD = """\
schema_version: 1
generated_at: 1767225600
source: loadtest:result.json
models:
  "meta-llama/Llama-3.1-70B*": {safe_request_rate: 9.5, queue_scale_out: 4, max_num_seqs: 96, ttft_knee_s: 0.8}
  "*": {safe_request_rate: 3, queue_scale_out: 2, max_num_seqs: 32}
"""


def test_limits_per_signal_and_model_pattern_in_file_order(tmp_path):
    path = tmp_path / "capacity.yaml"
    path.write_text(GOOD)
    limits = capacity_limits(path)
    assert limits["capacity.safe_request_rate"] == {"meta-llama/Llama-3.1-70B*": 9.5, "*": 3.0}
    assert list(limits["capacity.queue_scale_out"]) == ["meta-llama/Llama-3.1-70B*", "*"]  # first match wins
    assert limits["capacity.ttft_knee_s"] == {"meta-llama/Llama-3.1-70B*": 0.8}  # only where measured
    assert "capacity.tpot_knee_s" not in limits
    assert capacity_limits(None) == {}
    assert set(CAPACITY_SIGNALS) <= set(SLA_SIGNALS)  # per engine, by the engine's model, like sla.ttft_p99


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (GOOD.replace("safe_request_rate: 3,", "safe_request_rate: 0,"), ":6:"),
        (GOOD.replace("max_num_seqs: 32", "max_num_seqs: 32, burst: 5"), ":6:"),
        (GOOD.replace("models:\n", "models: {}\nx:\n"), "capacity.yaml"),
        (GOOD.replace("9.5", ".nan"), ":5:"),
    ],
)
def test_a_bad_file_is_refused_naming_its_line(tmp_path, text, says):
    path = tmp_path / "capacity.yaml"
    path.write_text(text)
    with pytest.raises(ConfigFileError) as err:
        load_capacity_file(path)
    assert says in str(err.value) and "capacity.yaml" in str(err.value)


def test_without_a_capacity_file_the_rule_reading_it_is_blind_and_doctor_says_how_to_make_one():
    assert set(CAPACITY_SIGNALS) == CONFIGURED_SIGNALS and not CONFIGURED_SIGNALS & set(COMPUTED_SIGNALS)
    rules = load_rules(ROOT / "rules")
    observed = Observed()
    observed.add(
        "vllm", "n1", ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:e2e_request_latency_seconds"]
    )

    def coverage_of(report):
        return next(c for c in report.rules if c.rule == "load-above-tested-capacity")

    blind = coverage_of(diagnose(rules, observed))
    assert blind.status == "blind" and "capacity.safe_request_rate" in blind.missing
    assert any("tailhound capacity" in line and "streams.capacity_file" in line for line in problem_lines(blind))
    with_file = coverage_of(diagnose(rules, observed, configured=CAPACITY_SIGNALS))
    assert with_file.status == "ok", problem_lines(with_file)


def test_the_rule_reading_the_file_fires_only_with_one(tmp_path):
    tests = yaml.safe_load((ROOT / "rules" / "tests" / "capacity.yaml").read_text())
    tests["rule_files"] = [str(ROOT / "rules")]
    with_file = tmp_path / "with.yaml"
    with_file.write_text(yaml.safe_dump(tests))
    runner = CliRunner()
    assert runner.invoke(app, ["rules", "test", str(with_file)]).exit_code == 0
    del tests["capacity"]  # no capacity file: the signals are absent, the rule cannot fire
    without = tmp_path / "without.yaml"
    without.write_text(yaml.safe_dump(tests))
    out = runner.invoke(app, ["rules", "test", str(without)])
    assert out.exit_code == 1 and "load-above-tested-capacity" in out.output
    assert out.output.count("FAILED") >= 1 and "near miss" not in out.output.split("FAILED", 1)[1].split("\n")[0]
