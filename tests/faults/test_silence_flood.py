"""Fault drill: a silence flood through the notifier's HTTP API (item 6 of the hardening issue).

Before: any local client could create or expire silences for every node, without credentials, and 3,000
silences with 100 KB comments added 300 MB to the worker and 300 MB to the state topic. Now writes need
the bearer token, and a silence is bounded (comment and author 1 KiB, 16 matchers, 30 days, a 64 KiB
body) as is their number (1000 active or pending).

The drill runs the real notifier service (API, state topic on the bundled broker) and sends, over HTTP:

1. the flood without the token: every request refused (401), nothing written;
2. the flood with the token: 100 KB comments, refused (413: the body limit) before they are parsed;
3. silences at the size limits (1 KiB comment) until the count limit: 1000 accepted, the rest 409.

Figures: accepted and refused per phase and status; memory of the process the service runs in: RSS after
each phase and, in the long variant, what Python still holds after it (tracemalloc) and its peak during
it; bytes on the state topic; time per phase.
"""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections import Counter

import aiohttp
import pytest

from tailhound.notifier.limits import MAX_SILENCES, MAX_TEXT_BYTES
from tailhound.notifier.state_topic import read_state
from tests.faults.conftest import LONG, scale
from tests.notifier.service_helpers import rss_mb, running_service, with_notifier
from tests.notifier.test_deliver import StubReceiver

pytestmark = pytest.mark.broker

TOKEN = "drill-api-token-fedcba9876543210"
CONFIG = "route: {receiver: r}\nreceivers: [{type: console, name: r}]\n"
CLIENTS = 8


async def flood(base: str, n: int, comment_bytes: int, headers: dict[str, str]) -> Counter[int]:
    """POST `n` silences with CLIENTS concurrent clients; the count of each answer status. Bodies are made
    one at a time around one shared comment, so the client side of this process holds little (RSS is the
    service's)."""
    statuses: Counter[int] = Counter()
    comment = "x" * comment_bytes
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)

    async def client() -> None:
        async with aiohttp.ClientSession(headers=headers) as http:
            while not queue.empty():
                body = silence(queue.get_nowait(), comment)
                async with http.post(f"{base}/api/v1/silences", json=body) as r:
                    await r.read()
                    statuses[r.status] += 1

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return statuses


def memory() -> dict[str, float]:
    """RSS now, and the Python memory still held (tracemalloc, after a collection) and its peak, MB."""
    gc.collect()
    if not tracemalloc.is_tracing():
        return {"rss_mb": round(rss_mb(), 1)}
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    return {"rss_mb": round(rss_mb(), 1), "held_mb": round(held / 2**20, 1), "peak_mb": round(peak / 2**20, 1)}


def phase(sent: int, statuses: Counter[int], started: float) -> dict:
    return {**memory(), "sent": sent, "statuses": dict(statuses), "s": round(time.monotonic() - started, 1)}


def silence(i: int, comment: str) -> dict:
    return {"matchers": [f'node="gpu-node-{i}"'], "author": "mallory", "comment": comment, "duration": "2h"}


async def test_silence_flood_is_refused_beyond_the_limits_and_memory_stays_bounded(settings, drill_report):
    settings = with_notifier(settings, api_token=TOKEN)
    big = scale(3000, 3000)  # the attack as reported: cheap to refuse, so the short variant sends it all
    at_limit = MAX_SILENCES + scale(200, 2000)
    figures: dict = {}
    async with running_service(settings, CONFIG, {"r": StubReceiver()}) as service:
        base = f"http://127.0.0.1:{service.api_port}"
        rss0 = rss_mb()
        if LONG:  # what Python still holds after each phase, apart from the allocator's high-water (slow)
            tracemalloc.start()

        t = time.monotonic()
        anonymous = await flood(base, big, 100_000, {})
        figures["anonymous"] = phase(big, anonymous, t)
        assert service.notifier.silences == {}

        t = time.monotonic()
        oversized = await flood(base, big, 100_000, {"Authorization": f"Bearer {TOKEN}"})
        figures["oversized"] = phase(big, oversized, t)
        assert service.notifier.silences == {}

        t = time.monotonic()
        limited = await flood(base, at_limit, MAX_TEXT_BYTES, {"Authorization": f"Bearer {TOKEN}"})
        figures["at_limits"] = phase(at_limit, limited, t)
        live = service.notifier.live_silences(time.time())
        rss1 = rss_mb()
        tracemalloc.stop()
    items, _ = await read_state(settings)
    state_bytes = sum(len(str(v)) for k, v in items.items() if k.startswith("silence:") and v)
    accepted = sum(c for s, c in {**anonymous, **oversized}.items() if s == 201) + limited[201]
    refused = 2 * big + at_limit - accepted
    drill_report(
        **figures,
        accepted=accepted,
        refused=refused,
        live_silences=live,
        state_topic_silences=sum(1 for k, v in items.items() if k.startswith("silence:") and v),
        state_topic_kb=round(state_bytes / 1024),
        rss_growth_mb=round(rss1 - rss0, 1),
        rss_mb=round(rss1, 1),
    )
    assert anonymous == Counter({401: big})
    assert oversized == Counter({413: big})
    assert limited == Counter({201: MAX_SILENCES, 409: at_limit - MAX_SILENCES})
    assert live == MAX_SILENCES
    assert state_bytes < 4 * 1024 * 1024  # ~1.3 KB a silence; it was 300 MB
    if LONG:
        assert figures["oversized"]["held_mb"] < 5 and figures["at_limits"]["held_mb"] < 30, figures
    assert rss1 - rss0 < 60, f"RSS grew {rss1 - rss0:.0f} MB"  # 1000 silences of ~1.3 KB: a few MB (was 300 MB)
