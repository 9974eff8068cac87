"""The catalog's per-engine coverage (signals.yaml `engines`) and its MIG handling (`mig`, `match` "" / "*")."""

from __future__ import annotations

import pytest

from tailhound.catalog import (
    CONDITIONAL,
    ENGINES,
    MAPPED,
    MIG_LABEL,
    NOT_EXPOSED,
    STAND_IN,
    UNMAPPED,
    SourceMetric,
    default_catalog,
    parse_catalog,
)
from tailhound.errors import ConfigError


def test_every_engine_signal_is_accounted_for_on_every_engine():
    """Mapped, a stand-in, version-dependent or not exposed (with a reason): never silently unmapped."""
    catalog = default_catalog()
    assert set(catalog.engines) == set(ENGINES)
    for engine in ENGINES:
        cov = catalog.engine_coverage(engine)
        assert set(cov) == set(catalog.engine_signals())
        unmapped = [s for s, (status, _) in cov.items() if status == UNMAPPED]
        assert not unmapped, f"{engine}: add these to signals.yaml `engines.{engine}.not_exposed`: {unmapped}"
        for signal, (status, note) in cov.items():
            assert status == MAPPED or note.strip(), (engine, signal)
        assert catalog.engines[engine].references


@pytest.mark.parametrize(
    ("engine", "signal", "status"),
    [
        ("tgi", "latency.ttft", NOT_EXPOSED),
        ("tgi", "engine.kv_cache_usage", NOT_EXPOSED),
        ("tgi", "latency.queue", MAPPED),
        ("tgi", "latency.tpot", STAND_IN),
        ("tgi", "latency.itl", STAND_IN),
        ("nim", "latency.tpot", STAND_IN),
        ("nim", "latency.itl", NOT_EXPOSED),
        ("nim", "latency.queue", NOT_EXPOSED),
        ("nim", "engine.kv_cache_usage", MAPPED),
        ("vllm", "latency.tpot", STAND_IN),
        ("vllm", "latency.itl", CONDITIONAL),
        ("vllm", "engine.max_requests", NOT_EXPOSED),
        ("sglang", "latency.tpot", STAND_IN),
        ("sglang", "latency.itl", NOT_EXPOSED),
        ("sglang", "latency.ttft", MAPPED),
        ("sglang", "engine.kv_cache_usage", MAPPED),
        ("sglang", "latency.queue", CONDITIONAL),
        ("sglang", "engine.preemptions", CONDITIONAL),
        ("sglang", "engine.http_rejections", NOT_EXPOSED),
    ],
)
def test_engine_coverage(engine, signal, status):
    assert default_catalog().engine_coverage(engine)[signal][0] == status


def test_renamed_and_per_engine_metric_names():
    cat = default_catalog()
    assert cat.lookup("vllm", "vllm:kv_cache_usage_perc")[0].name == "engine.kv_cache_usage"
    assert cat.lookup("vllm", "vllm:gpu_cache_usage_perc")[0].name == "engine.kv_cache_usage"
    assert cat.lookup("vllm", "vllm:inter_token_latency_seconds")[0].name == "latency.itl"
    assert cat.lookup("vllm", "vllm:request_time_per_output_token_seconds")[0].name == "latency.tpot"
    assert cat.lookup("vllm", "vllm:time_per_output_token_seconds")[0].name == "latency.tpot"
    assert cat.lookup("nim", "time_per_output_token_seconds")[0].name == "latency.tpot"
    assert cat.lookup("nim", "request_finish_total")[0].name == "engine.requests_finished"
    assert cat.lookup("tgi", "tgi_request_queue_duration")[0].name == "latency.queue"
    assert cat.lookup("tgi", "tgi_request_mean_time_per_token_duration")[0].name == "latency.tpot"
    assert cat.lookup("tgi", "tgi_batch_inference_duration", {"method": "decode"})[0].name == "latency.itl"
    assert cat.lookup("tgi", "tgi_batch_inference_duration", {"method": "prefill"})[0].name == "latency.prefill"
    assert cat.lookup("tgi", "tgi_request_failure", {"err": "overloaded"})[0].name == "engine.http_rejections"
    assert cat.lookup("tgi", "tgi_batch_max_total_tokens")[0].name == "engine.batch_token_capacity"


def _engines(entry: dict) -> dict:
    return {
        "signals": {
            "engine.x": {"kind": "gauge", "per": "engine", "sources": {"vllm": "x"}},
            "engine.y": {"kind": "gauge", "per": "engine", "sources": {"tgi": "y"}},
        },
        "engines": entry,
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"llamacpp": {}}, "unknown engine"),
        ({"tgi": {"sources": {"engine.nope": "n"}}}, "sources: unknown signal 'engine.nope'"),
        ({"tgi": {"sources": {"engine.y": "y2"}}}, "engine.y already maps source tgi under `signals`"),
        ({"tgi": {"not_exposed": {"engine.nope": "?"}}}, "unknown signal 'engine.nope'"),
        ({"tgi": {"not_exposed": {"engine.y": "?"}}}, "engine.y is mapped for source tgi"),
        ({"tgi": {"stand_ins": {"engine.x": "?"}}}, "engine.x is not mapped for source tgi"),
        ({"vllm": {"conditional": {"engine.y": "?"}}}, "engine.y is not mapped for source vllm"),
        ({"vllm": {"exposed": {}}}, "unknown keys ['exposed']"),
    ],
)
def test_engine_section_errors(entry, message):
    with pytest.raises(ConfigError, match=message.replace("[", "\\[").replace("]", "\\]")):
        parse_catalog(_engines(entry))


def test_an_engine_block_maps_its_own_source():
    """`engines.<name>.sources` maps the engine's metrics as a line under each signal would."""
    cat = parse_catalog(
        _engines(
            {
                "tgi": {
                    "sources": {"engine.x": ["x_new", {"metric": "x_old", "scale": 0.01}]},
                    "conditional": {"engine.x": "old name in old releases"},
                }
            }
        )
    )
    assert cat.lookup("tgi", "x_new")[0].name == "engine.x"
    assert cat.lookup("tgi", "x_old") == (cat.spec("engine.x"), 0.01)
    assert cat.engine_coverage("tgi")["engine.x"][0] == CONDITIONAL
    assert cat.lookup("vllm", "x")[0].name == "engine.x"


def test_sglang_metric_names():
    cat = default_catalog()
    for metric, signal in (
        ("sglang:num_running_reqs", "engine.requests_running"),
        ("sglang:num_queue_reqs", "engine.requests_waiting"),
        ("sglang:token_usage", "engine.kv_cache_usage"),
        ("sglang:inter_token_latency_seconds", "latency.tpot"),
        ("sglang:time_per_output_token_seconds", "latency.tpot"),
        ("sglang:queue_time_seconds", "latency.queue"),
        ("sglang:num_requests_total", "engine.requests_finished"),
        ("tailhound_engine_tpot_mean_seconds", "model.engine_tpot_mean"),
    ):
        assert cat.lookup("sglang", metric)[0].name == signal, metric
    assert cat.lookup("sglang", "vllm:num_requests_running") is None


def test_match_absent_and_present():
    absent = SourceMetric("m", match=((MIG_LABEL, ""),))
    present = SourceMetric("m", match=((MIG_LABEL, "*"),))
    assert absent.matches({}) and absent.matches({MIG_LABEL: ""}) and not absent.matches({MIG_LABEL: "3"})
    assert present.matches({MIG_LABEL: "3"}) and not present.matches({}) and not present.matches({MIG_LABEL: ""})


def test_mig_modes_route_instance_lines():
    cat = parse_catalog(
        {
            "signals": {
                "gpu.temp": {"kind": "gauge", "per": "gpu", "mig": "device", "sources": {"dcgm": "T", "nvml": "t"}},
                "gpu.dram": {"kind": "gauge", "per": "gpu", "mig": "instance", "sources": {"dcgm": "D", "nvml": "d"}},
                "gpu.util": {"kind": "gauge", "per": "gpu", "sources": {"dcgm": "U"}},
            }
        }
    )
    inst = {"gpu": "0", MIG_LABEL: "3", "GPU_I_PROFILE": "1g.6gb"}
    whole = {"gpu": "0"}
    assert cat.lookup("dcgm", "T", inst)[0].name == "gpu.temp"  # device-wide: the instance line is the GPU's
    assert cat.lookup("dcgm", "D", whole)[0].name == "gpu.dram"
    twin, _ = cat.lookup("dcgm", "D", inst)
    assert twin.name == "mig.dram" and twin.instance_of == "gpu.dram" and twin.per == ("gpu", MIG_LABEL)
    assert twin.entity(inst, {}) == "0/mig3"
    assert cat.lookup("dcgm", "U", inst) is None and cat.lookup("dcgm", "U", whole)[0].name == "gpu.util"
    assert cat.lookup("nvml", "d")[0].name == "gpu.dram"  # only dcgm-exporter has MIG lines
    assert "nvml" not in twin.sources


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "gauge", "per": "gpu", "mig": "both", "sources": {"dcgm": "D"}}, "mig must be one of"),
        ({"kind": "gauge", "per": "engine", "mig": "device", "sources": {"dcgm": "D"}}, "for `per: gpu` signals only"),
        (
            {"kind": "gauge", "per": "gpu", "sources": {"dcgm": {"metric": "D", "match": {MIG_LABEL: "1"}}}},
            "may not match on GPU_I_ID",
        ),
    ],
)
def test_mig_errors(entry, message):
    with pytest.raises(ConfigError, match=message):
        parse_catalog({"signals": {"gpu.x": entry}})


def test_default_gpu_signals_say_how_mig_lines_count():
    cat = default_catalog()
    assert cat.spec("gpu.temperature").mig == "device" and cat.spec("gpu.power").mig == "device"
    assert cat.spec("gpu.dram_bw_util").mig == "instance" and cat.spec("gpu.memory_used").mig == "instance"
    assert {n for n in cat.signals if n.startswith("mig.")} == {
        "mig.dram_bw_util",
        "mig.memory_used",
        "mig.memory_total",
    }
    assert cat.spec("gpu.util").mig is None  # DCGM_FI_DEV_GPU_UTIL is not reported per instance
