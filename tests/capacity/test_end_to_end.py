"""Issue 18 end to end: a load test (locust) against the fake OpenAI-compatible engine on loopback, then
`tailhound capacity` on its result: the report, the plots and the thresholds, with the knees where the fake's
law puts them, and the capacity file a rule reads."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailhound.capacity.fake_engine import EngineLaw
from tailhound.capacity.model import LoadTestResult
from tailhound.capacity_file import capacity_limits, load_capacity_file
from tailhound.cli import app
from tailhound.notifier.webconsole.capacity_page import capacity_page
from tailhound.streams.ruleset.rulefile import load_rules

pytestmark = [pytest.mark.slow, pytest.mark.timing]  # timing: wall-clock bounds, run alone after the parallel part

ROOT = Path(__file__).resolve().parents[2]
PROMPT, OUTPUT = 256, 32
#: the knees found must be within this of the fake's: TPOT starts rising at 4 requests running, the
#: throughput (and, with evenly spaced arrivals, TTFT) bends when its 8 slots are full
TOLERANCE = 0.15


def test_a_load_test_against_the_fake_engine_finds_its_knees_and_writes_the_thresholds(tmp_path):
    law = EngineLaw()
    tpot_knee, capacity = law.knee_rps(PROMPT, OUTPUT), law.capacity_rps(PROMPT, OUTPUT)  # ~24.8 and ~33.5 req/s
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound.capacity.fake_engine", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", proc.stdout.readline())
        assert m, proc.stderr.read()
        result_path = tmp_path / "result.json"
        run = CliRunner().invoke(
            app,
            [
                "loadtest",
                "--target",
                m.group(1),
                "--out",
                str(result_path),
                "--peak",
                "30",
                "--steps",
                "9",
                "--step-s",
                "4",
                "--arrivals",
                "constant",
                "--prompt-tokens",
                str(PROMPT),
                "--output-tokens",
                str(OUTPUT),
                "--max-duration",
                "120",
                "--drain",
                "60",
            ],
        )  # every request finishes: the knees are read from whole steps
        assert run.exit_code == 0, run.output
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    result = LoadTestResult.model_validate_json(result_path.read_text())
    assert "step 9/9" in run.output and result.stopped is None and result.mode == "rate"
    assert result.model == "tailhound/fake-llm" and result.token_mix.prompt_mean == PROMPT
    steps = result.steps
    assert [s.index for s in steps] == list(range(9))
    assert [s.offered for s in steps] == pytest.approx([5 * (i + 1) for i in range(9)])  # up to 1.5x the peak
    assert all(b.started_at >= a.started_at + a.duration_s - 0.5 for a, b in zip(steps, steps[1:], strict=False))
    assert all(s.errors == 0 for s in steps)
    # below capacity the throughput follows the offered load; above it, it plateaus at the capacity
    assert all(s.throughput_rps == pytest.approx(s.offered, rel=0.2) for s in steps[:3])
    assert all(s.throughput_rps == pytest.approx(capacity, rel=0.15) for s in steps[-2:])
    # TTFT: ~8 ms while there are free slots, then the queue's wait; TPOT: base, then the law's full-batch value
    assert steps[-1].ttft.p50 > 20 * steps[0].ttft.p50 and steps[-1].ttft.p50 > 0.1  # (5 req/s x 2.5 s: no P95)
    assert steps[0].tpot.p50 == pytest.approx(law.tpot_s(1), rel=0.25)
    assert steps[-1].tpot.p50 == pytest.approx(law.tpot_s(law.max_num_seqs), rel=0.25)
    # the engine's own view: a full batch and a queue at the top, none at the bottom
    assert steps[0].engine["queue"] == 0 and steps[-1].engine["queue"] > 5
    assert steps[-1].engine["batch"] == pytest.approx(law.max_num_seqs, abs=0.5)

    out, plots = tmp_path / "capacity.yaml", tmp_path / "plots"
    report = CliRunner().invoke(
        app, ["capacity", str(result_path), "--out", str(out), "--plots", str(plots), "--format", "json"]
    )
    assert report.exit_code == 0, report.output
    rec = load_capacity_file(out).models[result.model]
    ttft_knee = re.search(r'"ttft_knee": \{\s*"load": ([0-9.]+)', report.stdout)
    tpot = re.search(r'"tpot_knee": \{\s*"load": ([0-9.]+)', report.stdout)
    assert ttft_knee and tpot, report.stdout
    assert float(ttft_knee.group(1)) == pytest.approx(capacity, rel=TOLERANCE)
    assert float(tpot.group(1)) == pytest.approx(tpot_knee, rel=TOLERANCE)
    # the safe rate is the more conservative knee; the batch and the queue level come with it
    assert rec.safe_request_rate == pytest.approx(tpot_knee, rel=TOLERANCE)
    assert 1 <= rec.max_num_seqs <= law.max_num_seqs and rec.queue_scale_out >= 1
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        f"{re.sub(r'[^A-Za-z0-9._-]', '_', result.model)}-{k}.png" for k in ("ttft", "tpot", "throughput")
    )
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in plots.iterdir())
    # the file is what the worker reads (settings streams.capacity_file): the rule that compares with it loads
    limits = capacity_limits(out)
    assert limits["capacity.safe_request_rate"] == {result.model: rec.safe_request_rate}
    assert "load-above-tested-capacity" in load_rules(ROOT / "rules").index
    # and the incident console's capacity page shows the thresholds with the plots the file lists
    assert len(load_capacity_file(out).plots[result.model]) == 3
    page = capacity_page(out, result.finished_at)
    assert page.count('data-testid="capacity-plot"') == 3 and f'data-model="{result.model}"' in page
