"""``tailhound doctor`` on SGLang pages: which rules an SGLang engine feeds, and what an older SGLang lacks."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from tailhound.catalog import default_catalog
from tailhound.cli import app
from tailhound.doctor.observed import guess_job, read_recordings
from tailhound.doctor.report import diagnose
from tailhound.recording import ScrapeRecord, write_records
from tailhound.resources import default_rules_dir
from tailhound.streams.ruleset.rulefile import load_rules
from tests.tailhound.test_doctor import only_default_counters

FIXTURES = Path(__file__).resolve().parents[1] / "agents" / "fixtures"
TS = 1_764_400_000.0


def recording(path: Path, engine_page: str, engine_job: str = "sglang") -> Path:
    """dcgm-exporter (default counters), an engine page, node_exporter and blackbox_exporter on one node."""
    records = [
        ScrapeRecord(
            ts=TS,
            node="gpu-node-0",
            job="dcgm",
            interval_s=15,
            body=only_default_counters((FIXTURES / "dcgm_exporter.prom").read_text(encoding="utf-8")),
        )
    ]
    for fx, job in ((engine_page, engine_job), ("node_exporter.prom", "node"), ("blackbox.prom", "blackbox")):
        records.append(
            ScrapeRecord(
                ts=TS, node="gpu-node-0", job=job, interval_s=15, body=(FIXTURES / fx).read_text(encoding="utf-8")
            )
        )
    with path.open("w", encoding="utf-8") as fh:
        write_records(fh, records)
    return path


def statuses(path: Path) -> dict[str, tuple[str, tuple[str, ...]]]:
    report = diagnose(load_rules(default_rules_dir()), read_recordings([path]))
    return {c.rule: (c.status, tuple(sorted(c.missing))) for c in report.rules}


def test_doctor_shows_the_engine_rules_an_sglang_page_feeds(tmp_path):
    path = recording(tmp_path / "sglang.jsonl", "sglang.prom")
    result = CliRunner().invoke(app, ["doctor", str(path)])
    assert "sglang (1 node(s), 15 mapped metrics)" in result.output.splitlines()[0]
    got = statuses(path)
    for rule in (
        "capacity-exhausted",
        "node-slowdown",
        "demand-outgrows-node",
        "queue-wait-high",
        "queue-backlog",
        "tail-latency-breach",
        "model-capacity-exhausted",
        "node-slower-than-peers",
    ):
        assert got[rule] == ("ok", ()), (rule, got[rule])
    # only TGI's reserved-token branch is missing: SGLang reports its KV usage directly
    assert got["kv-cache-pressure"] == ("partial", ("engine.batch_max_tokens",))
    assert got["head-of-line-blocking"] == ("partial", ("engine.batch_max_tokens",))
    assert got["retry-storm"][0] == "blind"  # SGLang counts no rejections
    assert re.search(
        r"^vLLM: engine\.http_rejections, engine\.http_requests, latency\.itl \(for "
        r"head-of-line-blocking-long-prompts, retry-storm\); or from TGI$",
        result.output,
        re.M,
    )


def test_node_slower_than_peers_is_fed_by_the_engines_histograms(tmp_path):
    """The model stage computes each engine's TPOT mean and request rate from latency.tpot and latency.e2e: an
    engine page that has both feeds the rule (its gauges are catalogued, but no exporter sends them)."""
    for page, job in (("sglang.prom", "sglang"), ("vllm_v1_dp2.prom", "vllm")):
        got = statuses(recording(tmp_path / f"{job}.jsonl", page, job))
        assert got["node-slower-than-peers"] == ("ok", ()), job


def test_doctor_on_sglangs_2024_page_names_what_newer_releases_add(tmp_path):
    path = tmp_path / "old.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        write_records(
            fh,
            [
                ScrapeRecord(
                    ts=TS,
                    node="gpu-node-0",
                    job="sglang",
                    interval_s=15,
                    body=(FIXTURES / "sglang_docs_2024.prom").read_text(encoding="utf-8"),
                )
            ],
        )
    out = CliRunner().invoke(app, ["doctor", str(path)]).output
    assert re.search(r"^queue-wait-high\s+warning\s+blind\s+symptom\s+latency\.queue$", out, re.M)
    sglang = next(line for line in out.splitlines() if line.startswith("SGLang (sending): "))
    assert "latency.queue" in sglang and "tokens.generation" in sglang
    assert "sglang:queue_time_seconds (recent SGLang releases" in out
    assert "sglang:generation_tokens_histogram (needs SGLang's --collect-tokens-histogram)" in out


def test_an_sglang_target_is_told_from_its_metric_names():
    assert guess_job(["sglang:num_queue_reqs", "sglang:token_usage"], default_catalog()) == "sglang"
