"""`tailhound loadtest`: target refusals, the plan, and real load tests (locust) against the fake engine."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tailhound.capacity.fake_engine import FakeEngine, serve_in_thread
from tailhound.capacity.load_plan import plan_loads
from tailhound.capacity.load_steps import Aggregator, percentiles
from tailhound.capacity.load_target import TargetRefused, check_target
from tailhound.capacity.loadtest import engine_figures
from tailhound.capacity.loadtest_cli import register
from tailhound.capacity.model import LoadTestResult
from tailhound.errors import TailhoundError
from tests.capacity.cli_app import app_with

#: The fake's default law with 256-token prompts and 32-token outputs: TPOT knee ~24.8 req/s (4 running),
#: capacity ~33.5 req/s (8 running).
PROMPT, OUTPUT = 256, 32


def app() -> typer.Typer:
    return app_with(register)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app(), ["loadtest", *args], env=env)


@pytest.fixture(scope="module")
def fake_engine() -> Iterator[str]:
    """The fake engine in its own process (its timing is not shared with the test's interpreter)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound.capacity.fake_engine", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line + proc.stderr.read()
        yield m.group(1)
    finally:
        proc.terminate()
        proc.wait(10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_result(path: Path) -> LoadTestResult:
    return LoadTestResult.model_validate_json(path.read_text(encoding="utf-8"))


# --- refusals and the plan (no load sent) ------------------------------------------------------------------


@pytest.mark.parametrize(
    "url,allowed,match",
    [
        (None, [], "--target is required"),
        ("", [], "--target is required"),
        ("ftp://127.0.0.1/v1", [], "only http:// and https://"),
        ("127.0.0.1:8000", [], "only http:// and https://"),
        ("http://10.0.0.5:8000/v1", [], "--allow-host 10.0.0.5"),
        ("https://api.example.com/v1", ["other.example.com"], "--allow-host api.example.com"),
        ("http://0.0.0.0:8000", [], "not a loopback address"),
        ("http://user:pw@127.0.0.1:8000", [], "credentials in the URL"),
        ("http://127.0.0.1:8000/v1?x=1", [], "without a query"),
        ("http://127.0.0.1:99999", [], "not a URL"),
    ],
)
def test_targets_refused(url, allowed, match):
    with pytest.raises(TargetRefused, match=re.escape(match)):
        check_target(url, allowed)


def test_targets_accepted_and_normalised():
    t = check_target("http://127.0.0.1:8000/v1/")
    assert (t.base, t.origin, t.api_root) == ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000", "/v1")
    assert t.api_path("chat") == "/v1/chat/completions" and t.api_path("completions") == "/v1/completions"
    assert t.metrics_url == "http://127.0.0.1:8000/metrics"
    assert check_target("http://localhost:8000").api_root == "/v1"
    assert check_target("http://[::1]:8000/proxy").api_root == "/proxy/v1"
    assert check_target("http://127.0.0.2").base == "http://127.0.0.2"
    allowed = check_target("https://API.example.com/v1", ["api.example.com"])
    assert allowed.host == "api.example.com" and allowed.base == "https://api.example.com/v1"


def test_cli_refuses_before_sending_anything(tmp_path):
    out = tmp_path / "r.json"
    for args, match in [
        ([], "--target is required"),
        (["--target", "http://10.1.2.3:8000/v1"], "--allow-host 10.1.2.3"),
        (["--target", "ftp://127.0.0.1/v1"], "only http:// and https://"),
        (
            ["--target", "http://127.0.0.1:8000", "--metrics", "http://10.9.9.9/metrics"],
            "--metrics: 10.9.9.9 is not a loopback address",
        ),
    ]:
        r = invoke(*args, "--out", str(out), "--peak", "5")
        assert isinstance(r.exception, TargetRefused), r.output
        assert match in str(r.exception)
    r = invoke("--target", "http://127.0.0.1:8000", "--out", str(out))
    assert isinstance(r.exception, TailhoundError) and "--peak" in str(r.exception)
    assert not out.exists()


def test_plan_loads():
    assert plan_loads("rate", 6, peak=20) == [5, 10, 15, 20, 25, 30]
    assert plan_loads("rate", 4, peak=20, target_load=8) == [2, 4, 6, 8]
    assert plan_loads("concurrency", 3, peak=10) == [5, 10, 15]
    assert plan_loads("concurrency", 4, target_load=2) == [1, 1, 2, 2]
    with pytest.raises(TailhoundError, match="--peak"):
        plan_loads("rate", 3)


def test_percentiles_need_enough_requests():
    assert percentiles([]).count == 0 and percentiles([]).p50 is None
    few = percentiles([0.1, 0.2, 0.3])
    assert few.p50 == pytest.approx(0.2) and few.p95 is None and few.mean == pytest.approx(0.2) and few.count == 3
    many = percentiles([i / 100 for i in range(100)])
    assert many.p95 == pytest.approx(0.9405) and many.p99 == pytest.approx(0.9801)


def test_engine_figures_by_catalog_names():
    tgi = (
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 7\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 3\n"
    )
    assert engine_figures(tgi) == {"queue": 7.0, "batch": 3.0}
    dp = (
        'vllm:num_requests_waiting{engine="0"} 2\nvllm:num_requests_waiting{engine="1"} 3\n'
        'vllm:kv_cache_usage_perc{engine="0"} 0.2\nvllm:kv_cache_usage_perc{engine="1"} 0.4\n'
    )
    assert engine_figures(dp) == pytest.approx({"queue": 5.0, "kv_cache_usage": 0.3})
    assert engine_figures("something_else 1\n") == {}


def test_step_aggregation():
    agg = Aggregator()
    agg.take({"k": "step", "i": 0, "offered": 2.0, "at": 100.0})
    recs = [
        (0, 99.5, 100.5, 0.1, 0.01, 10, None),  # started before (another step), completed in the window
        (0, 100.2, 101.0, 0.2, 0.02, 20, None),
        (0, 101.0, 103.0, 0.4, 0.03, 30, None),  # completes after the window: latency counts, throughput not
        (0, 101.5, 101.6, None, None, 0, "HTTP 503"),
    ]
    for s, t0, t1, ttft, tpot, tok, err in recs:
        agg.take({"k": "r", "s": s, "t0": t0, "t1": t1, "ttft": ttft, "tpot": tpot, "tok": tok, "err": err})
    agg.take({"k": "step_end", "i": 0, "at": 102.0, "started": 3, "late": 0, "missed": 0})
    agg.steps[0].scrapes += [{"queue": 1.0, "batch": 4.0}, {"queue": 3.0, "batch": 4.0, "kv_cache_usage": 0.5}]
    st = agg.step_result(agg.steps[0])
    assert st.requests == 2 and st.throughput_rps == 1.0 and st.output_tokens_per_s == 15.0
    assert st.errors == 1 and st.ttft.count == 4 - 1 and st.ttft.p50 == pytest.approx(0.2)
    assert st.concurrency_mean == pytest.approx((0.5 + 0.8 + 1.0 + 0.1) / 2)
    assert st.engine == {"queue": 2.0, "batch": 4.0, "kv_cache_usage": 0.5}
    assert agg.errors_by_reason == {"HTTP 503": 1}


# --- real load tests (locust in a child process) ------------------------------------------------------------


# the rate ramp past the fake engine's knee, measured step by step and analysed: tests/capacity/test_end_to_end.py


@pytest.mark.timing
def test_concurrency_ramp(fake_engine, tmp_path):
    out = tmp_path / "conc.json"
    r = invoke(
        "--target",
        fake_engine,
        "--out",
        str(out),
        "--mode",
        "concurrency",
        "--target-load",
        "12",
        "--steps",
        "2",
        "--step-s",
        "2",
        "--prompt-tokens",
        "64",
        "--output-tokens",
        "16",
        "--api",
        "completions",
    )
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = read_result(out)
    assert res.mode == "concurrency" and res.api == "completions" and res.stopped is None
    assert [s.offered for s in res.steps] == [6.0, 12.0]
    first, top = res.steps
    assert first.concurrency_mean == pytest.approx(6, abs=1.0) and first.engine["queue"] == pytest.approx(0, abs=0.5)
    # 12 in flight on 8 batch slots: 4 wait
    assert top.concurrency_mean == pytest.approx(12, abs=1.5) and top.engine["queue"] > 2
    assert top.engine["batch"] == pytest.approx(8, abs=1) and top.ttft.p50 > 5 * first.ttft.p50
    assert top.throughput_rps > first.throughput_rps * 0.9


@pytest.mark.timing
def test_steps_keep_their_planned_length_past_the_knee(tmp_path):
    """A ramp past the engine's capacity (8.3 req/s here) queues requests the engine serves long after the last
    step; the test ends one drain after it (cut requests are counted as unfinished, not errors), so the run
    is the plan's length. Asserted on the recorded step boundaries."""
    out = tmp_path / "ramp.json"
    with serve_in_thread(FakeEngine()) as eng:  # an engine of its own: the cut requests leave it busy
        r = invoke(
            "--target",
            eng.url,
            "--out",
            str(out),
            "--target-load",
            "30",
            "--steps",
            "3",
            "--step-s",
            "2",
            "--drain",
            "1",
            "--prompt-tokens",
            "512",
            "--output-tokens",
            "128",
            "--no-progress",
        )
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = read_result(out)
    assert [s.offered for s in res.steps] == [10.0, 20.0, 30.0] and res.stopped is None
    for st in res.steps:
        assert st.duration_s == pytest.approx(2.0, abs=0.05)
    for before, after in zip(res.steps, res.steps[1:], strict=False):
        assert after.started_at - before.started_at == pytest.approx(2.0, abs=0.1)
    last_end = res.steps[-1].started_at + res.steps[-1].duration_s
    assert res.finished_at - last_end < 1.0 + 1.5  # the drain, and the driver's exit; not the engine's queue
    assert sum(st.unfinished for st in res.steps) > 10 and all(st.errors == 0 for st in res.steps)
    assert "unfinished:" in r.output and "--drain SECONDS" in r.output
    assert "done/s" in r.output and "TTFT95" in r.output  # the summary table whole, not cut at 80 columns


def test_max_requests_stops_the_ramp(fake_engine, tmp_path):
    out = tmp_path / "bound.json"
    r = invoke(
        "--target",
        fake_engine,
        "--out",
        str(out),
        "--peak",
        "20",
        "--steps",
        "2",
        "--step-s",
        "5",
        "--max-requests",
        "15",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "4",
        "--no-metrics",
    )
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = read_result(out)
    assert res.stopped == "max-requests: 15 requests sent"
    assert len(res.steps) == 1 and res.steps[0].duration_s < 4.5
    assert res.steps[0].ttft.count + res.steps[0].errors == 15
    assert "stopped early" in r.output


def test_max_duration_cuts_the_ramp(fake_engine, tmp_path):
    out = tmp_path / "cut.json"
    r = invoke(
        "--target",
        fake_engine,
        "--out",
        str(out),
        "--peak",
        "10",
        "--steps",
        "3",
        "--step-s",
        "2",
        "--max-duration",
        "3",
        "--prompt-tokens",
        "16",
        "--output-tokens",
        "4",
        "--no-metrics",
    )
    assert r.exit_code == 0, r.output + repr(r.exception)
    res = read_result(out)
    assert res.stopped == "max-duration: 3 s reached"
    assert len(res.steps) == 2 and res.steps[1].duration_s == pytest.approx(1.0, abs=0.3)
    assert res.steps[0].engine == {}  # --no-metrics
    assert res.finished_at - res.started_at < 15


def test_error_rate_aborts_and_unreachable_metrics_are_a_note(tmp_path):
    out = tmp_path / "down.json"
    port = free_port()  # nothing listens there
    r = invoke(
        "--target",
        f"http://127.0.0.1:{port}/v1",
        "--model",
        "m",
        "--out",
        str(out),
        "--peak",
        "20",
        "--steps",
        "3",
        "--step-s",
        "5",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "2",
    )
    assert "no engine metrics" in r.output
    res = read_result(out)
    assert res.stopped is not None and res.stopped.startswith("error-rate:")
    assert len(res.steps) == 1 and res.steps[0].errors >= 10 and res.steps[0].requests == 0
    assert res.steps[0].duration_s < 4.5  # judged while the step ran
    assert r.exit_code == 1  # nothing was served
    assert "ConnectionError" in r.output


def test_api_key_from_the_environment_is_used_and_never_written(tmp_path):
    secret = "sk-test-5f3c2b1e9d"
    out = tmp_path / "key.json"
    with serve_in_thread(FakeEngine(api_key=secret)) as eng:
        args = (
            "--target",
            eng.url,
            "--out",
            str(out),
            "--peak",
            "4",
            "--steps",
            "1",
            "--step-s",
            "2",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "4",
        )
        r = invoke(*args, env={"TAILHOUND_LOADTEST_API_KEY": secret})
        assert r.exit_code == 0, r.output + repr(r.exception)
        res = read_result(out)
        assert res.steps[0].errors == 0 and res.steps[0].requests > 0
        assert res.model == eng.model  # /v1/models answered with the key
        key_file = tmp_path / "key.txt"
        key_file.write_text(secret + "\n")
        r2 = invoke(*args, "--api-key-file", str(key_file), env={"TAILHOUND_LOADTEST_API_KEY": ""})
        assert r2.exit_code == 0, r2.output + repr(r2.exception)
        r3 = invoke(*args, "--model", eng.model, env={"TAILHOUND_LOADTEST_API_KEY": ""})
        assert read_result(out).steps[0].errors > 0 and "HTTP 401" in r3.output
    for text in (r.output, r2.output, r3.output, out.read_text()):
        assert secret not in text
    assert secret not in json.dumps(read_result(out).model_dump())


def test_the_driver_is_never_imported_into_this_process():
    """locust (gevent) would monkey-patch the test's interpreter: the driver only runs as its own process."""
    with pytest.raises(ImportError, match="runs as its own process"):
        import tailhound.capacity.locust_driver  # noqa: F401
    assert "locust" not in sys.modules and "gevent" not in sys.modules


def test_from_a_recording_of_the_engine(tmp_path):
    """Record the fake's /metrics around some traffic, then ramp to 1.5 x the recorded peak with its token mix."""
    import urllib.request

    from tailhound.recording import ScrapeRecord

    rec = tmp_path / "fake.jsonl"
    with serve_in_thread() as eng:

        def scrape(ts: float) -> str:
            with urllib.request.urlopen(f"{eng.url}/metrics", timeout=5) as r:
                body = r.read().decode()
            return ScrapeRecord(ts=ts, node="fake", job="vllm", body=body).to_line() + "\n"

        lines = [scrape(1000.0)]
        for _ in range(10):  # 10 requests of 256 prompt words and 40 tokens "in 10 s"
            req = urllib.request.Request(
                f"{eng.url}/v1/completions",
                headers={"Content-Type": "application/json"},
                data=json.dumps({"prompt": "w " * 256, "max_tokens": 40}).encode(),
            )
            urllib.request.urlopen(req, timeout=10).read()
        lines.append(scrape(1010.0))
        rec.write_text("".join(lines))
        out = tmp_path / "r.json"
        r = invoke(
            "--target",
            eng.url,
            "--out",
            str(out),
            "--from-recording",
            str(rec),
            "--steps",
            "1",
            "--step-s",
            "2",
            "--arrivals",
            "constant",
        )
        assert r.exit_code == 0, r.output + repr(r.exception)
    res = read_result(out)
    assert res.steps[0].offered == pytest.approx(1.5)  # 1.5 x the peak of 1 req/s
    # the fake's vLLM buckets (1-2-5): 256 -> (200, 500], 40 -> (20, 50]
    assert res.token_mix.source == "recording:fake.jsonl"
    assert res.token_mix.prompt_mean == pytest.approx(350.5) and res.token_mix.output_mean == pytest.approx(35.5)
    assert res.steps[0].errors == 0 and res.steps[0].ttft.count >= 1
    assert "peak 1.0 req/s" in r.output
