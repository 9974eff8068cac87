"""The console against a hostile browser: DNS rebinding, cross-site writes, token guessing, injected scripts."""

from __future__ import annotations

import re

import pytest

from tailhound.notifier.api import ApiAccess
from tailhound.notifier.webconsole.access import LOGIN_PATH, LoginThrottle
from tailhound.notifier.webconsole.request_checks import allowed_console_hosts, host_header_allowed
from tailhound.notifier.webconsole.routes import script_hash
from tailhound.settings import NotifierSettings
from tests.faults.conftest import scale
from tests.notifier.webconsole.api_helpers import TOKEN, api, fetch

SILENCE = '{"matchers": ["node=\\"gpu-node-3\\""], "author": "x", "comment": "csrf", "duration": "30d"}'
FORM = {"Content-Type": "application/x-www-form-urlencoded"}
GUESSES = scale(40, 2000)  # wrong tokens tried


async def test_dns_rebinding_reads_are_refused():
    async with api(ApiAccess(allowed_hosts=("tailhound.example",))) as (_, base):
        port = base.rsplit(":", 1)[1]
        hostile = (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", f"localhost.evil:{port}")
        for host in hostile:
            for path in ("/api/v1/incidents", "/console", "/api/v1/silences"):
                status, _, body = await fetch(base, path, headers={"Host": host})
                assert status == 403 and "console_allowed_hosts" in body["error"], (host, path)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"tailhound.example:{port}"):
            assert (await fetch(base, "/api/v1/incidents", headers={"Host": host}))[0] == 200, host
        assert (await fetch(base, "/-/healthy", headers={"Host": "evil.example"}))[0] == 200  # probes exempt


def test_allowed_hosts_from_settings():
    settings = NotifierSettings(console_url="https://Console.Example.org/console", console_allowed_hosts=["*.corp"])
    hosts = ApiAccess.from_settings(settings).allowed_hosts
    assert hosts == allowed_console_hosts(settings.console_url, ["*.corp"]) == ("*.corp", "console.example.org")
    assert host_header_allowed("console.example.org:443", hosts) and host_header_allowed("tailhound.corp", hosts)
    assert not host_header_allowed("corp", hosts) and not host_header_allowed("evil.org", hosts)
    assert not host_header_allowed(None, hosts)
    assert host_header_allowed("10.0.0.5:9095", ()) and host_header_allowed("[fe80::1%eth0]:1", ())  # no rebinding


async def test_a_cross_site_write_creates_no_silence():
    async with api(ApiAccess(allow_unauthenticated_writes=True)) as (service, base):
        port = base.rsplit(":", 1)[1]
        # the attack: a page on another site POSTs text/plain (no preflight) to the loopback API
        attacks = [
            {"Content-Type": "text/plain", "Origin": "http://evil.example"},
            {"Content-Type": "text/plain"},
            {"Content-Type": "application/json", "Origin": "http://evil.example"},
            {"Content-Type": "application/json", "Origin": "null"},
            {"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://127.0.0.1:{port}"},
        ]
        for headers in attacks:
            status, _, body = await fetch(base, "/api/v1/silences", method="POST", headers=headers, data=SILENCE)
            assert status in (403, 415), (headers, status, body)
        assert service.written == []
        status, _, _ = await fetch(
            base, "/api/v1/silences/sil-x", method="DELETE", headers={"Origin": "https://evil.example"}
        )
        assert status == 403
        same = {
            "Content-Type": "application/json",
            "Origin": f"http://127.0.0.1:{port}",
            "Sec-Fetch-Site": "same-origin",
        }
        status, _, _ = await fetch(base, "/api/v1/silences", method="POST", headers=same, data=SILENCE)
        assert status == 201 and len(service.written) == 1  # the console's own page still writes
        status, _, _ = await fetch(
            base, "/api/v1/silences", method="POST", data=SILENCE, headers={"Content-Type": "application/json"}
        )
        assert status == 201  # curl and the CLI send no Origin


async def test_token_guessing_is_throttled():
    access = ApiAccess(token=TOKEN.encode())
    async with api(access) as (_, base):
        access.loopback = False
        statuses = []
        for i in range(GUESSES):
            status, headers, _ = await fetch(base, LOGIN_PATH, method="POST", headers=FORM, data=f"token=guess{i}")
            statuses.append(status)
        assert statuses[:5] == [401] * 5 and set(statuses[5:]) == {429}
        assert 1 <= int(headers["Retry-After"]) <= 60
        # locked out: even the right token is not tried until the window passes
        assert (await fetch(base, LOGIN_PATH, method="POST", headers=FORM, data=f"token={TOKEN}"))[0] == 429
        cross = {**FORM, "Origin": "http://evil.example"}
        assert (await fetch(base, LOGIN_PATH, method="POST", headers=cross, data=f"token={TOKEN}"))[0] == 403


def test_the_throttle_per_client_overall_and_expiry():
    now = [0.0]
    t = LoginThrottle(per_client=2, overall=3, window_s=60, max_clients=2, clock=lambda: now[0])
    t.failed("a")
    assert t.wait("a") is None
    t.failed("a")
    assert t.wait("a") == 60 and t.wait("b") is None
    now[0] = 30.0
    t.failed("b")
    assert t.wait("c") == 30  # three failures overall: everyone waits for the oldest to leave the window
    now[0] = 61.0
    assert t.wait("a") is None and t.wait("c") is None
    t.succeeded("b")
    for name in "xyz":
        t.failed(name)
    assert len(t._clients) == 2  # bounded


@pytest.mark.parametrize("path", ["/console", "/console/silences"])
async def test_the_csp_runs_only_the_consoles_own_scripts(path):
    async with api() as (_, base):
        status, headers, page = await fetch(base, path)
    assert status == 200
    csp = headers["Content-Security-Policy"]
    script_src = re.search(r"script-src ([^;]+)", csp).group(1)
    assert "unsafe-inline" not in script_src and "unsafe-eval" not in script_src
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert scripts and all(script_hash(s) in script_src.split() for s in scripts)
