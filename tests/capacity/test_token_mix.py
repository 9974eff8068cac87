"""The token mix of a load test: explicit, from a recording's token histograms, seeded sampling."""

from __future__ import annotations

import random

import pytest

from tailhound.agents.render import ExpositionWriter
from tailhound.agents.simulator import FleetSimulator, SimConfig
from tailhound.agents.simulator.recording import write_recording
from tailhound.capacity.token_mix import Lengths, TokenMix, TokenMixError, profile_from_recording
from tailhound.recording import ScrapeRecord

LABELS = {"engine": "0", "model_name": "llama-3.1-8b"}


def vllm_body(
    prompt: list[float],
    prompt_count: float,
    gen: list[float],
    gen_count: float,
    *,
    running: float = 0,
    waiting: float = 0,
    bounds: tuple[float, ...] = (10, 100, 1000),
) -> str:
    """A vLLM scrape with cumulative token histograms over `bounds`."""
    w = ExpositionWriter()
    w.gauge("vllm:num_requests_running", running, LABELS)
    w.gauge("vllm:num_requests_waiting", waiting, LABELS)
    w.histogram("vllm:request_prompt_tokens", bounds, prompt, prompt_count, 0.0, LABELS)
    w.histogram("vllm:request_generation_tokens", bounds, gen, gen_count, 0.0, LABELS)
    return w.text()


def write(path, bodies: list[tuple[float, str]], node: str = "gpu-node-1") -> None:
    with path.open("w", encoding="utf-8") as fh:
        for ts, body in bodies:
            rec = ScrapeRecord(
                ts=ts, node=node, job="vllm", body=body, labels={"instance": "10.0.0.1:8000"}, interval_s=15.0
            )
            fh.write(rec.to_line() + "\n")


# --- explicit ------------------------------------------------------------------------------------------------


def test_explicit_fixed_lengths():
    mix = TokenMix.explicit(512, 128)
    assert mix.sampler(1).take(5) == [(512, 128)] * 5
    s = mix.summary()
    assert (s.source, s.prompt_mean, s.prompt_p95, s.output_mean, s.output_p95) == ("explicit", 512, 512, 128, 128)


def test_explicit_spread_is_uniform_in_range():
    mix = TokenMix.explicit(500, 100, prompt_spread=100, output_spread=20)
    pairs = mix.sampler(3).take(4000)
    prompts, outputs = [p for p, _ in pairs], [o for _, o in pairs]
    assert min(prompts) == 400 and max(prompts) == 600
    assert min(outputs) == 80 and max(outputs) == 120
    assert sum(prompts) / len(prompts) == pytest.approx(500, rel=0.02)
    s = mix.summary()
    assert s.prompt_mean == 500 and s.output_mean == 100
    assert s.prompt_p95 == pytest.approx(590, abs=1) and s.output_p95 == pytest.approx(118, abs=1)


@pytest.mark.parametrize("mean,spread", [(0, 0), (10, 10), (10, -1), (float("nan"), 0)])
def test_explicit_bad_values(mean, spread):
    with pytest.raises(TokenMixError):
        Lengths.explicit(mean, spread)


def test_sampling_is_deterministic_per_seed():
    mix = TokenMix(Lengths.from_histogram((10, 100, 1000), [5, 50, 90], 100), Lengths.explicit(64, 32))
    assert mix.sampler(7).take(200) == mix.sampler(7).take(200)
    assert mix.sampler(7).take(200) != mix.sampler(8).take(200)
    again = TokenMix.from_dict(mix.to_dict())
    assert again == mix and again.sampler(7).take(50) == mix.sampler(7).take(50)


# --- buckets -------------------------------------------------------------------------------------------------


def test_bucket_sampling_stays_in_buckets_with_their_shares():
    # 10% in (0, 10], 40% in (10, 100], 40% in (100, 1000], 10% above 1000 (sampled as 1000)
    lengths = Lengths.from_histogram((10, 100, 1000), [10, 50, 90], 100)
    rng = random.Random(0)
    values = [lengths.sample(rng) for _ in range(20000)]
    assert min(values) >= 1 and max(values) == 1000
    shares = [sum(1 for v in values if lo < v <= hi) / len(values) for lo, hi in ((0, 10), (10, 100), (100, 999))]
    assert shares == pytest.approx([0.10, 0.40, 0.40 - 0.4 / 900], abs=0.015)
    assert sum(1 for v in values if v == 1000) / len(values) == pytest.approx(0.1 + 0.4 / 900, abs=0.01)
    # mean: uniform integers in [1, 10], [11, 100], [101, 1000], and 1000
    assert lengths.mean() == pytest.approx(0.1 * 5.5 + 0.4 * 55.5 + 0.4 * 550.5 + 0.1 * 1000)
    assert sum(values) / len(values) == pytest.approx(lengths.mean(), rel=0.03)
    assert lengths.quantile(0.5) == 100  # P(<= 100) = 0.5
    assert lengths.quantile(0.95) == 1000
    assert lengths.quantile(0.3) == pytest.approx(55, abs=1)


def test_empty_histogram_is_refused():
    with pytest.raises(TokenMixError, match="no observations"):
        Lengths.from_histogram((10, 100), [0, 0], 0)


# --- recordings ----------------------------------------------------------------------------------------------


def test_recording_uses_the_increase_between_scrapes(tmp_path):
    rec = tmp_path / "two.jsonl"
    # before the recording: 1000 requests of 1..10 prompt tokens; during it: 100 requests in (100, 1000]
    write(
        rec,
        [
            (1000.0, vllm_body([1000, 1000, 1000], 1000, [0, 1000, 1000], 1000, running=3, waiting=1)),
            (1060.0, vllm_body([1000, 1000, 1100], 1100, [0, 1100, 1100], 1100, running=9, waiting=4)),
        ],
    )
    prof = profile_from_recording(rec)
    s = prof.mix.summary()
    assert s.source == "recording:two.jsonl"
    assert s.prompt_mean == pytest.approx(550.5) and s.prompt_p95 == pytest.approx(955, abs=1)
    assert s.output_mean == pytest.approx(55.5)
    assert all(100 < p <= 1000 and 10 < o <= 100 for p, o in prof.mix.sampler(0).take(500))
    assert prof.peak_rps == pytest.approx(100 / 60)
    assert prof.peak_concurrency == 13
    assert prof.engines == 1 and prof.span_s == 60 and prof.model == "llama-3.1-8b"


def test_recording_counts_again_after_an_engine_restart(tmp_path):
    rec = tmp_path / "restart.jsonl"
    write(
        rec,
        [
            (1000.0, vllm_body([0, 0, 50], 50, [0, 50, 50], 50)),
            (1015.0, vllm_body([0, 0, 80], 80, [0, 80, 80], 80)),  # +30 in (100, 1000]
            (1030.0, vllm_body([10, 10, 10], 10, [10, 10, 10], 10)),  # restarted: 10 new ones in (0, 10]
        ],
    )
    lengths = profile_from_recording(rec).mix.prompt
    rng = random.Random(1)
    values = [lengths.sample(rng) for _ in range(4000)]
    assert sum(1 for v in values if v <= 10) / len(values) == pytest.approx(10 / 40, abs=0.03)
    assert all(v <= 10 or 100 < v <= 1000 for v in values)


def test_a_single_scrape_gives_the_counts_since_the_engine_started(tmp_path):
    rec = tmp_path / "one.jsonl"
    write(rec, [(1000.0, vllm_body([0, 20, 20], 20, [20, 20, 20], 20))])
    prof = profile_from_recording(rec)
    assert prof.mix.summary().prompt_mean == pytest.approx(55.5)
    assert prof.mix.summary().output_mean == pytest.approx(5.5)
    assert prof.peak_rps is None


def test_recording_without_token_histograms_is_refused(tmp_path):
    rec = tmp_path / "none.jsonl"
    write(rec, [(1000.0, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n")])
    with pytest.raises(TokenMixError, match="tokens.prompt"):
        profile_from_recording(rec)


def test_peak_is_the_busiest_engine_over_a_minute(tmp_path):
    rec = tmp_path / "peak.jsonl"
    lines = []
    counts = {"gpu-node-1": 0.0, "gpu-node-2": 0.0}
    for i in range(21):  # 5 minutes every 15 s; node 2 serves 4 req/s for one minute, 1 req/s otherwise
        ts = 1000.0 + 15 * i
        for node in counts:
            rate = 4.0 if node == "gpu-node-2" and 8 <= i < 12 else 1.0
            counts[node] += rate * 15 if i else 0
            n = counts[node]
            lines.append((node, ts, vllm_body([0, 0, n], n, [0, n, n], n)))
    with rec.open("w", encoding="utf-8") as fh:
        for node, ts, body in lines:
            fh.write(ScrapeRecord(ts=ts, node=node, job="vllm", body=body).to_line() + "\n")
    prof = profile_from_recording(rec)
    assert prof.engines == 2
    assert prof.peak_rps == pytest.approx(4.0)


@pytest.mark.parametrize("engine", ["vllm", "tgi"])
def test_from_a_simulated_fleet_recording(tmp_path, engine):
    rec = tmp_path / "fleet.jsonl"
    write_recording(FleetSimulator(SimConfig(nodes=1, seed=3, engine=engine)), 5, rec)
    prof = profile_from_recording(rec)
    s = prof.mix.summary()
    # the simulator's mix: log-normal prompts (median 1000, mean ~1500) and outputs (median 250, mean ~344)
    assert 900 < s.prompt_mean < 2600 and s.prompt_p95 > s.prompt_mean
    assert 180 < s.output_mean < 700 and s.output_p95 > s.output_mean
    assert prof.engines == 1 and prof.span_s == pytest.approx(5 * 60 - 15, abs=15)
    assert prof.peak_rps is not None and prof.peak_rps > 0
    assert prof.peak_concurrency is not None and prof.peak_concurrency > 0
    pairs = prof.mix.sampler(0).take(300)
    assert pairs == prof.mix.sampler(0).take(300)
