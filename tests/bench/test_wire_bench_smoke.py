"""The wire-format benchmark runs and reports every format (a smoke run: no timings asserted)."""

from __future__ import annotations

from bench import wire_format
from bench.__main__ import parse_args


def test_wire_bench_runs_and_version_3_is_smaller():
    assert parse_args(["--only", "wire"]).sections == ["wire"]
    result = wire_format.run(ticks=12, reps=1)
    rows = result["rows"]
    assert set(rows) == {
        "v1 JSON",
        "v2 bundle",
        "v3 msgpack",
        "v3 msgpack bundled",
        "v3 as JSON",
        "v3 layouts referenced",
        "v3 layouts referenced, every 60 s",
    }
    # a shorter layout refresh costs bytes, and both are smaller than every message carrying its layout
    assert rows["v3 layouts referenced"]["lz4"] < rows["v3 layouts referenced, every 60 s"]["lz4"]
    assert rows["v3 layouts referenced, every 60 s"]["lz4"] < rows["v3 msgpack"]["lz4"]
    assert result["snapshots"] == 48  # 12 node-ticks of vLLM, dcgm, node and blackbox (8 nodes)
    assert rows["v3 msgpack"]["raw_bytes"] * 4 < rows["v1 JSON"]["raw_bytes"]  # sizes are not timings
    assert rows["v3 msgpack"]["lz4"] < rows["v1 JSON"]["lz4"]
    assert "| v3 msgpack |" in wire_format.report(result)


def test_the_layouts_the_worker_keeps_are_measured_per_node():
    got = wire_format.layout_memory(nodes=3)
    assert got["nodes"] == 3 and got["layouts"] >= 3 * 3 and got["bytes_per_node"] > 0 and got["record_bytes"] > 0
    assert "KB a node in memory" in wire_format.report_layouts(got)
