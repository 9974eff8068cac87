from __future__ import annotations

import json
import math

import numpy as np
import pytest
from sklearn.metrics import mean_pinball_loss

from tailhound.errors import ConfigError
from tailhound.streams.baseline import RollingBaseline
from tailhound.streams.loadmodel import FEATURES, LoadModel, WindowFeatures, expected_for

NOISE = 0.15  # exponential multiplicative noise: P95 = base * (1 + NOISE * ln 20)


def ttft_windows(n: int, seed: int, ts0: float = 1.7e9):
    """1-minute windows of one engine; TTFT grows with prompt length and with the running batch."""
    rng = np.random.default_rng(seed)
    rows, observed, true_p95 = [], [], []
    for i in range(n):
        prompt, gen, running = rng.uniform(100, 4000), rng.uniform(50, 800), rng.uniform(1, 128)
        waiting = float(rng.poisson(max(0.0, (running - 96) / 8)))
        base = 0.05 + 0.0004 * prompt * (1 + running / 64)
        observed.append(base * (1 + rng.exponential(NOISE)))
        true_p95.append(base * (1 + NOISE * math.log(20)))
        rows.append(
            WindowFeatures(prompt, gen, running, waiting, running / 10 * rng.uniform(0.8, 1.2), ts=ts0 + 60 * i)
        )
    return rows, observed, true_p95


@pytest.fixture(scope="module")
def ttft_model() -> LoadModel:
    rows, observed, _ = ttft_windows(1500, seed=1)
    return LoadModel.fit(rows, observed, quantile=0.95, signal="latency.ttft.p95")


def test_p95_predictions_beat_a_constant_on_held_out_windows(ttft_model):
    fit = ttft_model.artifact.fit
    assert fit.holdout_rows == 300
    assert fit.pinball_loss <= 0.7 * fit.baseline_pinball_loss
    rows, observed, true_p95 = ttft_windows(1000, seed=2, ts0=1.8e9)
    predicted = np.array([ttft_model.predict(r) for r in rows])
    constant = np.full(len(rows), np.quantile(ttft_windows(1500, seed=1)[1], 0.95))
    model_loss = mean_pinball_loss(observed, predicted, alpha=0.95)
    constant_loss = mean_pinball_loss(observed, constant, alpha=0.95)
    assert model_loss <= 0.7 * constant_loss
    relative_error = np.abs(predicted - true_p95) / np.array(true_p95)
    assert np.median(relative_error) < 0.05 and relative_error.max() < 0.3
    assert 0.92 <= np.mean(np.array(observed) <= predicted) <= 0.98  # it is a P95, not a mean


def test_tpot_model_learns_the_kv_cache_cost():
    rng = np.random.default_rng(3)
    rows, observed = [], []
    for i in range(600):
        prompt, gen, running = rng.uniform(100, 4000), rng.uniform(50, 800), rng.uniform(1, 128)
        observed.append((0.008 + 1.2e-7 * (prompt + gen) * running) * (1 + rng.exponential(0.1)))
        rows.append(WindowFeatures(prompt, gen, running, 0.0, running / 10, ts=1.7e9 + 60 * i))
    model = LoadModel.fit(rows, observed, signal="latency.tpot.p95")
    assert model.artifact.fit.pinball_loss <= 0.7 * model.artifact.fit.baseline_pinball_loss
    light, heavy = WindowFeatures(500, 200, 4, 0, 0.4), WindowFeatures(3500, 700, 120, 0, 12)
    assert model.predict(heavy) > 4 * model.predict(light)


def test_save_load_round_trip_gives_identical_predictions(ttft_model, tmp_path):
    path = tmp_path / "ttft.json"
    ttft_model.save(path)
    raw = json.loads(path.read_text())
    assert raw["format"] == "tailhound-loadmodel" and raw["version"] == 1 and raw["features"] == list(FEATURES)
    assert raw["trained_on"] == {"rows": 1500, "ts_min": 1.7e9, "ts_max": 1.7e9 + 60 * 1499}
    loaded = LoadModel.load(path)
    assert loaded.artifact == ttft_model.artifact
    for row in ttft_windows(50, seed=4)[0]:
        assert loaded.predict(row) == ttft_model.predict(row)


@pytest.mark.parametrize(
    "tamper, message",
    [
        (lambda a: a.update(version=2), "version 2 is newer"),
        (lambda a: a.update(version="1"), "version '1' is not supported"),
        (lambda a: a.update(format="pickle"), "not a load model artifact"),
        (lambda a: a.update(backdoor="os.system"), "backdoor"),
        (lambda a: a["coef"].__setitem__(0, a["coef"][0] * 2), "digest mismatch"),
        (lambda a: a["coef"].__setitem__(0, "0.1"), "coef.0"),
        (lambda a: a["coef"].pop(), "coefficients"),
        (lambda a: a.update(features=list(reversed(a["features"]))), "features must be"),
        (lambda a: a.update(floor=0.0), "floor"),
    ],
)
def test_tampered_or_unknown_artifacts_are_rejected_naming_the_file(ttft_model, tmp_path, tamper, message):
    path = tmp_path / "ttft-model.json"
    ttft_model.save(path)
    artifact = json.loads(path.read_text())
    tamper(artifact)
    path.write_text(json.dumps(artifact))
    with pytest.raises(ConfigError, match=message) as err:
        LoadModel.load(path)
    assert str(path) in str(err.value)


def test_non_finite_and_unreadable_artifacts_are_rejected(ttft_model, tmp_path):
    path = tmp_path / "nan.json"
    ttft_model.save(path)
    artifact = json.loads(path.read_text())
    artifact["intercept"] = float("nan")
    path.write_text(json.dumps(artifact))  # Python's json writes NaN
    with pytest.raises(ConfigError, match="nan.json.*intercept"):
        LoadModel.load(path)
    with pytest.raises(ConfigError, match="missing.json"):
        LoadModel.load(tmp_path / "missing.json")


def test_expected_for_uses_the_model_inside_its_training_range_and_rolling_outside(ttft_model):
    rolling = RollingBaseline()
    for k in range(130):
        rolling.observe(1.7e9 + 10 * k, 0.5)
    inside = WindowFeatures(2000, 400, 64, 0, 6.4)
    far_outside = WindowFeatures(32000, 400, 64, 0, 6.4)  # 8x longer prompts than ever trained on

    by_model = expected_for("latency.ttft.p95", inside, ttft_model, rolling)
    assert by_model.source == "load-model" and by_model.value == ttft_model.predict(inside)
    assert by_model.describe(2.3 * by_model.value) == "2.3x what this load should cost (load model)"

    fallback = expected_for("latency.ttft.p95", far_outside, ttft_model, rolling)
    assert fallback.source == "rolling" and fallback.value == pytest.approx(0.5)
    assert fallback.describe(1.15).endswith("(rolling baseline)")
    assert expected_for("latency.tpot.p95", inside, ttft_model, rolling).source == "rolling"  # other signal
    assert expected_for("latency.ttft.p95", None, ttft_model, rolling).source == "rolling"  # no load features
    assert expected_for("latency.ttft.p95", far_outside, ttft_model, None) is None
    assert expected_for("latency.ttft.p95", inside, None, RollingBaseline()) is None  # still warming up


def test_predictions_never_go_below_the_floor(ttft_model):
    odd = WindowFeatures(prompt_tokens=0, gen_tokens=0, running=0, waiting=500, request_rate=0)
    assert ttft_model.predict(odd) >= ttft_model.artifact.floor > 0


def test_same_data_gives_the_same_coefficients():
    rows, observed, _ = ttft_windows(300, seed=5)
    a = LoadModel.fit(rows, observed)
    b = LoadModel.fit(list(reversed(rows)), list(reversed(observed)))  # fit orders rows by event time
    assert a.artifact.coef == b.artifact.coef and a.artifact.intercept == b.artifact.intercept
    assert a.artifact.digest == b.artifact.digest


def test_fit_refuses_too_little_data():
    rows, observed, _ = ttft_windows(10, seed=6)
    with pytest.raises(ValueError, match="at least"):
        LoadModel.fit(rows, observed)
