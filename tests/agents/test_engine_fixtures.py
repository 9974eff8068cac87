"""Every engine's real /metrics output (tests/agents/fixtures, origin in each file's header) feeds the canonical
engine signals the catalog promises, and nothing the catalog says the engine does not expose.

vLLM V0 and NIM are real scrapes; the vLLM V1 fixture is rendered by prometheus_client from vLLM's own metric
definitions and the TGI and SGLang ones are laid out from the engines' source (no public capture of a current
release was found; SGLang's 2024 docs example, sglang_docs_2024.prom, is tested in test_catalog_mappings.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailhound.agents.snapshot_builder import SnapshotBuilder
from tailhound.catalog import NOT_EXPOSED, default_catalog
from tailhound.recording import ScrapeRecord
from tailhound.streams.extract import extract
from tailhound.streams.latency import LatencyTracker
from tailhound.streams.ruleset.engine_support import catalog_signals, snapshot_signals

FIXTURES = Path(__file__).parent / "fixtures"
T0 = 1_764_400_000.0
INSTANCE = "10.0.0.5:8000"

#: engine -> its fixtures (vLLM: V1 and V0)
ENGINE_FIXTURES = {
    "vllm": ["vllm_v1_dp2.prom", "vllm_v0_opt125m.prom"],
    "tgi": ["tgi_v3.prom"],
    "nim": ["nim_llama31_8b.prom"],
    "sglang": ["sglang.prom"],
}
CORE = {
    "engine.requests_running",
    "engine.requests_waiting",
    "engine.requests_finished",
    "latency.e2e",
    "latency.tpot",
    "tokens.prompt",
    "tokens.generation",
}
#: fixture -> the canonical signals it must give (beyond CORE), and those it must not
EXPECTED = {
    "vllm_v1_dp2.prom": (
        CORE
        | {
            "engine.kv_cache_usage",
            "latency.ttft",
            "latency.itl",
            "latency.queue",
            "latency.prefill",
            "latency.decode",
            "latency.inference",
            "engine.preemptions",
            "engine.prompt_tokens",
            "engine.generation_tokens",
            "engine.prefix_cache_queries",
            "engine.prefix_cache_hits",
            "engine.http_requests",
            "engine.http_rejections",
        },
        set(),
    ),
    "vllm_v0_opt125m.prom": (
        CORE
        | {
            "engine.kv_cache_usage",
            "latency.ttft",
            "engine.preemptions",
            "engine.prompt_tokens",
            "engine.generation_tokens",
        },
        {"latency.itl", "latency.queue"},
    ),
    "tgi_v3.prom": (
        CORE
        | {
            "latency.queue",
            "latency.itl",
            "latency.prefill",
            "latency.inference",
            "engine.batch_max_tokens",
            "engine.batch_token_capacity",
            "engine.requests_received",
            "engine.http_rejections",
        },
        {"latency.ttft", "engine.kv_cache_usage"},
    ),
    "nim_llama31_8b.prom": (
        CORE
        | {
            "engine.kv_cache_usage",
            "latency.ttft",
            "engine.max_requests",
            "engine.prompt_tokens",
            "engine.generation_tokens",
        },
        {"latency.itl", "latency.queue"},
    ),
    "sglang.prom": (
        CORE
        | {
            "engine.kv_cache_usage",
            "latency.ttft",
            "latency.queue",
            "engine.preemptions",
            "engine.prompt_tokens",
            "engine.generation_tokens",
            "engine.prefix_cache_hits",
            "engine.batch_token_capacity",
        },
        {"latency.itl", "engine.http_rejections", "engine.requests_received"},
    ),
}
JOB = {f: e for e, fs in ENGINE_FIXTURES.items() for f in fs}


def build(body: str, job: str, ts: float = T0, builder: SnapshotBuilder | None = None):
    return (builder or SnapshotBuilder()).build(
        ScrapeRecord(ts=ts, node="gpu-node-1", job=job, body=body, labels={"instance": INSTANCE}, interval_s=5)
    )


def body(fixture: str) -> str:
    return (FIXTURES / fixture).read_text(encoding="utf-8")


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_names_its_origin(fixture):
    assert body(fixture).startswith("# Origin: ")


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_real_output_gives_the_expected_signals(fixture):
    want, absent = EXPECTED[fixture]
    got = snapshot_signals([build(body(fixture), JOB[fixture])])
    assert want <= got, sorted(want - got)
    assert not absent & got, sorted(absent & got)


@pytest.mark.parametrize("engine", sorted(ENGINE_FIXTURES))
def test_fixtures_and_catalog_coverage_agree(engine):
    """What an engine's fixtures give is what the catalog maps for it (model.* comes from the model stage), and
    no fixture gives a signal the catalog calls not exposed."""
    catalog = default_catalog()
    got = snapshot_signals([build(body(f), engine) for f in ENGINE_FIXTURES[engine]])
    # the model stage computes these (from the engines' histograms and the nodes' open incidents)
    model_stage = {
        "model.nodes_with_cause",
        "model.engine_tpot_mean",
        "model.engine_request_rate",
        "model.engine_node_explained",
    }
    assert got == catalog_signals(engine) - model_stage
    not_exposed = {s for s, (status, _) in catalog.engine_coverage(engine).items() if status == NOT_EXPOSED}
    assert not not_exposed & got


def test_vllm_v1_has_one_entity_per_engine_and_v0_falls_back_to_the_instance():
    v1 = extract(build(body("vllm_v1_dp2.prom"), "vllm"))
    assert v1["engine.requests_waiting"] == {"0": 2.0, "1": 0.0}
    assert v1["engine.kv_cache_usage"] == {"0": pytest.approx(0.61), "1": pytest.approx(0.44)}
    v0 = extract(build(body("vllm_v0_opt125m.prom"), "vllm"))
    assert v0["engine.kv_cache_usage"] == {INSTANCE: 0.0}  # vllm:gpu_cache_usage_perc, no engine label
    tgi = extract(build(body("tgi_v3.prom"), "tgi"))
    assert tgi["engine.requests_waiting"] == {INSTANCE: 4.0} and tgi["engine.requests_running"] == {INSTANCE: 12.0}
    nim = extract(build(body("nim_llama31_8b.prom"), "nim"))
    assert nim["engine.max_requests"] == {INSTANCE: 64.0}
    assert nim["engine.kv_cache_usage"] == {INSTANCE: pytest.approx(0.000284819)}


def test_nim_time_per_output_token_is_per_decode_step_and_feeds_tpot():
    """The real NIM scrape: 5 requests, 174 generated tokens, 169 observations = one per token after the first."""
    snap = build(body("nim_llama31_8b.prom"), "nim")
    [h] = [s for s in snap.samples if s.name == "time_per_output_token_seconds"]
    gen = next(s.value for s in snap.samples if s.name == "generation_tokens_total")
    [e2e] = [s for s in snap.samples if s.name == "e2e_request_latency_seconds"]
    assert h.count == gen - e2e.count == 169
    assert default_catalog().lookup("nim", "time_per_output_token_seconds")[0].name == "latency.tpot"


def test_sglang_has_one_entity_per_server_from_two_label_sets():
    """Tokenizer metrics (model_name, engine_type) and scheduler metrics (plus tp/pp/moe_ep ranks) are one engine:
    neither has an `engine` label, so both fall back to the scraped instance."""
    sgl = extract(build(body("sglang.prom"), "sglang"))
    assert sgl["engine.requests_running"] == {INSTANCE: 31.0} and sgl["engine.requests_waiting"] == {INSTANCE: 0.0}
    assert sgl["engine.kv_cache_usage"] == {INSTANCE: pytest.approx(0.09)}
    assert sgl["engine.batch_token_capacity"] == {INSTANCE: 478000.0}


def test_sglang_inter_token_latency_is_per_token_and_feeds_tpot():
    """One observation per generated token after the first (collector.observe_inter_token_latency adds a chunk's
    token count to its bucket): count = generated tokens - requests, as NIM's per-step histogram."""
    snap = build(body("sglang.prom"), "sglang")
    [h] = [s for s in snap.samples if s.name == "sglang:inter_token_latency_seconds"]
    gen = next(s.value for s in snap.samples if s.name == "sglang:generation_tokens_total")
    finished = next(s.value for s in snap.samples if s.name == "sglang:num_requests_total")
    assert h.count == gen - finished == 369590
    assert default_catalog().lookup("sglang", h.name)[0].name == "latency.tpot"


def test_vllm_prefers_the_per_request_tpot_and_keeps_v0s_per_step_one_as_a_stand_in():
    catalog = default_catalog()
    tpot = [sm.metric for sm in catalog.spec("latency.tpot").sources["vllm"]]
    assert tpot == ["vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"]
    assert catalog.lookup("vllm", "vllm:inter_token_latency_seconds")[0].name == "latency.itl"
    assert catalog.lookup("vllm", "vllm:kv_cache_usage_perc")[0].name == "engine.kv_cache_usage"


def _earlier(text: str) -> str:
    """The same scrape some time before: every sample value halved (cumulative buckets stay monotonic)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^([^#\s][^ ]*(?:\{.*\})?) (\S+)$", line)
        if not m or m.group(2) in ("+Inf", "NaN"):
            out.append(line)
            continue
        v = float(m.group(2))
        out.append(f"{m.group(1)} {v // 2 if v.is_integer() else v / 2}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("fixture", "entity", "signals"),
    [
        ("vllm_v1_dp2.prom", "0", ["latency.ttft.p95", "latency.tpot.p95", "latency.itl.p95", "latency.queue.mean"]),
        ("vllm_v0_opt125m.prom", INSTANCE, ["latency.ttft.p95", "latency.tpot.p95"]),
        (
            "tgi_v3.prom",
            INSTANCE,
            [
                "latency.tpot.p95",
                "latency.itl.p95",
                "latency.queue.mean",
                "latency.prefill.p95",
                "tokens.generation.mean",
            ],
        ),
        ("nim_llama31_8b.prom", INSTANCE, ["latency.ttft.p95", "latency.tpot.p95", "latency.e2e.p99"]),
        (
            "sglang.prom",
            INSTANCE,
            [
                "latency.ttft.p95",
                "latency.tpot.p95",
                "latency.tpot.mean",
                "latency.queue.mean",
                "latency.e2e.p99",
                "tokens.prompt.mean",
                "tokens.generation.mean",
            ],
        ),
    ],
)
def test_two_scrapes_give_the_window_statistics_rules_read(fixture, entity, signals):
    builder, tracker = SnapshotBuilder(), LatencyTracker()
    text = body(fixture)
    for ts, t in ((T0, _earlier(text)), (T0 + 5, text)):
        tracker.observe(build(t, JOB[fixture], ts, builder))
    values = tracker.engine_values(T0 + 5, "gpu-node-1")
    for signal in signals:
        assert entity in values.get(signal, {}), (signal, sorted(values))
