"""Hostile HTTP clients on loopback: connections from another loopback address (127.0.0.2, ...) that drip a
body a byte at a time, send half a header, or just stay open. Every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib


async def connect(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def closed_by_server(reader: asyncio.StreamReader, timeout_s: float = 10.0) -> bytes | None:
    """What the server sent before it closed the connection (b"" for nothing), None if still open after
    `timeout_s`."""
    out = b""
    try:
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65536):
                out += chunk
    except TimeoutError:
        return None
    except (ConnectionResetError, BrokenPipeError):
        pass
    return out


async def drip(
    port: int, source: str, path: str, *, size: int = 1000, interval_s: float = 0.1, max_bytes: int = 200
) -> bytes | None:
    """POST a `size`-byte body one byte every `interval_s` (at most `max_bytes` of it); what the server
    answered before closing (None: it never did)."""
    reader, writer = await connect(port, source)
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        answer = asyncio.create_task(closed_by_server(reader, timeout_s=max_bytes * interval_s + 5))
        for _ in range(max_bytes):  # until the server answers or closes
            if answer.done() or writer.is_closing():
                break
            with contextlib.suppress(ConnectionError):
                writer.write(b"x")
                await writer.drain()
            await asyncio.sleep(interval_s)
        return await answer
    finally:
        writer.close()
