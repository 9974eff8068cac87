"""``tailhound loadtest`` never follows a redirect: nothing reaches a host the target check did not pass."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.capacity.test_loadtest import invoke, read_result


@contextmanager
def http_server(answer) -> Iterator[tuple[str, list[str]]]:  # (handler) -> None
    """A loopback server calling `answer(handler)` for every request; yields (its URL, the paths it saw)."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            seen.append(f"{self.command} {self.path}")
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            answer(self)

        do_GET = do_POST = _any

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def ok(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Length", "2")
    handler.end_headers()
    handler.wfile.write(b"{}")


def redirect_to(url: str):
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", url + handler.path)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return answer


def test_no_redirect_is_followed(tmp_path):
    # The "elsewhere" server stands for a host the target check would refuse (tests stay on loopback).
    with http_server(ok) as (elsewhere, hits), http_server(redirect_to(elsewhere)) as (target, asked):
        out = tmp_path / "r.json"
        lookup = invoke("--target", target, "--out", str(out), "--peak", "4", "--steps", "1", "--step-s", "2")
        assert lookup.exit_code != 0 and "redirect" in str(lookup.exception)  # the model lookup
        run = invoke(
            "--target",
            target,
            "--model",
            "m",
            "--out",
            str(out),
            "--peak",
            "6",
            "--steps",
            "1",
            "--step-s",
            "2",
            "--max-requests",
            "12",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "2",
        )
    assert hits == [], hits  # neither the lookup, the completions nor /metrics went there
    assert any(p.startswith("POST ") for p in asked) and any("/models" in p for p in asked)
    res = read_result(out)
    assert res.steps[0].requests == 0 and res.steps[0].errors > 0
    assert "redirect not followed" in run.output
