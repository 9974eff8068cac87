"""Running the fake engine: on its own event loop in a thread (synchronous callers), or from the command line.

``python -m tailhound.capacity.fake_engine --port 8000`` runs :func:`main`, on loopback addresses only (the
engine has no business being reachable from elsewhere).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import threading
from collections.abc import Iterator
from dataclasses import asdict

from .law import EngineLaw
from .openai_wire import DEFAULT_MODEL
from .server import FakeEngine


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
