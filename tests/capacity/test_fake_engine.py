"""The fake engine: OpenAI's streaming format, its latency law and knees, vLLM's /metrics."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.request

import aiohttp
import pytest

from tailhound.agents.collectors.sse import SSEParser
from tailhound.agents.exposition import parse_exposition, to_samples
from tailhound.capacity.fake_engine import EngineLaw, FakeEngine, serve_in_thread
from tailhound.capacity.loadtest import engine_figures
from tailhound.catalog import default_catalog


@pytest.fixture
async def engine():
    eng = FakeEngine(
        EngineLaw(
            max_num_seqs=4,
            knee_concurrency=2,
            base_tpot_s=0.01,
            tpot_slope=1.0,
            prefill_base_s=0.005,
            prefill_per_token_s=0.0001,
        )
    )
    await eng.start()
    yield eng
    await eng.stop()


async def stream(session: aiohttp.ClientSession, url: str, body: dict) -> tuple[list[dict], list[float], float, bool]:
    """POST a streaming request; the data events (JSON), each one's arrival, the start, and whether [DONE] came
    last. Parsed with the event-stream rules (the agents' SSE parser)."""
    parser = SSEParser()
    events, arrivals, done = [], [], False
    start = time.perf_counter()
    async with session.post(url, json=body) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for chunk in resp.content.iter_any():
            now = time.perf_counter()
            for ev in parser.feed(chunk):
                assert ev.event == "message" and not done, "nothing may follow [DONE]"
                if ev.is_done:
                    done = True
                    continue
                events.append(json.loads(ev.data))
                arrivals.append(now)
    return events, arrivals, start, done


# --- the law -----------------------------------------------------------------------------------------------


def test_law_and_its_knees():
    law = EngineLaw(
        max_num_seqs=8,
        knee_concurrency=4,
        base_tpot_s=0.005,
        tpot_slope=0.5,
        prefill_base_s=0.001,
        prefill_per_token_s=0.00002,
    )
    assert law.tpot_s(1) == law.tpot_s(4) == pytest.approx(0.005)
    assert law.tpot_s(6) == pytest.approx(0.005 * 1.25) and law.tpot_s(8) == pytest.approx(0.0075)
    assert law.prefill_s(256) == pytest.approx(0.001 + 0.00512)
    assert law.service_s(256, 32, 8) == pytest.approx(0.00612 + 31 * 0.0075)
    assert law.knee_rps(256, 32) == pytest.approx(4 / (0.00612 + 31 * 0.005))
    assert law.capacity_rps(256, 32) == pytest.approx(8 / (0.00612 + 31 * 0.0075))
    fast = EngineLaw(speed=10)
    assert fast.capacity_rps(256, 32) == pytest.approx(10 * EngineLaw().capacity_rps(256, 32))
    assert FakeEngine(law).knee_rps(256, 32) == law.knee_rps(256, 32) and FakeEngine(law).knee_concurrency == 4
    with pytest.raises(ValueError):
        EngineLaw(max_num_seqs=4, knee_concurrency=5)


# --- the OpenAI format -------------------------------------------------------------------------------------


async def test_chat_stream_in_openai_format(engine):
    async with aiohttp.ClientSession() as s:
        body = {
            "model": engine.model,
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"}],
            "max_tokens": 7,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        events, _arrivals, _start, done = await stream(s, f"{engine.url}/v1/chat/completions", body)
    assert done
    assert {e["id"] for e in events} == {events[0]["id"]} and events[0]["id"].startswith("chatcmpl-")
    assert all(e["object"] == "chat.completion.chunk" and e["model"] == engine.model for e in events)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [e for e in events if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert len(content) == 7 and all(e["choices"][0]["finish_reason"] is None for e in content)
    finish = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "length",
    }
    assert events[-1]["choices"] == [] and events[-1]["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "total_tokens": 12,
    }
    assert all(e["usage"] is None for e in events[:-1])
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert len(text.split()) == 7


async def test_completions_stream_without_usage(engine):
    async with aiohttp.ClientSession() as s:
        body = {"model": engine.model, "prompt": "a b c d e f", "max_tokens": 4, "stream": True}
        events, _a, _s, done = await stream(s, f"{engine.url}/v1/completions", body)
    assert done and all("usage" not in e for e in events)
    assert all(e["object"] == "text_completion" and e["id"].startswith("cmpl-") for e in events)
    texts = [e["choices"][0]["text"] for e in events]
    assert len([t for t in texts if t]) == 4 and events[-1]["choices"][0]["finish_reason"] == "length"
    assert len("".join(texts).split()) == 4


async def test_non_streaming_and_models(engine):
    async with aiohttp.ClientSession() as s:
        async with s.post(
            f"{engine.url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": [{"type": "text", "text": "x y"}]}], "max_tokens": 3},
        ) as r:
            chat = await r.json()
        async with s.post(f"{engine.url}/v1/completions", json={"prompt": ["p q", "r"]}) as r:
            comp = await r.json()
        async with s.get(f"{engine.url}/v1/models") as r:
            models = await r.json()
    assert chat["object"] == "chat.completion" and chat["choices"][0]["finish_reason"] == "length"
    assert len(chat["choices"][0]["message"]["content"].split()) == 3
    assert chat["usage"] == {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    assert comp["object"] == "text_completion" and comp["usage"]["completion_tokens"] == 16  # the default
    assert comp["usage"]["prompt_tokens"] == 3
    assert models["object"] == "list" and models["data"][0]["id"] == engine.model


@pytest.mark.parametrize(
    "body,status",
    [
        ("not json", 400),
        ({"messages": []}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}, 400),
        ({"messages": [{"role": "user", "content": "x"}], "model": "other"}, 404),
        ({"messages": [{"role": "user", "content": "x " * 600_000}]}, 413),
    ],
)
async def test_bad_requests(engine, body, status):
    async with aiohttp.ClientSession() as s:
        kwargs = {"data": body} if isinstance(body, str) else {"json": body}
        async with s.post(f"{engine.url}/v1/chat/completions", **kwargs) as r:
            assert r.status == status
            if status != 413:
                assert (await r.json())["object"] == "error"


async def test_api_key_guards_the_v1_routes():
    eng = FakeEngine(api_key="s3cret")
    await eng.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{eng.url}/v1/models") as r:
                assert r.status == 401
            async with s.get(f"{eng.url}/v1/models", headers={"Authorization": "Bearer s3cret"}) as r:
                assert r.status == 200
            async with s.get(f"{eng.url}/metrics") as r:
                assert r.status == 200
    finally:
        await eng.stop()


async def test_inflight_limit_answers_503():
    eng = FakeEngine(EngineLaw(max_num_seqs=1, knee_concurrency=1, base_tpot_s=0.05), max_inflight=2)
    await eng.start()
    try:
        async with aiohttp.ClientSession() as s:

            async def one() -> int:
                async with s.post(f"{eng.url}/v1/completions", json={"prompt": "x", "max_tokens": 4}) as r:
                    await r.read()
                    return r.status

            statuses = await asyncio.gather(*(one() for _ in range(5)))
        assert sorted(statuses) == [200, 200, 503, 503, 503]
    finally:
        await eng.stop()


# --- the latency law, measured -----------------------------------------------------------------------------


async def test_ttft_and_tpot_follow_the_law_alone(engine):
    law = engine.law
    async with aiohttp.ClientSession() as s:
        body = {"prompt": " ".join(["w"] * 300), "max_tokens": 20, "stream": True}
        events, arrivals, start, _ = await stream(s, f"{engine.url}/v1/completions", body)
    content = [t for e, t in zip(events, arrivals, strict=True) if e["choices"][0]["text"]]
    ttft, tpot = content[0] - start, (content[-1] - content[0]) / (len(content) - 1)
    assert law.prefill_s(300) <= ttft < law.prefill_s(300) + 0.05  # 35 ms prefill
    assert tpot == pytest.approx(law.tpot_s(1), rel=0.2)  # 10 ms


@pytest.mark.timing
async def test_queue_and_slower_tokens_past_the_knee(engine):
    law = engine.law  # 4 slots, TPOT flat up to 2 running, x2 at 4
    seen: list[tuple[float, float]] = []

    async def watch() -> None:
        async with aiohttp.ClientSession() as s:
            for _ in range(200):  # bounded: the requests end within ~1 s
                async with s.get(f"{engine.url}/metrics") as r:
                    fig = engine_figures(await r.text())
                seen.append((fig["batch"], fig["queue"]))
                await asyncio.sleep(0.01)
                if len(seen) > 5 and fig["batch"] == 0:
                    return

    async with aiohttp.ClientSession() as s:
        body = {"prompt": "a b", "max_tokens": 30, "stream": True}
        watcher = asyncio.create_task(watch())
        results = await asyncio.gather(*(stream(s, f"{engine.url}/v1/completions", body) for _ in range(6)))
        await watcher
    assert max(b for b, _ in seen) == 4 and max(q for _, q in seen) == 2
    ttfts, tpots = [], []
    for events, arrivals, start, done in results:
        assert done
        content = [t for e, t in zip(events, arrivals, strict=True) if e["choices"][0]["text"]]
        ttfts.append(content[0] - start)
        tpots.append((content[-1] - content[0]) / (len(content) - 1))
    ttfts.sort()
    # 4 ran at once (TPOT 2x base), 2 waited for a slot: a whole service time
    assert ttfts[3] < 0.1 and ttfts[4] > law.service_s(2, 30, 4) * 0.9
    assert max(tpots) == pytest.approx(law.tpot_s(4), rel=0.25) and law.tpot_s(4) == pytest.approx(0.02)
    metrics = engine.metrics_text()
    assert (
        'vllm:request_success_total{engine="0",model_name="tailhound/fake-llm",finished_reason="length"} 6' in metrics
    )


async def test_metrics_parse_with_the_project_parser_and_map_to_signals(engine):
    async with aiohttp.ClientSession() as s:
        await stream(s, f"{engine.url}/v1/completions", {"prompt": "a b c", "max_tokens": 3, "stream": True})
        async with s.get(f"{engine.url}/metrics") as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
    families = parse_exposition(text)
    assert families.rejected == {} and families.dropped == {}
    errors: list[str] = []
    samples = to_samples(families, errors=errors)
    assert errors == []
    catalog = default_catalog()
    signals = {found[0].name for s in samples if (found := catalog.lookup("vllm", s.name, s.labels))}
    assert {
        "engine.requests_running",
        "engine.requests_waiting",
        "engine.kv_cache_usage",
        "tokens.prompt",
        "tokens.generation",
        "engine.prompt_tokens",
        "engine.generation_tokens",
        "engine.requests_finished",
        "latency.ttft",
        "latency.tpot",
    } <= signals
    hist = {s.name: s for s in samples if s.kind == "histogram"}
    assert hist["vllm:request_prompt_tokens"].count == 1 and hist["vllm:request_prompt_tokens"].sum == 3
    assert hist["vllm:request_generation_tokens"].sum == 3
    assert engine_figures(text) == {"queue": 0.0, "batch": 0.0, "kv_cache_usage": 0.0}


# --- outside asyncio ---------------------------------------------------------------------------------------


def test_serve_in_thread():
    with serve_in_thread() as eng, urllib.request.urlopen(f"{eng.url}/v1/models", timeout=5) as r:
        assert json.load(r)["data"][0]["id"] == eng.model


def test_runs_as_a_module_on_loopback_only():
    proc = subprocess.Popen(
        [sys.executable, "-m", "tailhound.capacity.fake_engine", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert "fake engine listening on http://127.0.0.1:" in line and "capacity" in line
        url = line.split()[4]
        with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
            assert b"vllm:num_requests_running" in r.read()
    finally:
        proc.terminate()
        proc.wait(10)
    bad = subprocess.run(
        [sys.executable, "-m", "tailhound.capacity.fake_engine", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "loopback" in bad.stderr
