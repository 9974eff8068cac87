"""The streams benchmarks still run, at small sizes (numbers live in BENCHMARKS.md, never in tests)."""

from __future__ import annotations

import pytest

from bench import fleet_telemetry, replay_speed, streams_child, streams_memory, streams_throughput
from bench.__main__ import parse_args
from tailhound.settings import Settings


def test_trivial_faust_app_has_create_apps_settings(tmp_path):
    settings = Settings(broker="kafka://127.0.0.1:1", rules_dir=fleet_telemetry.RULES, streams={"data_dir": tmp_path})
    app, real = streams_child.trivial_app(settings)
    assert streams_child.conf_diff(app, real) == []
    assert list(app.agents) == ["count"]


def test_fleet_messages_are_keyed_snapshots_with_deltas():
    messages = fleet_telemetry.fleet_messages(16, nodes=2)
    assert len(messages) == 16
    assert {k for k, _ in messages} == {b"gpu-node-1", b"gpu-node-2"}
    assert any(b'"delta"' in v for _, v in messages[8:])  # second tick on: counter and histogram deltas


@pytest.mark.broker
async def test_streams_throughput_runs_the_worker_and_the_step_loop():
    result = await streams_throughput.run(n=40, reps=1, variants=("tailhound", "step"), nodes=2, warmup=8)
    runs = result["runs"]
    assert set(runs) == {"tailhound", "step", "decode"}
    assert runs["tailhound"][0]["n"] == 40 and runs["tailhound"][0]["lag"] == 0
    text = streams_throughput.report(result)
    assert "(c) tailhound worker" in text and "(d) SnapshotProcessor.step" in text


def test_replay_speed_runs_and_detects_the_fault():
    result = replay_speed.run(reps=1, minutes=30, nodes=1)
    assert result["records"] == 30 * 4 * 4
    assert "gpu-thermal-throttle" in result["runs"][0]["opened"]
    assert "snapshots/s" in replay_speed.report(result)


def test_streams_memory_runs_and_reports():
    result = streams_memory.run(sizes=(200,), minutes=5)
    assert {r["n"] for r in result["series"]} == {200}
    assert all(r["memory"] > 0 and r["json"] > 0 for r in result["series"])
    assert result["node"]["state_series"] > 0 and result["node"]["bytes"] > 0
    assert "whole node" in streams_memory.report(result)


def test_bench_sections_can_run_alone():
    assert parse_args(["--only", "streams"]).sections == ["streams"]
    assert parse_args(["--only", "replay,memory"]).sections == ["replay", "memory"]
    assert parse_args([]).sections == [
        "parse",
        "agent",
        "streams",
        "replay",
        "memory",
        "notify-lag",
        "notify-noise",
        "startup",
        "scenarios",
        "table-store",
        "nodes-per-core",
        "scale-out",
        "ingest",
        "fleet-memory",
        "fleet-scale",
        "state-size",
        "wire",
        "model-forward",
        "peer",
        "offline",
    ]
    with pytest.raises(SystemExit):
        parse_args(["--only", "nope"])


def test_trivial_faust_app_with_json_values(tmp_path):
    settings = Settings(broker="kafka://127.0.0.1:1", rules_dir=fleet_telemetry.RULES, streams={"data_dir": tmp_path})
    app, real = streams_child.trivial_app(settings, value_serializer="json")
    assert streams_child.conf_diff(app, real) == []
    assert app.agents["count"].channel.value_serializer == "json"


def test_counter_times_the_window_and_its_stalls(tmp_path, monkeypatch):
    clock = iter([10.0, 10.01, 10.5, 10.51])  # warm-up message, then 3 measured; one 0.49 s pause
    monkeypatch.setattr(streams_child.time, "perf_counter", lambda: next(clock))
    result = tmp_path / "r.json"
    counter = streams_child.Counter(warmup=1, n=3, result=result)
    for _ in range(5):  # one more than measured: ignored
        counter.tick()
    out = streams_child.json.loads(result.read_text())
    assert out["n"] == 3 and abs(out["wall_s"] - 0.51) < 1e-9 and abs(out["stalled_s"] - 0.49) < 1e-9


def test_report_compares_per_window_and_per_cpu_second():
    def run(rate, cpu_rate):
        return {
            "n": 100,
            "wall_s": 100 / rate,
            "rate": rate,
            "cpu_pct": 100.0,
            "cpu_rate": cpu_rate,
            "stalled_s": 0.0,
            "lag": 0,
        }

    result = {
        "n": 100,
        "warmup": 8,
        "nodes": 2,
        "reps": 1,
        "partitions": 4,
        "mean_bytes": 10240.0,
        "runs": {
            "faust": [run(2000.0, 8000.0)],
            "faust-json": [run(4000.0, 4000.0)],
            "tailhound": [run(1000.0, 1000.0)],
            "wiring": [run(2000.0, 2000.0)],
        },
    }
    text = streams_throughput.report(result)
    assert "(c)/(b) = **50%** (target >= 50%: met)" in text
    assert "per CPU-second (both busy): (c)/(b) = **12%**" in text
    assert "(c)/(b') = **25%**; per CPU-second **25%**" in text
    assert "(c0) the same worker, step replaced by a counter" in text


def test_bundled_and_nvml_inputs_keep_every_snapshot_and_count_nodes():
    from bench import nodes_per_core

    messages = fleet_telemetry.fleet_messages(2 * 19, nodes=2, nvml=True)
    assert sum(b'"source":"nvml"' in v for _, v in messages) == 30  # 15 a node per 15 s tick, beside its 4
    bundles = fleet_telemetry.bundled(messages)
    assert len(bundles) == 2 + 28  # the tick's 4 + 1 NVML in one message per node, then NVML alone each second
    assert sum(fleet_telemetry.snapshots_in(v) for _, v in bundles) == len(messages)
    assert nodes_per_core.nodes_per_core(2700.0) == 10_125.0  # 4 snapshots per 15 s per node
    assert nodes_per_core.nodes_per_core(1900.0, nvml=True) == 1500.0


@pytest.mark.broker
async def test_nodes_per_core_measures_both_shapes():
    from bench import nodes_per_core

    result = await nodes_per_core.run(n=40, reps=1, shapes=("per-source", "bundled"), variants=("wiring",), nodes=2)
    assert {(s, v) for s, v in result["runs"]} == {("per-source", "wiring"), ("bundled", "wiring")}
    assert all(r[0]["lag"] == 0 for r in result["runs"].values())
    assert "nodes per worker core" in nodes_per_core.report(result)


def test_scale_out_report_and_cpu_seconds():
    import os

    from bench import scale_out

    assert scale_out.cpu_seconds(os.getpid()) > 0 and scale_out.cpu_seconds(2**22 + 7) == 0.0
    run = {
        "workers": 2,
        "partitions": 6,
        "n": 100,
        "wall_s": 2.0,
        "rate": 50.0,
        "cpu_s": 0.5,
        "cpu_rate": 200.0,
        "cpu_share": [0.6, 0.4],
    }
    text = scale_out.report({"n": 100, "reps": 1, "partitions": 6, "nodes": 24, "runs": {2: [run]}})
    assert "| 2 | 50 | 50 | 200 | 200 | [0.6, 0.4] |" in text
