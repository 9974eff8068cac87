from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tailhound.agents.exposition import ExpositionError, parse_exposition, to_samples

FIXTURES = Path(__file__).parent / "fixtures"
DCGM_NOT_SUPPORTED = 9.0e18  # dcgm-exporter prints NOT_SUPPORTED sentinels around 9.22e18


def by_name(samples):
    out = {}
    for s in samples:
        out.setdefault(s.name, []).append(s)
    return out


def test_vllm_v1_exposition():
    samples = by_name(to_samples(parse_exposition((FIXTURES / "vllm_v1.prom").read_text())))
    assert samples["vllm:num_requests_waiting"][0].value == 3.0
    assert samples["vllm:prompt_tokens_total"][0].kind == "counter"
    assert samples["vllm:prompt_tokens_total"][0].value == 1234567.0
    assert {s.labels["finished_reason"] for s in samples["vllm:request_success_total"]} == {"stop", "length"}
    assert not any(name.endswith("_created") for name in samples)
    [ttft] = samples["vllm:time_to_first_token_seconds"]
    assert ttft.kind == "histogram"
    assert ttft.le == [0.001, 0.1, 0.25, 0.5, 2.5]
    assert ttft.counts == [0, 120, 600, 900, 995] and ttft.count == 1000 and ttft.sum == 312.5
    assert ttft.labels == {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}


def test_dcgm_exporter_drops_not_supported_sentinels():
    samples = by_name(to_samples(parse_exposition((FIXTURES / "dcgm_exporter.prom").read_text()),
                                 drop=lambda v: v >= DCGM_NOT_SUPPORTED))
    assert [s.labels["gpu"] for s in samples["DCGM_FI_DEV_GPU_TEMP"]] == ["0", "3"]
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in samples  # absent, never 0
    assert samples["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"][0].kind == "counter"


def test_agrees_with_prometheus_client_output():
    reg = CollectorRegistry()
    g = Gauge("tailhound_test_gauge", "g", ["gpu"], registry=reg)
    g.labels(gpu="1").set(7.5)
    c = Counter("tailhound_test_requests", "c", ["code"], registry=reg)
    c.labels(code='a"b\\c\nd').inc(3)
    h = Histogram("tailhound_test_latency_seconds", "h", buckets=(0.1, 1.0), registry=reg)
    for v in (0.05, 0.5, 5):
        h.observe(v)
    samples = by_name(to_samples(parse_exposition(generate_latest(reg).decode())))
    assert samples["tailhound_test_gauge"][0].value == 7.5
    [counter] = samples["tailhound_test_requests_total"]
    assert counter.value == 3 and counter.labels == {"code": 'a"b\\c\nd'}
    [hist] = samples["tailhound_test_latency_seconds"]
    assert hist.le == [0.1, 1.0] and hist.counts == [1, 2] and hist.count == 3 and hist.sum == pytest.approx(5.55)


def test_openmetrics_eof_and_comments_are_ignored():
    text = "# TYPE x gauge\n# UNIT x seconds\nx 1\n# EOF\n"
    assert [s.value for s in to_samples(parse_exposition(text))] == [1.0]


@pytest.mark.parametrize(("text", "line", "needle"), [
    ("ok 1\nbad{a=1} 2\n", 2, "malformed labels"),
    ("ok 1\nbad{a=\"1\" 2\n", 2, "not a sample line"),
    ("ok 1\n\nx{a=\"1\"} notanumber\n", 3, "not a number"),
    ("{} 1\n", 1, "not a sample line"),
])
def test_errors_name_the_line(text, line, needle):
    with pytest.raises(ExpositionError) as exc:
        parse_exposition(text)
    assert exc.value.line_no == line and needle in str(exc.value)
