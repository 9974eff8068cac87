"""`tailhound rules test`: the rule pack's own tests pass, every rule has a firing case and a near miss,
failures print expected against got, errors in test files name the file and line, and the inputs become
scrapes that the agent's pipeline turns into the snapshots a real exporter would give."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import default_catalog
from tailhound.rulestest.inputs import NodeSetup, SeriesInput, SeriesRenderer
from tailhound.rulestest.unit import format_file_result, run_file
from tailhound.rulestest.unit_file import load_test_file
from tailhound.streams.histograms import histogram_quantile
from tailhound.streams.ruleset.rulefile import load_rules

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
PACK_TESTS = sorted((RULES / "tests").glob("*.yaml"))
START = 1_767_225_600.0


def tailhound(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailhound", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def write(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return p


# --- the pack's own tests ------------------------------------------------------------------------------


def test_the_rule_packs_own_tests_pass():
    """What a pre-commit hook runs: `tailhound rules test rules/tests/*.yaml` (its time: bench/offline_tools.py)."""
    proc = tailhound("rules", "test", *(str(p.relative_to(ROOT)) for p in PACK_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(PACK_TESTS) == 7  # one per file of rules/tests
    assert "FAILED" not in proc.stdout


def test_every_rule_of_the_pack_fires_in_a_test_and_has_a_near_miss():
    rules = {r.name for r in load_rules(RULES).rules}
    fires: set[str] = set()
    near_misses: set[str] = set()
    for path in PACK_TESTS:
        tf, _ = load_test_file(path)
        assert tf.rule_files == [".."], f"{path}: test the pack next to the tests"
        for test in tf.tests:
            m = re.match(r"near miss \(([^)]*)\)", test.name)
            if m:
                near_misses.update(n.strip() for n in m.group(1).split(","))
            for check in test.expect:
                for inc in check.incidents:
                    fires.update([inc.rule] if inc.rule else [])
                    fires.update(inc.rules or [])
    assert rules - fires == set(), "rules no test sees fire"
    assert rules - near_misses == set(), "rules without a near-miss test (name it `near miss (<rule>) - ...`)"
    assert near_misses - rules == set(), "near misses of unknown rules"


def test_the_bundled_tests_run_without_files_and_against_another_rules_dir(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    for p in RULES.glob("*.yaml"):  # the pack with the thermal rule slower to fire
        text = p.read_text(encoding="utf-8")
        if p.name == "gpu.yaml":
            text = text.replace(
                "        for: 1m\n        keep_firing_for: 1m\n        severity: critical\n"
                "        root_cause: gpu-thermal-throttle",
                "        for: 10m\n        keep_firing_for: 1m\n        severity: critical\n"
                "        root_cause: gpu-thermal-throttle",
            )
            assert "for: 10m" in text
        (rules / p.name).write_text(text, encoding="utf-8")
    proc = tailhound("rules", "test", "--rules", str(rules), "--run", "gpu-thermal-throttle (with|seen)")
    assert proc.returncode == 1
    assert "FAILED (2 of 2 tests)" in proc.stdout
    proc = tailhound("rules", "test", "--run", "^gpu-thermal-throttle")
    assert proc.returncode == 0, proc.stdout
    assert "tests/gpu.yaml" in proc.stdout and "SUCCESS (3 tests" in proc.stdout


# --- failures and errors -------------------------------------------------------------------------------

THERMAL = """
    rule_files: [{rules}]
    tests:
      - name: two hot GPUs
        input_series:
          - series: gpu.temperature{{gpu="3"}}
            values: 60x19 90x20
          - series: gpu.sm_clock{{gpu="3"}}
            values: 1980x19 1100x20
          - series: gpu.sm_clock_max{{gpu="3"}}
            values: 1980x39
        expect:
          - eval_time: 4m
            incidents: []
          - eval_time: 8m
            incidents:
              - root_cause: gpu-thermal-throttle
                scope: {{node: gpu-node-1, gpus: [3, 5]}}
"""


def test_a_failure_prints_expected_against_got_and_exits_1(tmp_path):
    path = write(tmp_path, THERMAL.format(rules=RULES))
    proc = tailhound("rules", "test", str(path))
    assert proc.returncode == 1, proc.stdout
    out = proc.stdout
    assert f"Unit Testing: {path}" in out and "FAILED (1 of 1 tests)" in out
    assert "test: two hot GPUs" in out and f"{path}:14" in out  # the expectation's line
    assert "eval_time: 8m" in out and "eval_time: 4m" not in out  # only the failed check
    exp, got = out.split("exp:")[1].split("got:")
    assert "gpus: ['3', '5']" in exp
    assert "gpus: ['3']" in got and "rule: gpu-thermal-throttle" in got and "opened_at: 6m" in got
    assert "exp[0] vs got[0]: scope.gpus: expected ['3', '5'], got ['3']" in got


def test_a_passing_file_says_success(tmp_path):
    path = write(tmp_path, THERMAL.format(rules=RULES).replace("[3, 5]", "[3]"))
    res = run_file(path)
    assert res.ok and res.tests == res.passed == 1
    assert "SUCCESS (1 tests" in format_file_result(res)


@pytest.mark.parametrize(
    ("body", "line", "says"),
    [
        ("tests:\n  - name: x\n    input_series: [\n", 4, "invalid YAML"),
        (
            "tests:\n  - name: x\n    input_series:\n      - series: a\n        values: 1\n        colour: red\n"
            "    expect: [{eval_time: 1m, incidents: []}]\n",
            6,
            "colour: Extra inputs",
        ),
        (
            'tests:\n  - name: x\n    input_series:\n      - series: gpu.temperature{gpu="0"}\n'
            "        values: 1 2 stale\n    expect: [{eval_time: 1m, incidents: []}]\n",
            5,
            "column 5",
        ),
        (
            'tests:\n  - name: x\n    input_series:\n      - series: gpu.temprature{gpu="0"}\n'
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            4,
            "unknown signal 'gpu.temprature'",
        ),
        (
            'tests:\n  - name: x\n    input_series:\n      - series: gpu.sm_clock_ratio{gpu="0"}\n'
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            4,
            "gpu.sm_clock / gpu.sm_clock_max",
        ),
        (
            "tests:\n  - name: x\n    input_series:\n      - series: latency.ttft.p99\n"
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            4,
            "window statistic of the histogram",
        ),
        (
            "tests:\n  - name: x\n    input_series:\n      - series: gpu.temperature\n"
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            4,
            "is per gpu",
        ),
        (
            "tests:\n  - name: x\n    input_series:\n      - series: my_exporter_metric\n"
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            4,
            "`source:`",
        ),
        (
            'tests:\n  - name: x\n    input_series:\n      - series: gpu.temperature{gpu="0"}\n        source: vllm\n'
            "        values: 1\n    expect: [{eval_time: 1m, incidents: []}]\n",
            5,
            "has no 'vllm' source",
        ),
        (
            "rule_files: [nowhere/]\ntests:\n  - name: x\n    input_series: [{series: a, values: 1}]\n"
            "    expect: [{eval_time: 1m, incidents: []}]\n",
            1,
            "no such file or directory",
        ),
        (
            "tests:\n  - name: x\n    input_series: [{series: a, values: 1}]\n"
            "    expect: [{eval_time: 1m, incidents: [{root_cause: capacity, sevrity: critical}]}]\n",
            4,
            "sevrity",
        ),
        (
            "tests:\n  - name: x\n    input_series: [{series: a, values: 1}]\n"
            "    expect: [{eval_time: 1m, incidents: [{cause: gpu-thermal-throtle}]}]\n",
            4,
            "Input should be",
        ),
        (
            "tests:\n  - name: x\n    input_series: [{series: net.time_wait, values: 1}]\n    expect:\n"
            "      - eval_time: 1m\n        rule: ingress-saturatd\n        incidents: []\n",
            6,
            "no rule named 'ingress-saturatd' in the rule files (did you mean 'ingress-saturated'?)",
        ),
    ],
)
def test_errors_in_a_test_file_name_the_file_and_line(tmp_path, body, line, says):
    path = tmp_path / "bad.yaml"
    path.write_text(body, encoding="utf-8")
    res = run_file(path)
    assert not res.ok and res.error is not None
    assert res.error.startswith(f"{path}:{line}:"), res.error
    assert says in res.error


def test_a_broken_file_does_not_stop_the_others_and_exits_1(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tests: [", encoding="utf-8")
    good = write(tmp_path, THERMAL.format(rules=RULES).replace("[3, 5]", "[3]"), "good.yaml")
    proc = tailhound("rules", "test", str(bad), str(good))
    assert proc.returncode == 1
    assert f"ERROR: {bad}:1: invalid YAML" in proc.stdout
    assert "SUCCESS (1 tests" in proc.stdout


# --- inputs -> scrapes -> snapshots --------------------------------------------------------------------


def _snapshots(series: list[SeriesInput], nodes: dict[str, NodeSetup] | None = None, interval: float = 15.0):
    r = SeriesRenderer(default_catalog(), interval, START, nodes or {})
    for s in series:
        r.add(s)
    builder = SnapshotBuilder()
    return r, [builder.build(rec) for rec in r.records()]


def test_canonical_signals_render_as_the_exporters_metric_in_its_unit():
    r, snaps = _snapshots(
        [
            SeriesInput(series="gpu.util", values="0.9 0.5", node="n1", each={"gpu": ["0", "1"]}),
            SeriesInput(series='gpu.temperature{gpu="1"}', values="70 _", node="n1"),
            SeriesInput(series="probe.http_connect_duration", values="0.002", node="n1"),
        ]
    )
    dcgm = [s for s in snaps if s.source == "dcgm"]
    assert [s.ts for s in dcgm] == [START, START + 15]
    assert {(s.name, s.labels["gpu"], s.value) for s in dcgm[0].samples} == {
        ("DCGM_FI_DEV_GPU_UTIL", "0", 90.0),
        ("DCGM_FI_DEV_GPU_UTIL", "1", 90.0),
        ("DCGM_FI_DEV_GPU_TEMP", "1", 70.0),
    }
    assert {s.name for s in dcgm[1].samples} == {"DCGM_FI_DEV_GPU_UTIL"}  # `_`: not in that scrape
    (probe,) = [s for s in snaps if s.source == "blackbox"]
    assert probe.samples[0].name == "probe_http_duration_seconds" and probe.samples[0].labels == {"phase": "connect"}
    with pytest.raises(ValueError, match="is per gpu"):
        r.add(SeriesInput(series="gpu.util", values="1", node="n1"))


def test_counters_become_deltas_as_from_real_scrapes_and_rates_are_summed_up():
    _, snaps = _snapshots(
        [
            SeriesInput(series="engine.preemptions", values="0 5 12 3", node="n1"),  # a restart at the end
            SeriesInput(series="net.tcp_out_segs.rate", values="100x3", node="n1"),
        ]
    )
    vllm = [s for s in snaps if s.source == "vllm"]
    pre = [s.samples[0] for s in vllm]
    assert [p.delta for p in pre] == [None, 5.0, 7.0, 3.0] and pre[3].reset
    assert vllm[0].labels == {"model_name": "test-model", "engine": "0"}
    node = [s.samples[0] for s in snaps if s.source == "node"]
    assert node[0].name == "node_netstat_Tcp_OutSegs"
    assert [n.value for n in node] == [1500.0, 3000.0, 4500.0, 6000.0]
    assert [n.delta for n in node[1:]] == [1500.0] * 3


def test_histogram_shorthand_gives_exact_means_and_bucket_percentiles():
    _, snaps = _snapshots([SeriesInput(series="latency.tpot", values="0.03x2 0.2", count="10 10 20 20", node="n1")])
    hists = [s.samples[0] for s in snaps]
    assert hists[0].name == "vllm:request_time_per_output_token_seconds" and hists[0].delta is None
    d = hists[3].delta
    assert d.count == 20 and d.sum == pytest.approx(4.0)  # 20 observations of 0.2 s: mean exactly 0.2
    assert histogram_quantile(0.95, hists[3].le, d.counts, d.count) == pytest.approx(0.1975)  # in (0.15, 0.2]
    d1 = hists[1].delta
    assert histogram_quantile(0.95, hists[1].le, d1.counts, d1.count) == pytest.approx(0.04875)  # (0.025, 0.05]


def test_raw_exporter_metrics_with_their_source_and_raw_histogram_buckets():
    _, snaps = _snapshots(
        [
            SeriesInput(series='DCGM_FI_DEV_GPU_TEMP{gpu="3"}', values="88", node="n1", source="dcgm"),
            SeriesInput(series='vllm:time_to_first_token_seconds_bucket{le="0.5"}', values="0 6", node="n1"),
            SeriesInput(series='vllm:time_to_first_token_seconds_bucket{le="+Inf"}', values="0 10", node="n1"),
            SeriesInput(series="vllm:time_to_first_token_seconds_sum", values="0 4", node="n1"),
            SeriesInput(series="vllm:time_to_first_token_seconds_count", values="0 10", node="n1"),
        ],
        nodes={"n1": NodeSetup(model="m")},
    )
    (dcgm,) = [s for s in snaps if s.source == "dcgm"]
    assert dcgm.samples[0].name == "DCGM_FI_DEV_GPU_TEMP" and dcgm.samples[0].value == 88
    ttft = [s.samples[0] for s in snaps if s.source == "vllm"]
    assert ttft[1].kind == "histogram" and ttft[1].le == [0.5] and ttft[1].delta.counts == [6.0]
    assert ttft[1].delta.count == 10 and ttft[1].delta.sum == 4


def test_each_repeats_a_series_over_labels_and_nodes_and_tgi_nodes_speak_tgi():
    r, snaps = _snapshots(
        [
            SeriesInput(series="engine.requests_waiting", values="3", node="x", each={"node": ["a", "b"]}),
            SeriesInput(
                series="gpu.nvlink_up", values="1", node="a", each={"gpu": ["0", "1"], "link": ["0", "1", "2"]}
            ),
        ],
        nodes={"b": NodeSetup(engine="tgi", gpu_source="nvml")},
    )
    by = {(s.node, s.source): s for s in snaps}
    assert by[("a", "vllm")].samples[0].name == "vllm:num_requests_waiting"
    assert by[("b", "tgi")].samples[0].name == "tgi_queue_size"
    assert by[("b", "tgi")].labels == {"model_name": "test-model", "instance": "b:8000"}
    assert len(by[("a", "nvml")].samples) == 6


def test_series_are_read_as_written_not_as_yaml_numbers(tmp_path):
    """YAML 1.1 reads `0x10` as 16 and `1_0` as 10; a series means `0` repeated, and `1_0` is an error."""
    path = write(
        tmp_path,
        """
        tests:
          - name: x
            input_series:
              - series: engine.requests_waiting
                values: 0x10
                count: 1_0
            expect: [{eval_time: 1m, incidents: []}]
    """,
    )
    tf, _ = load_test_file(path)
    assert tf.tests[0].input_series[0].values == "0x10"
    assert tf.tests[0].input_series[0].count == "1_0"
    res = run_file(path)
    assert res.error is not None and "count" in res.error  # `count` is for histograms
