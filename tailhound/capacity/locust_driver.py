"""What runs inside locust: the child process of ``tailhound loadtest`` that sends the load.

``python -m tailhound.capacity.locust_driver '<json plan>'`` (see :func:`tailhound.capacity.load_plan.driver_plan`
for the keys). Locust imports gevent, which monkey-patches the interpreter (sockets, time, threading,
queue become cooperative), so it runs here and never in the asyncio process that started it. The API key
comes from the environment (``TAILHOUND_LOADTEST_API_KEY``), never from the plan.

The load: a locust :class:`~locust.HttpUser` subclass built at run time, driven headless from code
(:class:`locust.env.Environment` and its local runner), one streamed completion per task.

- mode ``concurrency``: the step's count of users, each in a closed loop (a new request as soon as the
  last one ended);
- mode ``rate``: an open-loop arrival process (Poisson or constant gaps at the step's rate) from a
  dispatcher; a pool of ``max_concurrency`` users takes the arrivals from a queue. An arrival no user was
  free for waits (``late`` counts those that waited over 100 ms); more than ``max_concurrency`` waiting
  are dropped (``missed``).

What it writes on standard output, one JSON object a line (anything else the process prints goes to
standard error):

- ``{"k": "ready", "users": N}`` once the users are spawned;
- ``{"k": "step", "i": i, "offered": x, "at": unix}`` when step i starts;
- ``{"k": "r", "s": step, "t0": unix, "t1": unix, "ttft": s, "tpot": s, "tok": n, "err": null|"..."}`` per request
  (the step it started in);
- ``{"k": "step_end", "i": i, "at": unix, "started": n, "late": n, "missed": n}``;
- ``{"k": "r", ..., "cut": true, "err": "cut: ..."}`` for each request still running ``drain_s`` after the last
  step (its TTFT when its first token came): the test ends then instead of waiting for a saturated engine's
  queue to drain (on the fake engine, the ~400 requests a 10 x 5 s ramp past the knee queues take ~55 s);
- ``{"k": "end", "stopped": null|"reason"}`` last, after the requests in flight finished or were cut.

Per request: :mod:`tailhound.capacity.completion_stream` (the body, the stream read, its timing).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import signal
import sys
import threading
import time

if __name__ != "__main__":  # locust's import monkey-patches the whole interpreter (gevent): a process of its own
    raise ImportError(
        "tailhound.capacity.locust_driver runs as its own process: "
        "python -m tailhound.capacity.locust_driver '<json plan>'"
    )

from locust import HttpUser, constant, task
from locust.env import Environment
from locust.exception import StopUser

from tailhound.agents.collectors.sse import SSEProtocolError
from tailhound.capacity.completion_stream import StreamRead, describe, prompt_text, read_stream, request_body
from tailhound.capacity.token_mix import TokenMix

API_KEY_ENV = "TAILHOUND_LOADTEST_API_KEY"
LATE_S = 0.1
#: a step's error rate is judged once this many of its requests ended
MIN_FOR_ERROR_RATE = 10


class Driver:
    def __init__(self, plan: dict, out) -> None:  # a text file
        self.plan = plan
        self.out = out
        self.mode: str = plan["mode"]
        self.loads: list[float] = [float(x) for x in plan["loads"]]
        self.step_s: float = float(plan["step_s"])
        self.max_requests: int = int(plan["max_requests"])
        self.max_duration_s: float = float(plan["max_duration_s"])
        self.max_error_rate: float = float(plan["max_error_rate"])
        self.timeout_s: float = float(plan["request_timeout_s"])
        self.drain_s: float = min(float(plan.get("drain_s", self.timeout_s)), self.timeout_s)
        self.pool: int = int(plan["max_concurrency"])
        self.mix = TokenMix.from_dict(plan["token_mix"])
        self.sampler = self.mix.sampler(int(plan["seed"]))
        self.prompt_rng = random.Random(int(plan["seed"]) + 1)
        self.arrival_rng = random.Random(int(plan["seed"]) + 2)
        self.poisson = plan.get("arrivals", "poisson") == "poisson"
        self.step = -1
        self.rate = 0.0
        self.stopping = False
        self.stopped: str | None = None
        self.sent = 0
        self.inflight = 0
        #: the requests running: id -> [step, start (unix), start (perf counter), first token (perf), chunks]
        self.live: dict[int, list] = {}
        self.arrivals: queue.Queue[float] = queue.Queue()
        self.tally: dict[int, list[int]] = {}  # step -> [started, ended, errors, late, missed]
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        if key := os.environ.get(API_KEY_ENV):
            headers["Authorization"] = f"Bearer {key}"
        self.headers = headers

    # -- output ---------------------------------------------------------------------------------------------

    def emit(self, **obj: object) -> None:
        try:
            self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
            self.out.flush()
        except (BrokenPipeError, ValueError):  # the parent is gone: nobody reads the results
            self.stop("the parent process went away")

    def stop(self, reason: str) -> None:
        if self.stopped is None:
            self.stopped = reason
        self.stopping = True

    # -- one request ----------------------------------------------------------------------------------------

    def request(self, client) -> None:  # locust's HttpSession
        if self.sent >= self.max_requests:
            self.stop(f"max-requests: {self.max_requests} requests sent")
            return
        self.sent += 1
        step = self.step
        tally = self.tally.setdefault(step, [0, 0, 0, 0, 0])
        tally[0] += 1
        prompt_tokens, output_tokens = self.sampler.next()
        data = request_body(self.plan, prompt_text(self.prompt_rng, prompt_tokens), output_tokens)
        self.inflight += 1
        t0_wall, t0 = time.time(), time.perf_counter()
        rid = self.sent
        live = self.live[rid] = [step, t0_wall, t0, None, 0]
        got = StreamRead()  # filled as the stream is read: what came before a failure counts too
        err = None
        resp = None
        try:
            # allow_redirects=False: a hop's host was never checked against the target rule
            resp = client.post(
                self.plan["path"],
                data=data,
                headers=self.headers,
                stream=True,
                allow_redirects=False,
                timeout=(min(10.0, self.timeout_s), self.timeout_s),
                name="completion",
            )
            if 300 <= resp.status_code < 400:
                err = f"HTTP {resp.status_code} redirect not followed"
            elif resp.status_code != 200:
                err = f"HTTP {resp.status_code}" if resp.status_code else describe(getattr(resp, "error", None))
            else:
                read_stream(resp.raw, t0, self.timeout_s, live, got)
                err = got.err
        except SSEProtocolError as exc:
            err = f"protocol: {exc}"
        except Exception as exc:  # every failure of a request is one error of its step
            err = describe(exc)
        finally:
            if resp is not None and resp.raw is not None:  # (no raw: the request failed before a response)
                try:
                    if got.eof and err is None:
                        resp.raw.release_conn()  # read to its end: the connection goes back to the pool
                    else:
                        resp.close()
                except Exception:  # closing a broken connection may fail too; it is dropped
                    pass
        t1 = time.perf_counter()
        tokens = got.usage_tokens or got.chunks
        first, last = got.first, got.last
        rec: dict = {
            "k": "r",
            "s": step,
            "t0": round(t0_wall, 6),
            "t1": round(t0_wall + (t1 - t0), 6),
            "ttft": None,
            "tpot": None,
            "tok": tokens,
            "err": err,
        }
        if err is None:
            rec["ttft"] = round(first - t0, 6)
            if tokens >= 2 and last > first:
                rec["tpot"] = round((last - first) / (tokens - 1), 7)
        self.inflight -= 1
        if self.live.pop(rid, None) is None:
            return  # cut at the end of the test: its record went out then
        end_step = self.tally.setdefault(step, [0, 0, 0, 0, 0])
        end_step[1] += 1
        if err is not None:
            end_step[2] += 1
        self.emit(**rec)

    # -- pacing ---------------------------------------------------------------------------------------------

    def _gap(self) -> float | None:
        rate = self.rate
        if rate <= 0:
            return None
        return self.arrival_rng.expovariate(rate) if self.poisson else 1.0 / rate

    def dispatch(self) -> None:
        """Rate mode: put arrival times on the queue at the step's rate (a greenlet: threading is patched)."""
        step, t = None, None
        while not self.stopping:  # bounded by the end of the test; at most 0.2 s a pass
            now = time.monotonic()
            if self.step != step:  # a new step: its first arrival one gap after its start
                step = self.step
                gap = self._gap()
                t = None if gap is None else now + gap
            if t is None:
                time.sleep(0.05)
                continue
            if now < t:
                time.sleep(min(0.2, t - now))
                continue
            if t < now - 1.0:
                t = now  # fell behind by over a second (a busy process): go on from now, no burst
            if self.arrivals.qsize() >= self.pool:
                self.tally.setdefault(self.step, [0, 0, 0, 0, 0])[4] += 1
            else:
                self.arrivals.put(t)
            gap = self._gap()
            t = None if gap is None else t + gap

    def take_arrival(self) -> bool:
        try:
            t = self.arrivals.get(timeout=0.2)
        except queue.Empty:
            return False
        if self.stopping:
            return False
        if time.monotonic() - t > LATE_S:
            self.tally.setdefault(self.step, [0, 0, 0, 0, 0])[3] += 1
        return True

    # -- the run --------------------------------------------------------------------------------------------

    def user_class(self) -> type[HttpUser]:
        driver = self
        parts = self.plan["base"]

        class LoadUser(HttpUser):
            host = parts
            wait_time = constant(0)

            @task
            def completion(self) -> None:
                if driver.stopping:
                    raise StopUser()
                if driver.mode == "rate" and not driver.take_arrival():
                    return
                if driver.stopping:
                    raise StopUser()
                driver.request(self.client)

        return LoadUser

    def _step_errors(self, i: int) -> str | None:
        started, ended, errors, _late, _missed = self.tally.get(i, [0, 0, 0, 0, 0])
        if ended >= MIN_FOR_ERROR_RATE and errors / ended > self.max_error_rate:
            return f"error-rate: {errors} of {ended} requests of step {i + 1} failed (over {self.max_error_rate:.0%})"
        return None

    def run(self) -> None:
        env = Environment(user_classes=[self.user_class()], host=self.plan["base"])
        runner = env.create_local_runner()
        t_start = time.monotonic()
        deadline = t_start + self.max_duration_s
        if self.mode == "rate":
            runner.start(self.pool, spawn_rate=max(100, self.pool * 4))
            spawn_deadline = time.monotonic() + 60
            while runner.user_count < self.pool and time.monotonic() < spawn_deadline:
                time.sleep(0.05)
            threading.Thread(target=self.dispatch, name="dispatch", daemon=True).start()
        self.emit(k="ready", users=runner.user_count)
        for i, load in enumerate(self.loads):
            if self.stopping:
                break
            self.step, self.rate = i, (load if self.mode == "rate" else 0.0)
            self.tally.setdefault(i, [0, 0, 0, 0, 0])
            self.emit(k="step", i=i, offered=load, at=round(time.time(), 6))
            if self.mode == "concurrency":
                users = max(1, round(load))
                runner.start(users, spawn_rate=max(100, users * 4))
            step_end = time.monotonic() + self.step_s
            while not self.stopping:  # bounded: step_s, and max_duration
                now = time.monotonic()
                if now >= deadline:
                    self.stop(f"max-duration: {self.max_duration_s:g} s reached")
                    break
                if now >= step_end:
                    break
                if (reason := self._step_errors(i)) is not None:
                    self.stop(reason)
                    break
                time.sleep(min(0.1, step_end - now, max(0.0, deadline - now)))
            started, _ended, _errors, late, missed = self.tally[i]
            self.emit(
                k="step_end",
                i=i,
                at=round(time.time(), 6),
                started=started,
                late=late,
                missed=missed,
                cpu_warning=bool(getattr(runner, "cpu_warning_emitted", False)),
            )
            if not self.stopping and (reason := self._step_errors(i)) is not None:
                self.stop(reason)
        self.stopping = True
        self.rate = 0.0
        drain_deadline = time.monotonic() + self.drain_s
        while self.live and time.monotonic() < drain_deadline:  # bounded: drain_s (at most the request timeout)
            time.sleep(0.05)
        self.cut_live()
        self.emit(k="end", stopped=self.stopped, inflight=self.inflight)
        runner.quit()

    def cut_live(self) -> None:
        """A record for each request still running (popped: its own record never goes out), marked cut."""
        now_wall, now = time.time(), time.perf_counter()
        for _rid, (step, t0_wall, t0, first, chunks) in sorted(self.live.items()):
            self.emit(
                k="r",
                s=step,
                t0=round(t0_wall, 6),
                t1=round(now_wall, 6),
                ttft=None if first is None else round(first - t0, 6),
                tpot=None,
                tok=chunks,
                cut=True,
                err=f"cut: still running {now - t0:.1f} s after it started, {self.drain_s:g} s after the end",
            )
        self.live.clear()


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tailhound.capacity.locust_driver '<json plan>'", file=sys.stderr)
        return 2
    plan = json.loads(argv[1])
    out = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # whatever else prints (locust) goes to standard error: standard output is the protocol
    logging.getLogger("locust").setLevel(logging.ERROR)  # its spawn-rate and ramping notes are not ours
    driver = Driver(plan, out)
    signal.signal(signal.SIGTERM, lambda *_: driver.stop("interrupted"))
    signal.signal(signal.SIGINT, lambda *_: driver.stop("interrupted"))
    driver.run()
    out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
