"""``tailhound loadtest``: ramp the load on an OpenAI-compatible endpoint in steps and measure where it bends.

The playbook: load-test with the real token mix (:mod:`.token_mix`), ramping from zero to 1.5x the peak, and
record where TTFT and TPOT bend. This module is the asyncio side: it checks the target (:mod:`.load_target`),
starts the load driver (locust, headless, in a child process: :mod:`.locust_driver`) with the plan
(:mod:`.load_plan`), reads its per-request records as they come, scrapes the engine's ``/metrics`` every ~1 s
(queue, batch and KV-cache gauges by the catalog's names) and aggregates each step (:mod:`.load_steps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import aiohttp

from tailhound.agents.collectors.httpbody import read_body
from tailhound.capacity.load_plan import LoadTestConfig, driver_plan
from tailhound.capacity.load_steps import ENGINE_FIGURES, Aggregator
from tailhound.capacity.load_target import API_KEY_ENV, Target
from tailhound.capacity.model import LoadTestResult
from tailhound.capacity.token_mix import ENGINE_JOBS
from tailhound.errors import TailhoundError

MAX_METRICS_BYTES = 16 << 20
STDERR_TAIL = 40

Progress = Callable[[str, dict], None]


# --- the engine's /metrics ---------------------------------------------------------------------------------


def engine_figures(text: str) -> dict[str, float]:
    """Queue, batch and KV-cache usage from one scrape, by the catalog's names (first engine that matches)."""
    from tailhound.agents.exposition import parse_exposition
    from tailhound.catalog import default_catalog

    catalog = default_catalog()
    by_name: dict[str, list] = {}
    for fam in parse_exposition(text):
        for s in fam.samples:
            by_name.setdefault(s.name, []).append(s)
    for job in ENGINE_JOBS:
        out: dict[str, float] = {}
        for key, (signal, how) in ENGINE_FIGURES.items():
            spec = catalog.spec(signal)
            for sm in spec.sources.get(job, ()) if spec is not None else ():
                values = [
                    s.value * sm.scale
                    for s in by_name.get(sm.metric, ())
                    if sm.matches(s.labels) and math.isfinite(s.value)
                ]
                if values:
                    out[key] = sum(values) if how == "sum" else sum(values) / len(values)
                    break
        if out:
            return out
    return {}


async def _fetch_text(session: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> str:
    # Never follow a redirect: its target was not checked by check_target, and the API key would go there.
    async with session.get(url, headers=headers, allow_redirects=False) as resp:
        if 300 <= resp.status < 400:
            raise TailhoundError(f"{url}: HTTP {resp.status}, a redirect (not followed: load goes only to --target)")
        if resp.status != 200:
            raise TailhoundError(f"{url}: HTTP {resp.status}")
        raw = await read_body(resp, MAX_METRICS_BYTES, url)  # whole, or a CollectError (a TailhoundError)
        return raw.decode("utf-8", errors="replace")


async def discover_model(session: aiohttp.ClientSession, target: Target, headers: dict[str, str]) -> str:
    """The first model the endpoint lists (``GET /v1/models``)."""
    url = f"{target.origin}{target.api_root}/models"
    try:
        data = json.loads(await _fetch_text(session, url, headers))
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, ValueError, KeyError, IndexError, TypeError, TailhoundError) as exc:
        raise TailhoundError(
            f"could not ask {target.base} for its model ({type(exc).__name__}: {exc}); give it with --model"
        ) from None


# --- the run -----------------------------------------------------------------------------------------------


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


async def _stop_process(proc: asyncio.subprocess.Process, grace_s: float) -> None:
    if proc.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await asyncio.wait_for(proc.wait(), 10)


async def run_loadtest(
    cfg: LoadTestConfig, progress: Progress | None = None, out: Path | None = None
) -> LoadTestResult:
    """Run the ramp; the result is also written to `out` (JSON), when given, even if interrupted."""
    cfg.check()
    say = progress or (lambda kind, data: None)
    timeout = aiohttp.ClientTimeout(total=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        model = cfg.model or await discover_model(session, cfg.target, _headers(cfg.api_key))
        metrics_url, metrics_headers = None, {}
        if cfg.scrape_metrics:
            m = cfg.metrics or cfg.target
            metrics_url = m.metrics_url if cfg.metrics is None else m.base
            # the key goes only where the requests go
            metrics_headers = _headers(cfg.api_key) if m.origin == cfg.target.origin else {}
            try:
                figures = engine_figures(await _fetch_text(session, metrics_url, metrics_headers))
            except (aiohttp.ClientError, TimeoutError, TailhoundError) as exc:
                if cfg.metrics is not None:
                    raise TailhoundError(f"--metrics {metrics_url}: {type(exc).__name__}: {exc}") from None
                say(
                    "note",
                    {"text": f"no engine metrics ({metrics_url}: {type(exc).__name__}); measuring client-side only"},
                )
                metrics_url = None
            else:
                if not figures:
                    say("note", {"text": f"{metrics_url} has no queue/batch/KV-cache gauges the catalog knows"})
                    metrics_url = None
        agg = Aggregator()
        started_at = time.time()

        def finish(stopped: str | None) -> LoadTestResult:
            steps = [s for s in (agg.step_result(st, time.time()) for st in agg.steps) if s is not None]
            result = LoadTestResult(
                target=cfg.target.base,
                model=model,
                api=cfg.api,
                mode=cfg.mode,
                token_mix=cfg.mix.summary(),
                started_at=started_at,
                finished_at=time.time(),
                steps=steps,
                stopped=stopped,
            )
            if out is not None:
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(result.model_dump_json(indent=2) + "\n", encoding="utf-8")
            return result

        try:
            await _drive(cfg, model, agg, session, metrics_url, metrics_headers, say)
        except (asyncio.CancelledError, KeyboardInterrupt):
            finish("interrupted")  # what was measured until then
            raise
        result = finish(agg.stopped)
    say("done", {"result": result, "errors": agg.errors_by_reason})
    return result


async def _drive(
    cfg: LoadTestConfig,
    model: str,
    agg: Aggregator,
    session: aiohttp.ClientSession,
    metrics_url: str | None,
    metrics_headers: dict[str, str],
    say: Progress,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}
    if cfg.api_key:
        env[API_KEY_ENV] = cfg.api_key
    plan = json.dumps(driver_plan(cfg, model), separators=(",", ":"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tailhound.capacity.locust_driver",
        plan,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
        limit=1 << 20,
    )
    stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)

    async def read_stderr() -> None:
        assert proc.stderr is not None
        async for line in proc.stderr:  # bounded: ends with the process
            stderr_tail.append(line.decode("utf-8", errors="replace").rstrip())

    async def scrape() -> None:
        interval = min(1.0, max(0.25, cfg.step_s / 5))
        while True:  # cancelled when the driver ends
            st = agg.current
            if st is not None and metrics_url is not None:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, TailhoundError):
                    figures = engine_figures(await _fetch_text(session, metrics_url, metrics_headers))
                    if figures and agg.current is st:
                        st.scrapes.append(figures)
            await asyncio.sleep(interval)

    async def tick() -> None:
        while True:  # cancelled when the driver ends
            await asyncio.sleep(1.0)
            if live := agg.live():
                say("tick", live)

    helpers = [asyncio.create_task(read_stderr()), asyncio.create_task(scrape()), asyncio.create_task(tick())]
    # the driver bounds itself (max duration, request timeout); this is the bound if it does not
    hard_bound = cfg.max_duration_s + cfg.request_timeout_s + 90.0
    cpu_noted = False
    try:
        assert proc.stdout is not None
        async with asyncio.timeout(hard_bound):
            async for raw in proc.stdout:  # bounded: ends with the process, or the hard bound
                try:
                    obj = json.loads(raw)
                except ValueError:
                    stderr_tail.append(raw.decode("utf-8", errors="replace").rstrip())
                    continue
                kind = agg.take(obj)
                if kind == "step":
                    say("step", {"index": obj["i"], "offered": obj["offered"], "of": len(cfg.loads)})
                elif kind == "step_end":
                    st = next(s for s in agg.steps if s.index == obj["i"])
                    if obj.get("cpu_warning") and not cpu_noted:
                        cpu_noted = True
                        say(
                            "note",
                            {
                                "text": "the load driver's CPU is over 90% (locust): its timings are "
                                "inflated; lower the load or --max-concurrency"
                            },
                        )
                    say(
                        "step_end",
                        {
                            "step": agg.step_result(st),
                            "late": st.late,
                            "missed": st.missed,
                            "started": st.started,
                            "of": len(cfg.loads),
                        },
                    )
                elif kind == "ready":
                    say("ready", {"users": obj.get("users")})
            await proc.wait()
    except TimeoutError:
        agg.stopped = agg.stopped or f"the load driver overran its {hard_bound:g} s bound and was stopped"
    finally:
        await _stop_process(proc, grace_s=10.0)
        for t in helpers:
            t.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)
    if not agg.ended:
        said = "\n".join(stderr_tail) or "(nothing on standard error)"
        if not agg.steps:
            raise TailhoundError(f"the load driver (locust) exited {proc.returncode} before the first step:\n{said}")
        last = stderr_tail[-1] if stderr_tail else "(nothing on standard error)"
        agg.stopped = agg.stopped or f"the load driver exited {proc.returncode} early: {last}"
