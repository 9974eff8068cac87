"""A fake OpenAI-compatible inference engine whose latency follows a known law with known knees.

For trying ``tailhound loadtest`` and for its tests: it speaks the OpenAI API as vLLM serves it
(:mod:`.openai_wire`; ``GET /v1/models``), serves each request by its law (:mod:`.law`) and exposes
``/metrics`` with vLLM's Prometheus names (running, waiting, KV-cache usage, token counters, TTFT, TPOT,
queue-time and token histograms). KV cache usage = tokens held by the running requests / ``kv_cache_tokens``.

With ``api_key`` set, the ``/v1`` routes answer 401 without ``Authorization: Bearer <key>``. Bounds: at most
``max_inflight`` requests admitted or waiting (more get HTTP 503), request bodies up to ``max_body_bytes``
(413), ``max_tokens`` up to ``max_output_tokens`` (400). Run it from code (``port = await FakeEngine().start()``,
or :func:`~.serve.serve_in_thread`) or as ``python -m tailhound.capacity.fake_engine --port 8000``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

from tailhound.agents.render import ExpositionWriter
from tailhound.agents.simulator.histogram import (
    ITL_BUCKETS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    CumulativeHistogram,
    build_1_2_5_buckets,
)

from .law import EngineLaw
from .openai_wire import (
    DEFAULT_MODEL,
    MAX_MODEL_LEN,
    Reject,
    StreamChunks,
    completion_json,
    error_response,
    request_tokens,
)


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
            return error_response(401, "Unauthorized", "authentication_error")
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
            raise Reject(400, "the body is not JSON") from None
        prompt, max_tokens = request_tokens(body, chat, self.max_output_tokens, self.model)
        if self.running + self.waiting >= self.max_inflight:
            self.stats.rejected += 1
            raise Reject(503, "the server is at its request limit", "server_error")
        return body, prompt, max_tokens

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body, prompt, output = await self._parse(request, chat)
        except Reject as exc:
            return error_response(exc.status, exc.message, exc.kind)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        created = int(time.time())
        if not body.get("stream"):
            await self.generate(prompt, output)
            return web.json_response(completion_json(rid, created, self.model, chat, prompt, output))

        opts = body.get("stream_options")
        chunks = StreamChunks(
            rid, created, self.model, chat, isinstance(opts, dict) and bool(opts.get("include_usage"))
        )
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )
        await resp.prepare(request)

        async def emit(i: int) -> None:
            await resp.write(chunks.token(i))

        try:
            await self.generate(prompt, output, emit)
            await resp.write(chunks.tail(prompt, output))
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
