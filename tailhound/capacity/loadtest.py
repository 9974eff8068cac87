"""``tailhound loadtest``: ramp the load on an OpenAI-compatible endpoint in steps and measure where it bends.

The playbook: load-test with the real token mix (:mod:`.token_mix`), ramping from zero to 1.5x the peak,
and record where TTFT and TPOT bend. This module is the asyncio side:

- it refuses any target not explicitly configured (:func:`check_target`): an http(s) URL given by the
  user, on a loopback address unless its host is allowed with ``--allow-host``; no request (completions,
  the model lookup, ``/metrics``) follows a redirect, whose host was never checked;
- it starts the load driver -- locust, headless, in a child process (:mod:`.locust_driver`: gevent
  patches the interpreter it runs in) -- with the plan as JSON, and reads its per-request records (JSON
  lines) as they come;
- during the test it scrapes the engine's ``/metrics`` (queue, batch and KV-cache gauges, by the signal
  catalog's names for vLLM, TGI and NIM) every ~1 s;
- it aggregates each step into a :class:`~tailhound.capacity.model.StepResult` and the whole into a
  :class:`~tailhound.capacity.model.LoadTestResult`.

How a step is counted: ``requests``, ``throughput_rps`` and ``output_tokens_per_s`` are the requests that
completed (successfully) within the step's time window, whenever they started; ``ttft``, ``tpot`` and
``errors`` are the requests that *started* in the step (the load they met), measured to their end, the
last step's included (the driver lets the requests in flight finish); ``concurrency_mean`` is the mean
number of requests in flight over the window (every request's overlap with it, divided by its length);
``engine`` holds the means of the engine's gauges scraped during the window.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import aiohttp

from tailhound.agents.collectors.httpbody import read_body
from tailhound.capacity.model import LoadTestResult, Percentiles, StepResult
from tailhound.capacity.token_mix import ENGINE_JOBS, TokenMix
from tailhound.errors import TailhoundError

#: The environment variable the API key is read from (the driver reads it too; never on a command line).
API_KEY_ENV = "TAILHOUND_LOADTEST_API_KEY"
#: Least observations for each percentile (fewer: None, "too few requests to say").
MIN_COUNT = {"p50": 1, "p95": 20, "p99": 100}
MIN_STEP_S = 2.0
#: Engine figures of a step: result key -> (catalog signal, how the series of one scrape combine).
ENGINE_FIGURES = {
    "queue": ("engine.requests_waiting", "sum"),
    "batch": ("engine.requests_running", "sum"),
    "kv_cache_usage": ("engine.kv_cache_usage", "mean"),
}
MAX_METRICS_BYTES = 16 << 20
STDERR_TAIL = 40

Progress = Callable[[str, dict], None]


class TargetRefused(TailhoundError):
    """A load-test target that is not explicitly configured (or not an http(s) URL)."""


def is_loopback(host: str) -> bool:
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Target:
    """A checked endpoint: ``base`` as given (no credentials), its origin and API root (``.../v1``)."""

    base: str
    origin: str
    api_root: str
    host: str

    def api_path(self, api: str) -> str:
        return f"{self.api_root}/{'chat/completions' if api == 'chat' else 'completions'}"

    @property
    def metrics_url(self) -> str:
        return f"{self.origin}/metrics"


def check_target(url: str | None, allowed_hosts: Iterable[str] = (), option: str = "--target") -> Target:
    """`url` if it may be loaded: http(s), a host, no credentials; loopback, or a host in `allowed_hosts`."""
    if not url or not url.strip():
        raise TargetRefused(
            f"{option} is required: the endpoint to load (e.g. http://127.0.0.1:8000/v1); tailhound never picks one"
        )
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise TargetRefused(f"{option}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise TargetRefused(
            f"{option}: only http:// and https:// URLs can be load-tested, not "
            f"{parts.scheme + '://' if parts.scheme else 'a URL without a scheme'}"
        )
    if parts.username is not None or parts.password is not None:
        raise TargetRefused(
            f"{option}: credentials in the URL are refused; give the API key with {API_KEY_ENV} or --api-key-file"
        )
    host = parts.hostname
    if not host:
        raise TargetRefused(f"{option}: the URL has no host")
    if parts.query or parts.fragment:
        raise TargetRefused(f"{option}: give the base URL without a query or fragment")
    allowed = {h.strip().strip("[]").lower().rstrip(".") for h in allowed_hosts if h.strip()}
    if not is_loopback(host) and host.lower().rstrip(".") not in allowed:
        raise TargetRefused(
            f"{option}: {host} is not a loopback address; load-testing it needs --allow-host {host}"
            " (a load test saturates the endpoint: only ones you name explicitly)"
        )
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = parts.path.rstrip("/")
    api_root = path if path.endswith("/v1") else f"{path}/v1"
    return Target(
        base=f"{parts.scheme}://{netloc}{path}", origin=f"{parts.scheme}://{netloc}", api_root=api_root, host=host
    )


def plan_loads(mode: str, steps: int, peak: float | None = None, target_load: float | None = None) -> list[float]:
    """The offered load of each step: ``target / steps`` up to ``target`` (default 1.5 x `peak`)."""
    if steps < 1:
        raise TailhoundError("--steps must be at least 1")
    top = target_load if target_load is not None else (1.5 * peak if peak is not None else None)
    if top is None:
        raise TailhoundError(
            "give the load to reach: --peak X (the ramp goes to 1.5 x X), --target-load X, or "
            "--from-recording FILE (its peak)"
        )
    if not math.isfinite(top) or top <= 0:
        raise TailhoundError(f"the top load must be > 0, got {top:g}")
    loads = [top * (i + 1) / steps for i in range(steps)]
    if mode == "concurrency":
        return [float(max(1, round(x))) for x in loads]
    return [round(x, 6) for x in loads]


@dataclass
class LoadTestConfig:
    target: Target
    mix: TokenMix
    loads: list[float]
    model: str | None = None
    api: Literal["chat", "completions"] = "chat"
    mode: Literal["rate", "concurrency"] = "rate"
    step_s: float = 60.0
    max_duration_s: float = 1800.0
    max_requests: int = 100_000
    max_error_rate: float = 0.5
    arrivals: Literal["poisson", "constant"] = "poisson"
    max_concurrency: int = 512
    request_timeout_s: float = 120.0
    #: seconds the requests still running after the last step may take to end (then they are cut and counted
    #: as the step's unfinished); None: one step. A saturated engine's queue would otherwise stretch the test
    drain_s: float | None = None
    ignore_eos: bool = True
    seed: int = 0
    #: the engine's /metrics: None -> the target's /metrics when it answers
    metrics: Target | None = None
    scrape_metrics: bool = True
    api_key: str | None = field(default=None, repr=False)

    def check(self) -> None:
        if self.step_s < MIN_STEP_S:
            raise TailhoundError(f"--step-s must be at least {MIN_STEP_S:g} s (percentiles need requests)")
        if not self.loads:
            raise TailhoundError("no load steps")
        for name, low in (("max_duration_s", 1.0), ("request_timeout_s", 0.1)):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= low):
                raise TailhoundError(f"{name} must be >= {low:g}")
        if self.max_requests < 1 or self.max_concurrency < 1:
            raise TailhoundError("--max-requests and --max-concurrency must be at least 1")
        if not 0 < self.max_error_rate <= 1:
            raise TailhoundError("--max-error-rate must be in (0, 1]")


def driver_plan(cfg: LoadTestConfig, model: str) -> dict:
    """What the driver process gets (JSON on its command line): no credentials."""
    return {
        "base": cfg.target.origin,
        "path": cfg.target.api_path(cfg.api),
        "api": cfg.api,
        "model": model,
        "mode": cfg.mode,
        "loads": cfg.loads,
        "step_s": cfg.step_s,
        "max_duration_s": cfg.max_duration_s,
        "max_requests": cfg.max_requests,
        "max_error_rate": cfg.max_error_rate,
        "arrivals": cfg.arrivals,
        "max_concurrency": cfg.max_concurrency,
        "request_timeout_s": cfg.request_timeout_s,
        "drain_s": cfg.step_s if cfg.drain_s is None else cfg.drain_s,
        "ignore_eos": cfg.ignore_eos,
        "seed": cfg.seed,
        "token_mix": cfg.mix.to_dict(),
    }


def percentiles(values: list[float]) -> Percentiles:
    from tailhound.agents.collectors.sse import percentile

    n = len(values)
    if not n:
        return Percentiles()
    ordered = sorted(values)
    out = {k: round(percentile(ordered, int(k[1:]) / 100), 6) for k, least in MIN_COUNT.items() if n >= least}
    return Percentiles(**out, mean=round(sum(ordered) / n, 6), count=n)


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


# --- aggregation -------------------------------------------------------------------------------------------


@dataclass
class _Step:
    index: int
    offered: float
    start: float
    end: float | None = None
    started: int = 0
    late: int = 0
    missed: int = 0
    scrapes: list[dict[str, float]] = field(default_factory=list)


@dataclass
class _Request:
    step: int
    t0: float
    t1: float
    ttft: float | None
    tpot: float | None
    tokens: int
    err: str | None
    #: still running when the test ended (not an error; its TTFT, when known, is a lower bound)
    cut: bool = False


class Aggregator:
    """The driver's records -> step results."""

    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.requests: list[_Request] = []
        self.errors_by_reason: dict[str, int] = {}
        self.stopped: str | None = None
        self.ended = False
        self.ready = False

    @property
    def current(self) -> _Step | None:
        return self.steps[-1] if self.steps and self.steps[-1].end is None else None

    def take(self, obj: dict) -> str | None:
        """One driver line; returns its kind."""
        kind = obj.get("k")
        if kind == "r":
            req = _Request(
                int(obj["s"]),
                float(obj["t0"]),
                float(obj["t1"]),
                obj.get("ttft"),
                obj.get("tpot"),
                int(obj.get("tok") or 0),
                obj.get("err"),
                bool(obj.get("cut")),
            )
            self.requests.append(req)
            if req.err and not req.cut:
                reason = req.err.split(":")[0]
                self.errors_by_reason[reason] = self.errors_by_reason.get(reason, 0) + 1
        elif kind == "step":
            self.steps.append(_Step(int(obj["i"]), float(obj["offered"]), float(obj["at"])))
        elif kind == "step_end":
            for st in self.steps:
                if st.index == int(obj["i"]):
                    st.end = float(obj["at"])
                    st.started, st.late, st.missed = int(obj["started"]), int(obj["late"]), int(obj["missed"])
        elif kind == "end":
            self.stopped = obj.get("stopped")
            self.ended = True
        elif kind == "ready":
            self.ready = True
        return kind

    def step_result(self, st: _Step, end: float | None = None) -> StepResult | None:
        end = st.end if st.end is not None else end
        if end is None or end - st.start <= 0:
            return None
        start, duration = st.start, end - st.start
        done = [r for r in self.requests if r.err is None and start <= r.t1 < end]
        mine = [r for r in self.requests if r.step == st.index]
        ok = [r for r in mine if r.err is None]
        cut = [r for r in mine if r.cut]
        overlap = sum(max(0.0, min(r.t1, end) - max(r.t0, start)) for r in self.requests)
        return StepResult(
            index=st.index,
            offered=st.offered,
            started_at=start,
            duration_s=round(duration, 6),
            requests=len(done),
            errors=sum(1 for r in mine if r.err is not None and not r.cut),
            unfinished=len(cut),
            throughput_rps=round(len(done) / duration, 6),
            output_tokens_per_s=round(sum(r.tokens for r in done) / duration, 6),
            concurrency_mean=round(overlap / duration, 6),
            ttft=percentiles([r.ttft for r in ok if r.ttft is not None]),
            tpot=percentiles([r.tpot for r in ok if r.tpot is not None]),
            engine={
                k: round(sum(s[k] for s in st.scrapes if k in s) / n, 6)
                for k in ENGINE_FIGURES
                if (n := sum(1 for s in st.scrapes if k in s))
            },
        )

    def live(self) -> dict:
        """The running step so far (for progress)."""
        st = self.current
        if st is None:
            return {}
        mine = [r for r in self.requests if r.step == st.index]
        ok = [r for r in mine if r.err is None]
        return {
            "index": st.index,
            "offered": st.offered,
            "elapsed": time.time() - st.start,
            "done": len(ok),
            "errors": len(mine) - len(ok),
            "ttft": percentiles([r.ttft for r in ok if r.ttft is not None]),
            "tpot": percentiles([r.tpot for r in ok if r.tpot is not None]),
            "engine": st.scrapes[-1] if st.scrapes else {},
        }


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
