"""Compressed /federate bodies (ingest/federation_decode.py): a 405-byte brotli body that inflates
to 256 MiB, or a gzip one to 64 MiB, is a failed pull once `max_body_bytes` are decoded, with Python memory
bounded by the limit (httpx inflated a whole chunk before the size check: 1,617 bytes took RSS to 2.4 GB);
real gzip, deflate and brotli bodies give the same snapshots as plain text; other encodings are refused."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib

import brotli
import pytest
from aiohttp import web

from tailhound.ingest.federation import FederationConfig, FederationPuller
from tailhound.ingest.federation_decode import BoundedDecoder, DecodeRefused
from tailhound.ingest.federation_text import TextLimits
from tests.faults.conftest import scale
from tests.http_helpers import serve_app
from tests.ingest.test_federation import GROUPING, PAGES, T0, TARGETS, federate_body

LIMIT = 1 << 20
BOMB_MIB = scale(256, 4096)  # what the brotli bomb inflates to


def brotli_bomb(mib: int = BOMB_MIB) -> bytes:
    c = brotli.Compressor(quality=5)
    zeros = b"\0" * (16 << 20)
    return b"".join(c.process(zeros) for _ in range(mib // 16)) + c.finish()


def gzip_bomb(mib: int = 64) -> bytes:  # gzip packs ~1,000:1: a bigger one is refused for its own size
    g = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (16 << 20)
    return b"".join(g.compress(zeros) for _ in range(mib // 16)) + g.flush()


async def pull(body: bytes, encoding: str | None, **config) -> tuple[list, list, int]:
    """(snapshots, rejects, the Python memory peak of the pull) of one pull of `body`."""

    async def handler(_request: web.Request) -> web.Response:
        headers = {"Content-Encoding": encoding} if encoding else {}
        return web.Response(body=body, content_type="text/plain", headers=headers)

    app = web.Application()
    app.router.add_get("/federate", handler)
    async with serve_app(app) as url:
        p = FederationPuller(FederationConfig(url=url, grouping=GROUPING, **config))
        tracemalloc.start()
        try:
            emitted = await asyncio.wait_for(p.pull_once(), 30)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            await p.close()
    return emitted.snapshots, emitted.rejects, peak


@pytest.mark.parametrize("encoding", ["br", "gzip"])
def test_a_decompression_bomb_is_a_failed_pull_within_the_limit(encoding):
    body = brotli_bomb() if encoding == "br" else gzip_bomb()
    assert len(body) < (2048 * BOMB_MIB // 256 if encoding == "br" else 400_000)
    snapshots, rejects, peak = asyncio.run(pull(body, encoding, max_body_bytes=LIMIT))
    (r,) = rejects
    assert snapshots == [] and r.kind == "federate_failed" and r.stage == "fetch"
    assert f"over {LIMIT} bytes once decoded" in r.reason
    assert peak < 16 * LIMIT, f"{peak / 2**20:.0f} MiB of Python memory for a {LIMIT >> 20} MiB limit"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_real_compressed_bodies_give_the_same_snapshots(encoding):
    text = federate_body([(PAGES["vllm"], TARGETS["vllm"], T0)]).encode()
    packed = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}[encoding](text)
    plain, plain_rejects, _ = asyncio.run(pull(text, None))
    got, rejects, _ = asyncio.run(pull(packed, encoding))
    assert plain and rejects == plain_rejects
    assert [s.model_dump() for s in got] == [s.model_dump() for s in plain]


def test_unknown_stacked_or_truncated_encodings_are_refused():
    _, rejects, _ = asyncio.run(pull(b"\x28\xb5\x2f\xfd" + b"\0" * 20, "zstd"))
    assert "'zstd' is not supported" in rejects[0].reason
    _, rejects, _ = asyncio.run(pull(gzip.compress(b"up 1\n"), "gzip, br"))
    assert "one encoding at most" in rejects[0].reason
    _, rejects, _ = asyncio.run(pull(gzip.compress(b"up 1\n" * 1000)[:-20], "gzip"))
    assert "truncated" in rejects[0].reason


def test_the_decoder_never_returns_more_than_the_limit_in_one_call():
    bombs = {"br": brotli_bomb(32), "gzip": gzip_bomb(32), "deflate": zlib.compress(b"\0" * (32 << 20))}
    for encoding, bomb in bombs.items():
        d = BoundedDecoder(encoding, LIMIT)
        with pytest.raises(DecodeRefused, match="once decoded"):
            d.feed(bomb)
        assert d.size <= LIMIT + (128 << 10 if encoding == "br" else 1)  # brotli rounds up to its blocks


def test_a_pull_over_the_default_series_or_bytes_is_refused_saying_which_limit_and_what_to_do():
    # the defaults (16 MiB, 100,000 series) hold about 1,000 GPU nodes of a real /federate (BENCHMARKS.md)
    defaults = FederationConfig(url="http://127.0.0.1:9090")
    assert (defaults.max_body_bytes, defaults.max_series) == (TextLimits().max_body_bytes, TextLimits().max_series)
    many = "".join(
        f'up{{instance="10.0.{i // 250}.{i % 250}:9400",job="dcgm",node="n{i}"}} 1 {T0}\n' for i in range(100_001)
    ).encode()
    assert len(many) < defaults.max_body_bytes and defaults.max_series == 100_000
    _, (series,), _ = asyncio.run(pull(many, None))
    assert "more than 100000 series in one body" in series.reason and "federation.matchers" in series.reason
    big = b"# " + b"x" * (16 << 20) + b"\n"
    _, (size,), _ = asyncio.run(pull(big, None))
    assert f"max_body_bytes {16 << 20}" in size.reason and "federation.matchers" in size.reason
    assert series.kind == size.kind == "federate_failed"
