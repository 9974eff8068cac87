"""A fake OpenAI-compatible inference engine whose latency follows a known law with known knees.

For trying ``tailhound loadtest`` and for its tests: it speaks the OpenAI API as vLLM serves it
(``POST /v1/chat/completions`` and ``/v1/completions``, streaming with ``stream: true`` -- Server-Sent
Events chunks in OpenAI's format ending with ``data: [DONE]``, the usage chunk with
``stream_options.include_usage`` -- or not; ``GET /v1/models``) and exposes ``/metrics`` with vLLM's
Prometheus names: ``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``
(and V0's ``vllm:gpu_cache_usage_perc``), the token counters, and the TTFT, TPOT, queue-time and
prompt/generation-token histograms.

The law (:class:`EngineLaw`; every duration is divided by ``speed``):

- ``max_num_seqs`` batch slots; a request waits in a FIFO queue until one is free, and holds it until its
  last token.
- Tokens: a prompt has one token per whitespace-separated word of its text (chat: of every message's
  content); the output has exactly ``max_tokens`` tokens (default 16, as if ``ignore_eos``), one per
  chunk.
- Prefill: ``prefill(P) = prefill_base_s + prefill_per_token_s * P``; the first token is out when the
  prefill ends, so TTFT = queue wait + prefill(P).
- Decode: each following token takes ``tpot(n) = base_tpot_s * (1 + tpot_slope * max(0, n - knee_concurrency)
  / knee_concurrency)`` where ``n`` is the number of requests holding a slot (running) when it is made:
  flat up to ``knee_concurrency``, then linear. A request holds its slot for
  ``S(P, O, n) = prefill(P) + (O - 1) * tpot(n)``.

Its knees, for a mix of mean prompt P and mean output O (means suffice: S is linear in P and O):

- TPOT bends at ``knee_concurrency`` requests running, reached at the request rate
  :meth:`EngineLaw.knee_rps` = ``knee_concurrency / S(P, O, knee_concurrency)`` (Little's law);
- throughput plateaus at :meth:`EngineLaw.capacity_rps` = ``max_num_seqs / S(P, O, max_num_seqs)``
  requests/s, with every slot taken (concurrency ``max_num_seqs``): above that rate the queue, and TTFT
  with it, grow without bound -- the TTFT knee of a rate ramp.

KV cache usage = tokens held by the running requests (prompt + generated so far) / ``kv_cache_tokens``.

With ``api_key`` set, the ``/v1`` routes answer 401 without ``Authorization: Bearer <key>``.

Bounds: at most ``max_inflight`` requests admitted or waiting (more get HTTP 503), request bodies up to
``max_body_bytes`` (413), ``max_tokens`` up to ``max_output_tokens`` (400).

Use it from code (``port = await FakeEngine().start()``, or :func:`serve_in_thread` from synchronous
code) or run it: ``python -m tailhound.capacity.fake_engine --port 8000`` (loopback only).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field

from aiohttp import web

from tailhound.agents.render import ExpositionWriter
from tailhound.agents.simulator.histogram import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    CumulativeHistogram,
    build_1_2_5_buckets,
)

DEFAULT_MODEL = "tailhound/fake-llm"
DEFAULT_MAX_TOKENS = 16
MAX_MODEL_LEN = 32768
_WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on")


@dataclass(frozen=True)
class EngineLaw:
    """The fake engine's latency law (see the module docstring); seconds, before ``speed``."""

    max_num_seqs: int = 8
    knee_concurrency: int = 4
    base_tpot_s: float = 0.005
    tpot_slope: float = 0.5
    prefill_base_s: float = 0.001
    prefill_per_token_s: float = 0.00002
    #: KV cache size in tokens (default: 1024 per batch slot)
    kv_cache_tokens: int | None = None
    #: time scale: every duration is divided by this
    speed: float = 1.0

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or not 1 <= self.knee_concurrency <= self.max_num_seqs:
            raise ValueError("need 1 <= knee_concurrency <= max_num_seqs")
        for name in ("base_tpot_s", "speed"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ValueError(f"{name} must be > 0")
        for name in ("tpot_slope", "prefill_base_s", "prefill_per_token_s"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) >= 0):
                raise ValueError(f"{name} must be >= 0")

    @property
    def kv_tokens(self) -> int:
        return self.kv_cache_tokens or self.max_num_seqs * 1024

    def tpot_s(self, running: int) -> float:
        over = max(0, running - self.knee_concurrency) / self.knee_concurrency
        return self.base_tpot_s * (1.0 + self.tpot_slope * over) / self.speed

    def prefill_s(self, prompt_tokens: float) -> float:
        return (self.prefill_base_s + self.prefill_per_token_s * prompt_tokens) / self.speed

    def service_s(self, prompt_tokens: float, output_tokens: float, running: int) -> float:
        """How long a request holds its batch slot with `running` requests in the batch."""
        return self.prefill_s(prompt_tokens) + max(0.0, output_tokens - 1) * self.tpot_s(running)

    def knee_rps(self, prompt_mean: float, output_mean: float) -> float:
        """The request rate where TPOT starts rising (``knee_concurrency`` requests running)."""
        return self.knee_concurrency / self.service_s(prompt_mean, output_mean, self.knee_concurrency)

    def capacity_rps(self, prompt_mean: float, output_mean: float) -> float:
        """The throughput plateau (every slot busy); above it the queue and TTFT grow without bound."""
        return self.max_num_seqs / self.service_s(prompt_mean, output_mean, self.max_num_seqs)


class _Reject(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _error(status: int, message: str, kind: str = "invalid_request_error") -> web.Response:
    body = {"object": "error", "message": message, "type": kind, "param": None, "code": status}
    return web.json_response(body, status=status)


def count_words(value: object) -> int:
    """Prompt tokens of a prompt or message content: whitespace-separated words (text parts of a list too)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        total = 0
        for part in value[:10_000]:
            if isinstance(part, str):
                total += len(part.split())
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                total += len(part["text"].split())
        return total
    return 0


@dataclass
class _Stats:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: int = 0
    rejected: int = 0
    hist: dict[str, CumulativeHistogram] = field(default_factory=dict)


class FakeEngine:
    """The server. ``running``/``waiting`` are the batch and the queue right now."""

    def __init__(
        self,
        law: EngineLaw | None = None,
        *,
        model: str = DEFAULT_MODEL,
        max_inflight: int = 1024,
        max_body_bytes: int = 1 << 20,
        max_output_tokens: int = 4096,
        api_key: str | None = None,
    ) -> None:
        self.law = law or EngineLaw()
        self.api_key = api_key
        self.model = model
        self.max_inflight = max_inflight
        self.max_body_bytes = max_body_bytes
        self.max_output_tokens = max_output_tokens
        self.running = 0
        self._queue: deque[asyncio.Future[None]] = deque()
        self._kv_tokens = 0
        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self.host = "127.0.0.1"
        buckets = build_1_2_5_buckets(MAX_MODEL_LEN)
        self.stats = _Stats(
            hist={
                "ttft": CumulativeHistogram("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
                "tpot": CumulativeHistogram("vllm:request_time_per_output_token_seconds", ITL_BUCKETS),
                "queue": CumulativeHistogram("vllm:request_queue_time_seconds", REQUEST_LATENCY_BUCKETS),
                "e2e": CumulativeHistogram("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS),
                "prompt": CumulativeHistogram("vllm:request_prompt_tokens", buckets),
                "gen": CumulativeHistogram("vllm:request_generation_tokens", buckets),
            }
        )

    # -- the knees, for tests and people ----------------------------------------------------------------

    def knee_rps(self, prompt_mean: float, output_mean: float) -> float:
        return self.law.knee_rps(prompt_mean, output_mean)

    def capacity_rps(self, prompt_mean: float, output_mean: float) -> float:
        return self.law.capacity_rps(prompt_mean, output_mean)

    @property
    def knee_concurrency(self) -> int:
        return self.law.knee_concurrency

    @property
    def waiting(self) -> int:
        return len(self._queue)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    # -- lifecycle ----------------------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        """With an ``api_key``, the /v1 routes need ``Authorization: Bearer <key>`` (as vLLM's --api-key)."""
        if (
            self.api_key
            and request.path.startswith("/v1/")
            and request.headers.get("Authorization") != f"Bearer {self.api_key}"
        ):
            return _error(401, "Unauthorized", "authentication_error")
        return await handler(request)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes, middlewares=[self._auth])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._health)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on `host`:`port` (0: a free port); returns the port."""
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=max(128, self.max_inflight))
        await site.start()
        self.port = int(self._runner.addresses[0][1])  # the port actually bound
        self.host = host
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- the batch ----------------------------------------------------------------------------------------

    async def _admit(self) -> None:
        if self.running < self.law.max_num_seqs and not self._queue:
            self.running += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        try:
            await fut  # _release hands its slot over: `running` does not change
        except asyncio.CancelledError:
            if fut in self._queue:
                self._queue.remove(fut)
            elif fut.done() and not fut.cancelled():
                self._release()  # the slot was ours already
            raise

    def _release(self) -> None:
        while self._queue:
            fut = self._queue.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self.running -= 1

    async def generate(
        self, prompt_tokens: int, output_tokens: int, emit: Callable[[int], Awaitable[None]] | None = None
    ) -> dict[str, float]:
        """Run one request through the law; `emit(i)` is awaited as token i (0-based) comes out.
        Returns the server-side timings (queue, ttft, tpot, e2e seconds)."""
        loop = asyncio.get_running_loop()
        law = self.law
        arrival = loop.time()
        await self._admit()
        held = prompt_tokens
        self._kv_tokens += held
        try:
            admitted = loop.time()
            deadline = admitted + law.prefill_s(prompt_tokens)
            first = None
            for i in range(output_tokens):
                if i:
                    deadline += law.tpot_s(self.running)
                now = loop.time()
                if deadline > now:
                    await asyncio.sleep(deadline - now)
                elif deadline < now - law.tpot_s(self.running):
                    deadline = now  # the event loop fell behind: do not burst to catch up
                self._kv_tokens += 1
                held += 1
                if first is None:
                    first = loop.time()
                if emit is not None:
                    await emit(i)
            end = loop.time()
        finally:
            self._kv_tokens -= held
            self._release()
        first = first if first is not None else end
        timings = {
            "queue": admitted - arrival,
            "ttft": first - arrival,
            "e2e": end - arrival,
            "tpot": (end - first) / (output_tokens - 1) if output_tokens > 1 else 0.0,
        }
        st = self.stats
        st.prompt_tokens += prompt_tokens
        st.generation_tokens += output_tokens
        st.finished += 1
        for key in ("queue", "ttft", "e2e", "tpot"):
            if key != "tpot" or output_tokens > 1:
                st.hist[key].observe(timings[key])
        st.hist["prompt"].observe(prompt_tokens)
        st.hist["gen"].observe(output_tokens)
        return timings

    # -- HTTP ---------------------------------------------------------------------------------------------

    async def _parse(self, request: web.Request, chat: bool) -> tuple[dict, int, int]:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise _Reject(400, "the body is not JSON") from None
        if not isinstance(body, dict):
            raise _Reject(400, "the body must be a JSON object")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _Reject(400, "messages: a non-empty list is required")
            prompt = sum(count_words(m.get("content")) for m in messages[:10_000] if isinstance(m, dict))
        else:
            if "prompt" not in body:
                raise _Reject(400, "prompt is required")
            prompt = count_words(body["prompt"])
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        if max_tokens is None:
            max_tokens = DEFAULT_MAX_TOKENS
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise _Reject(400, "max_tokens must be a positive integer")
        if max_tokens > self.max_output_tokens:
            raise _Reject(400, f"max_tokens {max_tokens} is over this server's limit of {self.max_output_tokens}")
        if prompt + max_tokens > MAX_MODEL_LEN:
            raise _Reject(400, f"prompt ({prompt} tokens) + max_tokens ({max_tokens}) exceeds {MAX_MODEL_LEN}")
        model = body.get("model")
        if model is not None and model != self.model:
            raise _Reject(404, f"The model `{model}` does not exist.", "NotFoundError")
        if self.running + self.waiting >= self.max_inflight:
            self.stats.rejected += 1
            raise _Reject(503, "the server is at its request limit", "server_error")
        return body, max(1, prompt), max_tokens

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body, prompt, output = await self._parse(request, chat)
        except _Reject as exc:
            return _error(exc.status, exc.message, exc.kind)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        usage = {"prompt_tokens": prompt, "completion_tokens": output, "total_tokens": prompt + output}
        if not body.get("stream"):
            await self.generate(prompt, output)
            text = "".join(f" {_WORDS[i % len(_WORDS)]}" for i in range(output))
            choice = (
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": None},
                    "logprobs": None,
                    "finish_reason": "length",
                }
                if chat
                else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
            )
            return web.json_response(
                {
                    "id": rid,
                    "object": "chat.completion" if chat else "text_completion",
                    "created": created,
                    "model": self.model,
                    "choices": [choice],
                    "usage": usage,
                }
            )

        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        obj = "chat.completion.chunk" if chat else "text_completion"
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await resp.prepare(request)

        def chunk(choice: dict | None) -> bytes:
            data: dict = {
                "id": rid,
                "object": obj,
                "created": created,
                "model": self.model,
                "choices": [choice] if choice is not None else [],
            }
            if include_usage:
                data["usage"] = None
            return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict:
            if not chat:
                return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            delta: dict = {"role": "assistant", "content": ""} if role else ({"content": text} if text else {})
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

        async def emit(i: int) -> None:
            out = chunk(choice(None, None, role=True)) if chat and i == 0 else b""
            await resp.write(out + chunk(choice(f" {_WORDS[i % len(_WORDS)]}", None)))

        try:
            await self.generate(prompt, output, emit)
            tail = chunk(choice(None, "length"))
            if include_usage:
                final = {
                    "id": rid,
                    "object": obj,
                    "created": created,
                    "model": self.model,
                    "choices": [],
                    "usage": usage,
                }
                tail += b"data: " + json.dumps(final, separators=(",", ":")).encode() + b"\n\n"
            await resp.write(tail + b"data: [DONE]\n\n")
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client went away; the slot was released
        return resp

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {
                        "id": self.model,
                        "object": "model",
                        "created": 0,
                        "owned_by": "tailhound",
                        "max_model_len": MAX_MODEL_LEN,
                    }
                ],
            }
        )

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="")

    def metrics_text(self) -> str:
        labels = {"engine": "0", "model_name": self.model}
        w = ExpositionWriter()
        w.gauge("vllm:num_requests_running", self.running, labels, "Number of requests in model execution batches.")
        w.gauge("vllm:num_requests_waiting", self.waiting, labels, "Number of requests waiting to be processed.")
        usage = min(1.0, self._kv_tokens / self.law.kv_tokens)
        w.gauge("vllm:kv_cache_usage_perc", usage, labels, "KV-cache usage. 1 means 100 percent usage.")
        w.gauge("vllm:gpu_cache_usage_perc", usage, labels, "GPU KV-cache usage. 1 means 100 percent usage.")
        st = self.stats
        w.counter("vllm:prompt_tokens_total", st.prompt_tokens, labels, "Number of prefill tokens processed.")
        w.counter("vllm:generation_tokens_total", st.generation_tokens, labels, "Number of generation tokens.")
        w.counter(
            "vllm:request_success_total",
            st.finished,
            {**labels, "finished_reason": "length"},
            "Count of successfully processed requests.",
        )
        for h in st.hist.values():
            w.histogram(h.name, h.le, h.cumulative_counts(), h.count, h.sum, labels)
        return w.text()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.metrics_text(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Content-Type-Options": "nosniff"},
        )


@contextlib.contextmanager
def serve_in_thread(engine: FakeEngine | None = None, host: str = "127.0.0.1") -> Iterator[FakeEngine]:
    """Run `engine` on its own event loop in a thread (for synchronous callers); yields it started."""
    engine = engine or FakeEngine()
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(engine.start(host, 0))
        except BaseException as exc:  # handed to the caller
            failure.append(exc)
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(engine.stop())
        loop.close()

    thread = threading.Thread(target=run, name="fake-engine", daemon=True)
    thread.start()
    if not started.wait(30) or failure:
        raise RuntimeError(f"the fake engine did not start: {failure[0] if failure else 'timeout'}")
    try:
        yield engine
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> None:
    defaults = EngineLaw()
    p = argparse.ArgumentParser(
        prog="python -m tailhound.capacity.fake_engine",
        description="A fake OpenAI-compatible engine with a known latency law.",
    )
    p.add_argument("--host", default="127.0.0.1", help="loopback address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port (0: any free one)")
    p.add_argument("--model", default=DEFAULT_MODEL)
    p.add_argument("--max-num-seqs", type=int, default=defaults.max_num_seqs)
    p.add_argument("--knee-concurrency", type=int, default=defaults.knee_concurrency)
    p.add_argument("--base-tpot-ms", type=float, default=defaults.base_tpot_s * 1000)
    p.add_argument("--tpot-slope", type=float, default=defaults.tpot_slope)
    p.add_argument("--prefill-base-ms", type=float, default=defaults.prefill_base_s * 1000)
    p.add_argument("--prefill-ms-per-token", type=float, default=defaults.prefill_per_token_s * 1000)
    p.add_argument("--speed", type=float, default=1.0, help="time scale: every duration is divided by this")
    p.add_argument("--max-inflight", type=int, default=1024)
    args = p.parse_args(argv)
    if not _loopback(args.host):
        p.error(f"--host {args.host}: the fake engine listens on loopback addresses only")
    if not 0 <= args.port <= 65535:
        p.error("--port must be in 0..65535")
    try:
        law = EngineLaw(
            max_num_seqs=args.max_num_seqs,
            knee_concurrency=args.knee_concurrency,
            base_tpot_s=args.base_tpot_ms / 1000,
            tpot_slope=args.tpot_slope,
            prefill_base_s=args.prefill_base_ms / 1000,
            prefill_per_token_s=args.prefill_ms_per_token / 1000,
            speed=args.speed,
        )
    except ValueError as exc:
        p.error(str(exc))
    engine = FakeEngine(law, model=args.model, max_inflight=max(1, args.max_inflight))

    async def serve() -> None:
        port = await engine.start(args.host, args.port)
        host = f"[{args.host}]" if ":" in args.host else args.host
        law_text = json.dumps({k: v for k, v in asdict(law).items() if v is not None})
        print(
            f"fake engine listening on http://{host}:{port} (model {engine.model}; law {law_text}; "
            f"e.g. 512/128 tokens: TPOT knee {law.knee_rps(512, 128):.2f} req/s, "
            f"capacity {law.capacity_rps(512, 128):.2f} req/s)",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await engine.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
