"""`tailhound capacity` through Typer's CliRunner: load test results, recordings, outputs and errors."""

from __future__ import annotations

import gzip
import json

import pytest
import typer
import yaml
from typer.testing import CliRunner

from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.capacity.capacity_cli import input_kind, register
from tailhound.capacity.model import CapacityRecommendation
from tailhound.capacity_file import load_capacity_file
from tests.capacity.cli_app import app_with
from tests.capacity.test_recommend import MODEL, concurrency_test, rate_test

ENV = {"COLUMNS": "200", "NO_COLOR": "1"}


def app() -> typer.Typer:
    return app_with(register)


def invoke(*args: str):
    return CliRunner().invoke(app(), ["capacity", *map(str, args)], env=ENV)


@pytest.fixture
def result_file(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(rate_test().model_dump_json(indent=2), encoding="utf-8")
    return path


def test_table_capacity_file_and_plots(result_file, tmp_path):
    out, plots = tmp_path / "capacity.yaml", tmp_path / "plots"
    r = invoke(result_file, "--out", out, "--plots", plots)
    assert r.exit_code == 0, r.output
    text = r.stdout
    for needed in (
        "TTFT knee (P95)",
        "TPOT knee (P95)",
        "throughput plateau",
        "TPOT outpaces throughput",
        "safe request rate",
        "max_num_seqs",
        "queue scale-out",
        "KEDA queue threshold",
        "KEDA batch threshold",
        "from the TPOT knee",
        "loadtest:result.json",
    ):
        assert needed in text, needed
    snippet = text[text.index("  # " + MODEL) :]
    triggers = yaml.safe_load(snippet)["triggers"]
    assert [t["name"] for t in triggers] == ["queue", "batch"]
    assert triggers[0]["metadata"]["threshold"] == "2.5"

    cf = load_capacity_file(out)
    t = cf.models[MODEL]
    assert t.queue_scale_out == 2.5 and cf.source == "loadtest:result.json"
    assert float(triggers[1]["metadata"]["threshold"]) == pytest.approx(0.8 * t.max_num_seqs)
    assert sorted(p.name for p in plots.iterdir()) == sorted(
        f"meta-llama_Llama-3.1-70B-Instruct-{k}.png" for k in ("ttft", "tpot", "throughput")
    )
    assert f"wrote {out}" in r.stderr and "wrote " + str(plots) in r.stderr


def test_json_and_p99(result_file, tmp_path):
    conc = tmp_path / "conc.json"
    conc.write_text(concurrency_test().model_copy(update={"model": "other"}).model_dump_json(), encoding="utf-8")
    r = invoke(result_file, conc, "--format", "json", "--percentile", "p99")
    assert r.exit_code == 0, r.output
    recs = [CapacityRecommendation.model_validate(d) for d in json.loads(r.stdout)]
    assert [(x.model, x.load_unit, x.source) for x in recs] == [
        (MODEL, "requests_per_s", "loadtest:result.json"),
        ("other", "concurrency", "loadtest:conc.json"),
    ]
    assert recs[1].ttft_knee is not None and abs(recs[1].ttft_knee.load - 256) <= 26


def test_model_pattern(result_file, tmp_path):
    out = tmp_path / "c.yaml"
    assert invoke(result_file, "--out", out, "--model-pattern", "meta-llama/*").exit_code == 0
    assert list(load_capacity_file(out).models) == ["meta-llama/*"]
    two = tmp_path / "two.json"
    two.write_text(rate_test().model_copy(update={"model": "b"}).model_dump_json(), encoding="utf-8")
    r = invoke(result_file, two, "--out", out, "--model-pattern", "*")
    assert r.exit_code == 2 and "names one model" in r.stderr


def test_recordings_are_telemetry(tmp_path):
    rec = tmp_path / "fleet.jsonl"
    sim = FleetSimulator(
        SimConfig(nodes=1, sources=("vllm", "dcgm"), seed=3, start_ts=1_767_258_000.0),
        [FaultSpec("slow-node", 0, node="*")],
    )
    write_recording(sim, 60, rec)
    assert input_kind(rec) == "recording"
    packed = tmp_path / "fleet.jsonl.gz"
    packed.write_bytes(gzip.compress(rec.read_bytes()))
    assert input_kind(packed) == "recording"
    out = tmp_path / "capacity.yaml"
    r = invoke(packed, "--bins", "8", "--format", "json", "--out", out)
    assert r.exit_code == 0, r.output
    [data] = json.loads(r.stdout)
    assert data["source"] == "telemetry:fleet.jsonl.gz" and data["model"] == MODEL
    assert load_capacity_file(out).source == "telemetry:fleet.jsonl.gz"


def test_bad_inputs(tmp_path, result_file):
    junk = tmp_path / "junk.json"
    junk.write_text('{"hello": 1}\n', encoding="utf-8")
    assert input_kind(junk) == "loadtest" and input_kind(result_file) == "loadtest"
    r = invoke(junk)
    assert r.exit_code == 2 and "neither a load test result" in r.stderr
    r = invoke(result_file, "--percentile", "p90")
    assert r.exit_code == 2 and "--percentile 'p90'" in r.stderr
    r = invoke(result_file, "--format", "yaml")
    assert r.exit_code == 2 and "--format 'yaml'" in r.stderr
    empty = tmp_path / "empty.json"
    empty.write_text(rate_test().model_copy(update={"steps": []}).model_dump_json(), encoding="utf-8")
    r = invoke(empty)
    assert r.exit_code == 2 and "nothing to analyse" in r.stderr
    short = tmp_path / "short.jsonl"
    write_recording(FleetSimulator(SimConfig(nodes=1, sources=("vllm",), seed=3)), 1, short)
    r = invoke(short)
    assert r.exit_code == 2 and "no engine telemetry" in r.stderr
    assert invoke(tmp_path / "missing.json").exit_code == 2  # click: does not exist
