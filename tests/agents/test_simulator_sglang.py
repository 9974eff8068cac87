"""The simulator's SGLang engine: the families, types, buckets and labels of the SGLang page
(tests/agents/fixtures/sglang.prom, laid out from SGLang's collector.py), and the canonical signals they give."""

from __future__ import annotations

import statistics
from functools import cache
from pathlib import Path

from tailhound.agents.exposition import parse_exposition
from tailhound.agents.render import render_samples
from tailhound.agents.simulator import FaultSpec, FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import snapshot_to_record
from tailhound.agents.simulator.sglang import ITL_BUCKETS, QUEUE_BUCKETS, SGLANG_PORT, TTFT_BUCKETS
from tailhound.agents.simulator.timeseries import Tick, snapshot_of, values
from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.streams.extract import extract
from tailhound.streams.ruleset.engine_support import catalog_signals, snapshot_signals

N1 = "gpu-node-1"
FIXTURE = Path(__file__).parent / "fixtures" / "sglang.prom"


@cache
def simulate(faults: tuple[str, ...] = (), minutes: int = 4) -> list[Tick]:
    cfg = SimConfig(nodes=2, seed=3, engine="sglang")
    return list(FleetSimulator(cfg, [FaultSpec.parse(f) for f in faults]).run(minutes * 60.0))


def _families(text: str) -> dict[str, str]:
    return {f.name: f.type for f in parse_exposition(text)}


def test_sglang_exports_the_fixture_families_with_sglangs_buckets_and_labels():
    ticks = simulate()
    snap = snapshot_of(ticks[-1], N1, "sglang")
    assert snapshot_of(ticks[-1], N1, "vllm") is None
    assert SimConfig(engine="sglang").sources[0] == "sglang"  # "vllm" in the default sources names the engine
    assert snap.labels == {"model_name": SimConfig().model, "instance": f"{N1}:{SGLANG_PORT}"}
    got = _families(render_samples(snap.samples))
    fixture = _families(FIXTURE.read_text())
    left_out = {"sglang:num_grammar_queue_reqs", "sglang:cache_hit_rate", "sglang:num_retracted_reqs"}
    assert {k: got.get(k) for k in fixture if k not in left_out} == {
        k: v for k, v in fixture.items() if k not in left_out
    }
    assert not any(n.startswith("vllm") for n in got)
    hists = {s.name: s for s in snap.samples if s.kind == "histogram"}
    assert hists["sglang:time_to_first_token_seconds"].le == list(TTFT_BUCKETS)
    assert hists["sglang:inter_token_latency_seconds"].le == list(ITL_BUCKETS)
    assert hists["sglang:queue_time_seconds"].le == list(QUEUE_BUCKETS)
    running = next(s for s in snap.samples if s.name == "sglang:num_running_reqs")
    assert running.labels == {
        "model_name": SimConfig().model,
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }


def test_sglang_replays_to_the_signals_the_catalog_maps():
    ticks = simulate()
    builder = SnapshotBuilder()
    snaps = [builder.build(snapshot_to_record(s)) for t in ticks for s in t[1] if s.source == "sglang"]
    model_stage = {s for s in catalog_signals("sglang") if s.startswith("model.")}
    assert snapshot_signals(snaps[-2:]) == catalog_signals("sglang") - model_stage
    got = extract(snaps[-1])
    assert set(got["engine.requests_running"]) == {f"{snaps[-1].node}:{SGLANG_PORT}"}
    itl = [s for s in snaps[-1].samples if s.name == "sglang:inter_token_latency_seconds"][0]
    gen = [s for s in snaps[-1].samples if s.name == "sglang:generation_tokens_total"][0]
    done = [s for s in snaps[-1].samples if s.name == "sglang:num_requests_total"][0]
    # one observation per generated token after the first, as SGLang's collector counts them
    assert itl.delta.count == gen.delta - done.delta > 0


def test_kv_pressure_fills_sglangs_token_pool_and_retracts():
    ticks = simulate(("kv-cache-pressure@1m+5m:node=gpu-node-1",), 6)
    usage = [v for v in values(ticks, N1, "sglang", "sglang:token_usage") if v is not None]
    retracted = [v for v in values(ticks, N1, "sglang", "sglang:num_retracted_requests_total") if v is not None]
    before, during = usage[:4], usage[8:24]  # 4 ticks a minute: before 1m, and 2m-6m
    assert max(before) < 0.9
    assert sum(u >= 0.95 for u in during) >= len(during) / 3 and statistics.fmean(during) > 2 * max(before)
    assert retracted[-1] > retracted[len(retracted) // 4]
