"""The benchmark code still runs (the numbers themselves live in BENCHMARKS.md, never in tests)."""

from __future__ import annotations

from pathlib import Path

from bench import parse_speed
from bench.endpoints import agent_yaml
from tailhound.agents.config import parse_agent_config
from tailhound.agents.runtime import build_collectors


def test_parse_speed_runs_and_reports():
    rows = parse_speed.run(reps=1, loops=1)
    assert {r["input"] for r in rows} >= {"nvml (8 GPUs)"}
    assert "prometheus_client" in parse_speed.report(rows)


def test_bench_agent_config_enables_every_collector(tmp_path):
    urls = {k: "http://127.0.0.1:1/x" for k in ("vllm", "dcgm", "node", "blackbox", "nginx", "stream")}
    urls["tcp"] = "127.0.0.1:1"
    cfg = parse_agent_config(agent_yaml(urls, "127.0.0.1:0", Path(tmp_path) / "s.jsonl"))
    jobs = sorted(c.job for c in build_collectors(cfg))
    assert jobs == sorted(
        ["vllm", "dcgm", "node", "blackbox", "nvml", "node", "netprobe", "netprobe", "netprobe", "streamprobe"]
    )
    assert all(c.interval_s == 1 for c in build_collectors(cfg))
    assert parse_agent_config(agent_yaml(None, "127.0.0.1:0", Path(tmp_path) / "s.jsonl")).scrape == []


def test_worker_start_bench_runs_and_the_worker_loads_no_sklearn():
    """The worker builds its app without numpy, scikit-learn or scipy (they load only to fit a model)."""
    from bench import worker_start

    result = worker_start.run(reps=1)
    assert result["now"]["loaded"] == []
    assert set(result["eager-sklearn"]["loaded"]) == {"numpy", "sklearn", "scipy"}
    assert "now / eager-sklearn" in worker_start.report(result)


def test_ingest_speed_smoke():
    import gc

    from bench import ingest_speed

    before = gc.get_threshold(), gc.get_freeze_count()
    rows = ingest_speed.run(nodes=2, rounds=3, reps=1)
    assert [(r["gc"], r["path"]) for r in rows] == [(m, p) for m in ("process", "default") for p in ingest_speed.PATHS]
    assert len({r["samples"] for r in rows}) == 1 and rows[0]["samples"] > 0  # every path makes every sample
    assert "nodes per core" in ingest_speed.report(rows)
    assert (gc.get_threshold(), gc.get_freeze_count()) == before  # the process's collector as it was


def test_ingest_speed_runs_each_path_under_its_processes_collector():
    import gc

    from bench import ingest_speed
    from tailhound.agents.main import GC_THRESHOLD
    from tailhound.streams.gc_freeze import GC_GEN0_THRESHOLD

    seen, frozen = {}, gc.get_freeze_count()
    for kind in ("agent", "ingest"):
        with ingest_speed.collector(kind, "process") as warm:
            seen[kind] = gc.get_threshold(), gc.get_freeze_count() > 0, warm
    assert seen["agent"][:2] == ((GC_THRESHOLD, 10, 10), True) and seen["agent"][2] is ingest_speed._nothing
    assert seen["ingest"][:2] == ((GC_GEN0_THRESHOLD, 10, 10), True) and seen["ingest"][2] is not ingest_speed._nothing
    with ingest_speed.collector("ingest", "default"):
        assert gc.get_threshold() == ingest_speed.DEFAULT_THRESHOLD and gc.get_freeze_count() == frozen
    with ingest_speed.collector("agent", "off"):
        assert not gc.isenabled()
    assert gc.isenabled()


def test_ingest_stages_smoke():
    from bench import ingest_speed

    by_mode = {m: ingest_speed.stages(nodes=1, rounds=3, reps=1, mode=m) for m in ingest_speed.GC_MODES}
    on = by_mode["process"]
    assert set(on) == {*ingest_speed.STAGES, "agent path"} and all(v >= 0 for v in on.values())
    assert "default: " in ingest_speed.stages_report(by_mode)


def test_offline_tools_bench_runs_and_reports():
    """The capacity half on a short simulation (the rules-test half is the pack's own test run, timed)."""
    from bench import offline_tools

    result = {"capacity from telemetry": [offline_tools.capacity_s(minutes=15)]}
    assert result["capacity from telemetry"][0] > 0
    assert "| capacity from telemetry |" in offline_tools.report(result)
