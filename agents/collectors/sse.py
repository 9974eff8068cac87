"""Server-Sent Events parsing and the timing analysis of a streamed completion (pure, no I/O).

:class:`SSEParser` follows the WHATWG event-stream rules: lines end with ``\\r\\n``, ``\\n`` or ``\\r``
(also when a chunk boundary falls between ``\\r`` and ``\\n``), ``:`` lines are comments (keep-alives),
``data:`` lines of one event are joined with ``\\n``, a blank line dispatches the event. Bytes are fed as
they come off the socket, so the caller can stamp each event with the arrival time of the chunk that
completed it. :func:`analyse_stream` turns those arrival times into TTFT/TPOT and the buffered-stream
verdict; :func:`delta_content` reads the text an OpenAI-compatible chat chunk carries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass

from tailhound.errors import TailhoundError

#: Fewer content events than this cannot tell streaming from buffering.
MIN_EVENTS_FOR_BUFFERING = 4
#: A stream whose content events arrive in at most this many bursts was held and flushed by a proxy.
MAX_BUFFERED_BURSTS = 2


class SSEProtocolError(TailhoundError):
    """The response is not a usable event stream (a line too long, a data event that is not JSON)."""


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None

    @property
    def is_done(self) -> bool:
        """The OpenAI end-of-stream marker ``data: [DONE]``."""
        return self.data.strip() == "[DONE]"


class SSEParser:
    """Incremental event-stream parser: ``feed(chunk)`` returns the events that chunk completed."""

    def __init__(self, max_line_bytes: int = 1 << 20) -> None:
        self.max_line_bytes = max_line_bytes
        self._buf = bytearray()
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._first_line = True

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buf += chunk
        events: list[SSEEvent] = []
        pos = 0
        buf = self._buf
        while pos < len(buf):  # bounded: every pass consumes at least one line terminator
            cr, lf = buf.find(b"\r", pos), buf.find(b"\n", pos)
            if cr < 0 and lf < 0:
                break
            end = lf if cr < 0 or (0 <= lf < cr) else cr
            if end == cr and cr == len(buf) - 1:
                break  # a lone trailing "\r": the "\n" of a "\r\n" may be in the next chunk
            step = 2 if end == cr and cr + 1 < len(buf) and buf[cr + 1] == 0x0A else 1
            event = self._line(bytes(buf[pos:end]))
            if event is not None:
                events.append(event)
            pos = end + step
        del buf[:pos]
        if len(buf) > self.max_line_bytes:
            raise SSEProtocolError(f"an event-stream line exceeds {self.max_line_bytes} bytes")
        return events

    def finish(self) -> list[SSEEvent]:
        """At the end of the stream: a trailing lone ``\\r`` was a line end after all."""
        if self._buf.endswith(b"\r"):
            return self.feed(b"\n")
        return []

    def _line(self, raw: bytes) -> SSEEvent | None:
        if self._first_line:
            self._first_line = False
            raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark may open the stream
        line = raw.decode("utf-8", errors="replace")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment, e.g. ": keepalive"
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._id = value
        return None  # "retry" and unknown fields are ignored

    def _dispatch(self) -> SSEEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return SSEEvent(data="\n".join(data), event=event or "message", id=self._id)


def delta_content(event: SSEEvent) -> str:
    """The generated text of one chat-completion chunk ('' for role-only, usage or final chunks).

    Reasoning models stream ``reasoning_content`` before ``content``; both are generated tokens, so
    both count for TTFT. A chunk carrying an ``error`` object raises :class:`SSEProtocolError`.
    """
    try:
        payload = json.loads(event.data)
    except ValueError:
        raise SSEProtocolError(f"a data event is not JSON: {event.data[:60]!r}") from None
    if not isinstance(payload, dict):
        raise SSEProtocolError("a data event is not a JSON object")
    if payload.get("error"):
        raise SSEProtocolError("the stream carried an error object")
    choices = payload.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    choice = choices[0]
    delta = choice.get("delta")
    if isinstance(delta, dict):
        for key in ("content", "reasoning_content", "reasoning"):
            text = delta.get(key)
            if isinstance(text, str) and text:
                return text
        return ""
    text = choice.get("text")  # the legacy completions API
    return text if isinstance(text, str) else ""


@dataclass(frozen=True, slots=True)
class StreamTiming:
    """Client-side timing of one streamed completion (seconds)."""

    chunks: int
    bursts: int
    ttft_s: float | None
    tpot_s: float | None
    duration_s: float | None
    first_byte_share: float | None

    @property
    def buffered(self) -> bool | None:
        """True when a proxy/CDN held the stream; None when there are too few events to tell."""
        if self.chunks < MIN_EVENTS_FOR_BUFFERING:
            return None
        return self.bursts <= MAX_BUFFERED_BURSTS


def count_bursts(arrivals: Sequence[float], burst_gap_s: float) -> int:
    """Arrival times -> number of bursts; a new burst starts after a gap longer than `burst_gap_s`."""
    if not arrivals:
        return 0
    return 1 + sum(1 for a, b in zip(arrivals, arrivals[1:], strict=False) if b - a > burst_gap_s)


def analyse_stream(
    arrivals: Sequence[float], start: float, burst_gap_s: float, end: float | None = None
) -> StreamTiming:
    """Timing of a stream from the arrival times of its content events (same clock as `start`).

    `end` is the arrival of the last event of any kind (``[DONE]``); it defaults to the last content
    event. TTFT = first content - start, duration = end - start, TPOT = mean gap between content events.
    """
    arrivals = sorted(arrivals)
    if not arrivals:
        duration = end - start if end is not None else None
        return StreamTiming(0, 0, None, None, duration, None)
    last = max(arrivals[-1], end) if end is not None else arrivals[-1]
    ttft, duration = arrivals[0] - start, last - start
    tpot = (arrivals[-1] - arrivals[0]) / (len(arrivals) - 1) if len(arrivals) >= 2 else None
    share = min(1.0, ttft / duration) if duration > 0 else 1.0
    return StreamTiming(len(arrivals), count_bursts(arrivals, burst_gap_s), ttft, tpot, duration, share)


def percentile(values: Sequence[float], q: float) -> float:
    """The `q` quantile (0..1) with linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is outside [0, 1]")
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
