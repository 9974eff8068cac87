"""The capacity plots: three PNGs per model, deterministic names, valid and non-empty."""

from __future__ import annotations

import builtins

import pytest

from tailhound.capacity import plots
from tailhound.capacity.model import Percentiles
from tailhound.capacity.plots import PLOT_KINDS, PlotsUnavailable, plot_names, slug, write_plots
from tailhound.capacity.recommend import LoadPoint, analyse, recommend
from tests.capacity.test_recommend import MODEL, concurrency_test, rate_test

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("make", [rate_test, concurrency_test])
def test_three_pngs_per_model(tmp_path, make):
    analysis = recommend(make(), source="loadtest:x.json")
    paths = write_plots(analysis, tmp_path / "plots")
    assert [p.name for p in paths] == [f"meta-llama_Llama-3.1-70B-Instruct-{k}.png" for k in PLOT_KINDS]
    assert [p.name for p in paths] == list(plot_names(MODEL).values())
    for p in paths:
        data = p.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000 and b"IEND" in data[-16:]
    # the same analysis draws the same bytes (no timestamps or versions in the files)
    again = write_plots(analysis, tmp_path / "again")
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]


def test_a_curve_without_knees_still_plots(tmp_path):
    points = [
        LoadPoint(load=float(x), throughput_rps=float(x), ttft=Percentiles(p95=0.3), tpot=Percentiles(), batch=4.0 * x)
        for x in range(1, 6)
    ]
    paths = write_plots(analyse(points, model="m", source="x"), tmp_path)
    assert all(p.read_bytes().startswith(PNG) for p in paths)


def test_slugs():
    assert slug("meta-llama/Llama-3.1-70B-Instruct") == "meta-llama_Llama-3.1-70B-Instruct"
    assert slug("a b:c") == "a_b_c" and slug("../..") == "model" and slug("") == "model"


def test_without_matplotlib_a_clear_error(monkeypatch, tmp_path):
    real = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError("No module named 'matplotlib'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(PlotsUnavailable, match=r"tailhound\[loadtest\]"):
        plots._matplotlib()
