from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from tailhound.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_schema_check_passes_on_the_committed_files():
    result = runner.invoke(app, ["schema", "--check", "--out", str(ROOT / "docs" / "schemas")])
    assert result.exit_code == 0, result.output


def test_schema_writes_files(tmp_path):
    result = runner.invoke(app, ["schema", "--out", str(tmp_path)])
    assert result.exit_code == 0
    assert (tmp_path / "snapshot.schema.json").is_file()
    assert runner.invoke(app, ["schema", "--check", "--out", str(tmp_path)]).exit_code == 0


def test_rules_check_ok_and_error_names_file_and_line(tmp_path):
    ok = runner.invoke(app, ["rules", "check", str(ROOT / "rules")])
    assert ok.exit_code == 0 and "rules OK" in ok.output
    (tmp_path / "bad.yaml").write_text("groups:\n  - name: g\n    rules:\n      - name: x\n        scope: gpu\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "rules", "check", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 1
    assert f"{tmp_path / 'bad.yaml'}:4:9: rule x: missing key 'when'" in proc.stdout
    assert "1 problems in 1 files" in proc.stderr


def test_simulate_without_broker_says_how_to_configure_one():
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILHOUND_")}
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "simulate"], capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 2
    assert "TAILHOUND_BROKER=kafka://host:9092" in proc.stderr


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and "tailhound" in result.output


def test_simulate_records_a_tgi_fleet_on_default_dcgm_counters(tmp_path):
    out = tmp_path / "tgi.jsonl"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--record",
            str(out),
            "--minutes",
            "1",
            "--nodes",
            "1",
            "--engine",
            "tgi",
            "--dcgm-fields",
            "default",
            "--noise",
            "realistic",
        ],
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert '"job":"tgi"' in text and "tgi_queue_size" in text and "vllm:" not in text
    assert "DCGM_FI_DEV_GPU_TEMP" in text and "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" not in text


def test_generated_docs_go_to_stdout_unless_told_where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["catalog"])
    assert result.exit_code == 0 and result.output.startswith("# Signal catalog")
    assert list(tmp_path.iterdir()) == []
    target = tmp_path / "out" / "deeper" / "signals.md"
    assert runner.invoke(app, ["catalog", "--out", str(target)]).exit_code == 0 and target.is_file()
    assert runner.invoke(app, ["catalog", "--out", str(target), "--check"]).exit_code == 0
    assert runner.invoke(app, ["rules", "doc", "--check"]).exit_code != 0  # --check needs --out


def test_example_lists_and_prints_the_bundled_configs():
    listed = runner.invoke(app, ["example"])
    assert listed.exit_code == 0 and "notifier-production" in listed.output and "agent" in listed.output
    assert "receivers:" in runner.invoke(app, ["example", "notifier"]).output
    assert runner.invoke(app, ["example", "nope"]).exit_code != 0
    as_json = json.loads(runner.invoke(app, ["example", "-o", "json"]).output)
    assert {"name": "agent", "file": "agent.yaml"}.items() <= next(e for e in as_json if e["name"] == "agent").items()
