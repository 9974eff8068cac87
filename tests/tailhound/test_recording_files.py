"""Recordings on disk: gzip by name when written, by first bytes when read, and nothing read is an error."""

from __future__ import annotations

import gzip
import subprocess
import sys

from typer.testing import CliRunner

from tailhound.cli import app
from tailhound.recording import MAGIC, EmptyRecordingError, ScrapeRecord, compression_of, read_records
from tailhound.rulestest.recordings import iter_recording

runner = CliRunner()
LINE = ScrapeRecord(ts=1000.0, node="n1", job="vllm", body="vllm:num_requests_waiting 3\n").to_line() + "\n"


def test_simulate_record_gz_writes_gzip_that_replay_reads(tmp_path):
    out = tmp_path / "x.jsonl.gz"
    made = runner.invoke(app, ["simulate", "--minutes", "2", "--nodes", "1", "--record", str(out)])
    assert made.exit_code == 0, made.output
    assert out.read_bytes().startswith(MAGIC["gzip"])
    with gzip.open(out, "rt", encoding="utf-8") as fh:
        lines = sum(1 for _ in fh)
    assert lines > 0 and f"wrote {lines} records" in made.output
    replayed = runner.invoke(app, ["replay", str(out)])
    assert replayed.exit_code == 0, replayed.output
    assert f"replayed {lines} records" in replayed.output


def test_plain_text_is_read_whatever_its_name_and_gzip_whatever_its_name(tmp_path):
    plain_named_gz = tmp_path / "plain.jsonl.gz"
    plain_named_gz.write_text(LINE * 3, encoding="utf-8")
    gzip_named_plain = tmp_path / "packed.jsonl"
    gzip_named_plain.write_bytes(gzip.compress((LINE * 2).encode()))
    assert compression_of(plain_named_gz) is None and compression_of(gzip_named_plain) == "gzip"
    assert len(list(read_records(plain_named_gz))) == 3
    assert len(list(read_records(gzip_named_plain))) == 2
    assert len(list(iter_recording(plain_named_gz))) == 3
    assert len(list(iter_recording(gzip_named_plain))) == 2


def test_agent_record_writes_gzip_for_a_gz_name(tmp_path):
    import asyncio

    from tailhound.agents.config import AgentConfig
    from tailhound.agents.main import run_record

    out = tmp_path / "rec.jsonl.gz"
    cfg = AgentConfig(listen=None, procnet={"interval_s": 0.2})
    n = asyncio.run(run_record(cfg, out, duration_s=0.5))
    assert n > 0 and out.read_bytes().startswith(MAGIC["gzip"])
    assert len(list(read_records(out))) == n


def test_replay_of_nothing_exits_non_zero_and_says_so(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tailhound", "replay", str(empty)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"read no records from {empty}" in proc.stderr


def test_doctor_and_backtest_refuse_an_empty_recording(tmp_path):
    empty = tmp_path / "empty.jsonl.gz"
    empty.write_bytes(gzip.compress(b""))
    for args in (["doctor", str(empty)], ["rules", "backtest", "--no-progress", str(empty)]):
        result = runner.invoke(app, args)
        assert isinstance(result.exception, EmptyRecordingError), (args, result.output)
