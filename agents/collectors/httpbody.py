"""Read an aiohttp response body whole, to its end, and never past a size limit.

``resp.content.read(n)`` returns what has *arrived* (up to n bytes), not the body: an exporter that
writes its page in chunks (node_exporter does) is cut at the first chunk, silently. :func:`read_body`
reads until the end of the body and fails (:class:`~tailhound.agents.collectors.CollectError`) instead
of returning part of it:

- a declared ``Content-Length`` over the limit is refused before reading; a body that grows past the
  limit is refused as soon as it does;
- a connection cut mid-body is an error: aiohttp reports a body shorter than its ``Content-Length``
  or an unfinished chunked body as a payload error, and a body shorter than an (uncompressed)
  ``Content-Length`` is checked once more here;
- a body with no length at all (ended by closing the connection) must end in a complete line, as the
  Prometheus text format requires (or in OpenMetrics' ``# EOF``): otherwise the cut cannot be seen;
- the caller's timeout (the session's ``ClientTimeout``) bounds the time.
"""

from __future__ import annotations

import aiohttp

from tailhound.agents.collectors import CollectError

#: bytes asked for per read; the body is collected until aiohttp reports its end
CHUNK_BYTES = 256 * 1024


def _limit_text(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 and limit % (1 << 20) == 0 else f"{limit} bytes"


async def read_body(resp: aiohttp.ClientResponse, limit: int, what: str, *, lines: bool = False) -> bytes:
    """The whole body of `resp`, at most `limit` bytes. `what` names the request in errors (a URL);
    `lines`: the body is line-based text (exposition formats), so a length-less body must end in a newline."""
    declared = resp.content_length
    if declared is not None and declared > limit:
        raise CollectError(f"{what}: body of {declared} bytes is over the {_limit_text(limit)} limit")
    chunks: list[bytes] = []
    size = 0
    try:
        while True:  # bounded: every pass adds a byte or ends, the limit stops it, the session's timeout too
            chunk = await resp.content.read(CHUNK_BYTES)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise CollectError(f"{what}: body is over the {_limit_text(limit)} limit")
            chunks.append(chunk)
    except aiohttp.ClientPayloadError as exc:
        # the connection ended before the body did (Content-Length or chunked framing says so)
        raise CollectError(f"{what}: body cut after {size} bytes ({_cause(exc)})") from None
    body = b"".join(chunks)
    encoded = resp.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity")
    if declared is not None and not encoded and size != declared:
        raise CollectError(f"{what}: body cut after {size} of {declared} bytes")
    chunked = "chunked" in resp.headers.get("Transfer-Encoding", "").lower()
    if lines and declared is None and not chunked and body and not _ends_complete(body):
        # ended by closing the connection: only a complete last line shows nothing is missing
        raise CollectError(f"{what}: body of {size} bytes ends mid-line (connection closed before the end)")
    return body


def _ends_complete(body: bytes) -> bool:
    return body.endswith(b"\n") or body.rstrip().endswith(b"# EOF")


def _cause(exc: aiohttp.ClientPayloadError) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(exc).__name__}: {cause or exc}"[:200]
