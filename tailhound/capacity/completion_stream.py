"""One streamed completion as the load driver sends and times it: the request body, the stream read, the record.

Client-side timing: TTFT = first content chunk - request start; TPOT = (last content chunk - first) /
(tokens - 1), tokens from the ``usage`` chunk when the server sends one, else the content chunks counted.
A request fails on an HTTP status other than 200, a connection error or timeout, a stream that ends
without ``data: [DONE]`` (or a finish reason), an error object in the stream, or no content at all.
Plain Python (no locust, no gevent), so that it can be read and tested outside the driver's process.
"""

from __future__ import annotations

import json
import random
import re
import time
from dataclasses import dataclass

from tailhound.agents.collectors.sse import SSEEvent, SSEParser, delta_content

READ_BYTES = 65536
_FINISH = re.compile(r'"finish_reason"\s*:\s*"')  # a chunk with a finish reason (not null)
_USAGE = re.compile(r'"usage"\s*:\s*\{')  # the usage chunk (not "usage": null)
#: prompt words (one token each on the fake engine; common English words elsewhere)
VOCAB = (
    "time", "year", "people", "way", "day", "man", "thing", "woman", "life", "child", "world", "school", "state",
    "family", "student", "group", "country", "problem", "hand", "part", "place", "case", "week", "company",
    "system", "program", "question", "work", "number", "night", "point", "home", "water", "room", "mother", "area",
    "money", "story", "fact", "month", "lot", "right", "study", "book", "eye", "job", "word", "business", "issue",
    "side", "kind", "head", "house", "service", "friend", "father", "power", "hour", "game", "line", "end",
    "member", "law", "car", "city", "name",
)  # fmt: skip


def prompt_text(rng: random.Random, n: int) -> str:
    """`n` words; prompts differ from their first word on, so no prefix cache serves them."""
    start = rng.randrange(len(VOCAB))
    return " ".join(VOCAB[(start + i * 7) % len(VOCAB)] for i in range(n))


def request_body(plan: dict, text: str, output_tokens: int) -> bytes:
    """A streamed completion (chat or not, per the plan) of `text`, asking for `output_tokens` tokens."""
    body: dict = {
        "model": plan["model"],
        "max_tokens": output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0,
    }
    if plan["api"] == "chat":
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    if plan.get("ignore_eos"):
        body["ignore_eos"] = True
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass
class StreamRead:
    """What reading one answer's stream found (perf-counter times of the first and last content chunk)."""

    first: float | None = None
    last: float | None = None
    chunks: int = 0
    usage_tokens: int | None = None
    err: str | None = None
    eof: bool = False


def read_stream(raw, t0: float, timeout_s: float, live: list, got: StreamRead) -> None:
    """Read an answer's Server-Sent Events from `raw` (urllib3's response) until ``[DONE]``, its end or the
    deadline, into `got` (so that a failure keeps what came before it); `live` ([.., .., .., first, chunks])
    follows the progress for a request cut at the end."""
    parser = SSEParser()
    deadline = t0 + timeout_s
    done = finished = False
    while True:  # bounded: each pass reads from the socket (read timeout); the deadline ends a trickle
        data = raw.read1(READ_BYTES)
        now = time.perf_counter()
        if not data:
            got.eof = True
            break
        for ev in parser.feed(data):
            if done or ev.is_done:
                done = True
                continue
            if delta_content(ev):
                got.chunks += 1
                got.first = now if got.first is None else got.first
                got.last = now
                live[3], live[4] = got.first, got.chunks
            if _FINISH.search(ev.data):
                finished = True
            if _USAGE.search(ev.data) and (n := completion_tokens(ev)) is not None:
                got.usage_tokens = n
        if now > deadline:
            if not done:
                got.err = f"timeout: over {timeout_s:g} s"
            break
        if done:
            deadline = min(deadline, now + 1.0)  # the end of the body should follow [DONE]
    if got.err is None and not (done or finished):
        got.err = "stream ended without [DONE]"
    if got.err is None and got.chunks == 0:
        got.err = "no tokens in the stream"


def completion_tokens(ev: SSEEvent) -> int | None:
    """``usage.completion_tokens`` of a usage chunk."""
    try:
        usage = json.loads(ev.data).get("usage")
    except (ValueError, AttributeError):
        return None
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        return usage["completion_tokens"]
    return None


def describe(exc: object) -> str:
    """A failure in one line: the exception's type and the start of its message."""
    if exc is None:
        return "no response"
    text = str(exc).split("\n")[0][:160]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
