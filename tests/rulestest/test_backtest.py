"""`tailhound rules backtest` and the readers behind it: per-rule firing, precision/recall/time to detect
against labelled fault windows on simulated recordings, incidents gained and lost against another rule
directory or a git ref, compressed and cut-off recordings, and `tailhound replay`'s table and JSON output."""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import cramjam
import pytest

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.incident import IncidentEvent
from tailhound.recording import RecordingError
from tailhound.rulestest.backtest import run_backtest
from tailhound.rulestest.recordings import ProgressLine, ReadProgress, iter_recording
from tailhound.rulestest.report import render_backtest_table
from tailhound.rulestest.truth import FaultWindow, TruthFile, score

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules"
FAULTS = ("thermal-throttle@4m+6m:node=gpu-node-2:gpus=3,5", "kv-cache-pressure@8m+6m:node=gpu-node-1")
TRUTH = """\
grace: 5m
faults:
  - name: GPUs 3 and 5 of node 2 overheat
    nodes: [gpu-node-2]
    start: 4m
    end: 10m
    root_cause: gpu-thermal-throttle
  - name: long prompts fill node 1's KV cache
    node: gpu-node-1
    start: 8m
    end: 14m
    cause: kv-cache-pressure
  - name: quiet start
    start: 0m
    end: 3m
    root_cause: null
"""


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    """18 minutes of a 2-node fleet with two faults whose windows are known (~600 lines)."""
    path = tmp_path_factory.mktemp("rec") / "fleet.jsonl"
    sim = FleetSimulator(SimConfig(nodes=2, seed=3), [FaultSpec.parse(f) for f in FAULTS])
    write_recording(sim, 18, path)
    return path


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("truth") / "truth.yaml"
    path.write_text(TRUTH, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def backtest(recording, truth):
    return run_backtest([recording], RULES, truth=truth, progress=False)


def tailhound(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailhound", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_per_rule_firing_and_when(backtest):
    per = {s.rule: s for s in backtest.per_rule}
    assert set(per) >= {"gpu-thermal-throttle", "kv-cache-pressure", "retry-storm"}
    assert per["gpu-thermal-throttle"].incidents == per["gpu-thermal-throttle"].as_root == 1
    ((opened, resolved),) = per["gpu-thermal-throttle"].windows
    assert 4 * 60 < opened <= 7 * 60 and resolved is not None and opened < resolved
    assert per["kv-cache-pressure"].incidents == 1
    assert per["retry-storm"].incidents == 0  # rules that never fired are listed too
    assert backtest.end_ts - backtest.start_ts == pytest.approx(18 * 60 - 15)


def test_precision_recall_and_time_to_detect_against_the_truth(backtest):
    t = backtest.truth
    by = {c.root_cause: c for c in t.causes}
    assert set(by) == {"gpu-thermal-throttle", "kv-cache-pressure"}
    for cause in by.values():
        assert (cause.windows, cause.detected, cause.incidents, cause.correct) == (1, 1, 1, 1)
        assert cause.precision == cause.recall == 1.0
        assert 0 < cause.detect_s[0] <= 3 * 60
    assert t.precision == t.recall == 1.0
    assert t.negatives == [] and t.spurious == []


def test_wrong_labels_lower_precision_and_recall(backtest):
    """Scored against a truth that puts the KV fault on the other node and adds an NVLink fault."""
    truth = TruthFile(
        grace=300,
        faults=[
            FaultWindow(nodes=["gpu-node-2"], start="4m", end="10m", root_cause="gpu-thermal-throttle"),
            FaultWindow(nodes=["gpu-node-2"], start="8m", end="14m", root_cause="kv-cache-pressure"),
            FaultWindow(nodes=["gpu-node-1"], start="15m", end="17m", root_cause="nvlink-degraded"),
            FaultWindow(name="no fault expected", start="5m", end="7m", root_cause=None),
        ],
    )
    t = score(backtest.current.incidents, truth, backtest.start_ts)
    by = {c.root_cause: c for c in t.causes}
    assert (by["kv-cache-pressure"].precision, by["kv-cache-pressure"].recall) == (0.0, 0.0)
    assert by["nvlink-degraded"].recall == 0.0 and by["nvlink-degraded"].precision is None
    assert by["nvlink-degraded"].missed == ["nvlink-degraded @ gpu-node-1"]
    assert t.precision == 0.5 and t.recall == pytest.approx(1 / 3)
    assert [i.root_cause for i in t.spurious] == ["kv-cache-pressure"]
    assert [(name, i.root_cause) for name, i in t.negatives] == [("no fault expected", "gpu-thermal-throttle")]


def _modified_rules(dest: Path) -> Path:
    """The pack with the KV-cache rule made blind and the thermal rule held 4 minutes instead of 1."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in RULES.glob("*.yaml"):
        shutil.copy(p, dest / p.name)
    engine = (dest / "engine.yaml").read_text(encoding="utf-8")
    (dest / "engine.yaml").write_text(
        engine.replace(
            "{signal: engine.kv_cache_usage, at_least: 0.95}", "{signal: engine.kv_cache_usage, at_least: 1.5}"
        )
    )
    gpu = (dest / "gpu.yaml").read_text(encoding="utf-8")
    held = gpu.replace(
        "        for: 1m\n        keep_firing_for: 1m\n        severity: critical\n",
        "        for: 4m\n        keep_firing_for: 1m\n        severity: critical\n",
        1,
    )
    assert held != gpu
    (dest / "gpu.yaml").write_text(held, encoding="utf-8")
    return dest


def test_against_a_directory_gains_loses_and_moves_incidents(recording, tmp_path):
    modified = _modified_rules(tmp_path / "modified")
    report = run_backtest([recording], modified, against=str(RULES), progress=False)
    d = report.diff
    assert [i.root_cause for i in d.lost] == ["kv-cache-pressure"] and d.gained == []
    ((old, new),) = d.shifted
    assert old.root_cause == new.root_cause == "gpu-thermal-throttle"
    assert new.opened_at - old.opened_at == pytest.approx(180)  # held 3 minutes longer
    text = render_backtest_table(report)
    assert "2 incidents there, 1 here: 0 gained, 1 lost, 1 opened at another time" in text
    assert "moved +3m" in text and "lost " in text


def test_against_a_git_ref_reads_the_rules_tree_at_that_ref(recording, tmp_path):
    repo = tmp_path / "repo"
    _modified_rules(repo / "rules")
    (repo / "rules" / "tests").mkdir()
    (repo / "rules" / "tests" / "not-a-rule.yaml").write_text("tests: []\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "modified rules"], check=True)
    for p in RULES.glob("*.yaml"):  # the working tree: back to the pack
        shutil.copy(p, repo / "rules" / p.name)
    proc = tailhound(
        "rules",
        "backtest",
        str(recording),
        "--rules",
        str(repo / "rules"),
        "--against",
        "HEAD",
        "--format",
        "json",
        "--no-progress",
    )
    assert proc.returncode == 0, proc.stderr
    against = json.loads(proc.stdout)["against"]
    assert against["ref"] == "HEAD"
    assert [i["root_cause"] for i in against["gained"]] == ["kv-cache-pressure"]
    assert len(against["shifted"]) == 1 and against["lost"] == []
    proc = tailhound(
        "rules", "backtest", str(recording), "--rules", str(repo / "rules"), "--against", "no-such-ref", "--no-progress"
    )
    assert proc.returncode == 2 and "no-such-ref" in proc.stderr


def test_cli_reads_a_gzip_recording_with_a_cut_off_last_line(recording, truth, tmp_path):
    data = recording.read_bytes()
    lines = data.count(b"\n")
    gz = tmp_path / "fleet.jsonl.gz"
    gz.write_bytes(gzip.compress(data[:-200]))  # the writer stopped mid-line
    proc = tailhound(
        "rules", "backtest", str(gz), "--rules", str(RULES), "--truth", str(truth), "-f", "json", "--no-progress"
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning:" in proc.stderr and f"{gz}:{lines}: the last line is cut off" in proc.stderr.replace("\n", "")
    out = json.loads(proc.stdout)
    assert out["current"]["records"] == lines - 1
    assert out["truth"]["precision"] == out["truth"]["recall"] == 1.0


def test_the_table_for_people(backtest):
    text = render_backtest_table(backtest)
    for needle in (
        "per rule",
        "gpu-thermal-throttle",
        "never fired",
        "precision",
        "100%",
        "detect p50",
        "incidents:",
        "opened  resolved",
    ):
        assert needle in text


def test_compressed_and_cut_off_recordings(recording, tmp_path):
    plain = list(iter_recording(recording))
    zst = tmp_path / "fleet.jsonl.zst"
    zst.write_bytes(bytes(cramjam.zstd.compress(recording.read_bytes())))
    assert list(iter_recording(zst)) == plain
    cut_stream = tmp_path / "cut.jsonl.gz"
    cut_stream.write_bytes(gzip.compress(recording.read_bytes())[:-4000])  # the gzip stream itself ends early
    warnings: list[str] = []
    got = list(iter_recording(cut_stream, warnings.append))
    assert 0 < len(got) < len(plain) and got == plain[: len(got)]
    assert any("ends early" in w for w in warnings)
    bad = tmp_path / "bad.jsonl"
    lines = recording.read_text(encoding="utf-8").splitlines(keepends=True)
    bad.write_text(lines[0] + "not json\n" + lines[1], encoding="utf-8")
    with pytest.raises(RecordingError, match=f"{bad}:2:"):
        list(iter_recording(bad))
    complete_but_bad = tmp_path / "last.jsonl"
    complete_but_bad.write_text(lines[0] + "not json\n", encoding="utf-8")  # ends with a newline: not cut off
    with pytest.raises(RecordingError, match=f"{complete_but_bad}:2:"):
        list(iter_recording(complete_but_bad))


def test_progress_counts_records_and_bytes(recording):
    pr = ReadProgress(total_bytes=recording.stat().st_size)
    out = io.StringIO()
    line = ProgressLine("backtest", pr, stream=out, after_s=0)
    n = sum(1 for _ in line.wrap(iter_recording(recording, progress=pr)))
    assert n == pr.records and pr.fraction == 1.0
    assert out.getvalue().startswith("backtest: ") and "100.0%" in out.getvalue()
    quiet = io.StringIO()
    ProgressLine("x", ReadProgress(), stream=quiet, enabled=False).wrap([])
    assert quiet.getvalue() == ""


def test_replay_prints_a_table_for_people_and_json_lines_for_tools(recording):
    table = tailhound("replay", str(recording), "--rules", str(RULES), "--format", "table")
    assert table.returncode == 0, table.stderr
    assert "opened    gpu-thermal-throttle" in table.stdout and "+5m" in table.stdout
    assert "gpu.temperature{gpu=" in table.stdout  # evidence under each event
    js = tailhound("replay", str(recording), "--rules", str(RULES), "-f", "json")
    assert js.returncode == 0, js.stderr
    events = [IncidentEvent.model_validate_json(line) for line in js.stdout.splitlines()]
    assert {e.root_cause for e in events} == {"gpu-thermal-throttle", "kv-cache-pressure"}
    assert "incident events" in js.stderr  # the summary goes to stderr, stdout stays JSON
