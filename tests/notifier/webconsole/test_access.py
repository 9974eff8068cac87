"""Signing in to the console off loopback: the login form, the session cookie (an HMAC, never the token;
HttpOnly, SameSite=Strict) that lets reads through but never writes, and refused console pages redirected
to the login. Off loopback is simulated as tests/notifier/test_api.py does it (``access.loopback = False``
once the API is bound)."""

from __future__ import annotations

import pytest

from tailhound.notifier.api import ApiAccess
from tailhound.notifier.limits import MAX_LOGIN_BODY_BYTES
from tailhound.notifier.webconsole.access import LOGIN_PATH, SESSION_COOKIE, ConsoleSessions

from .api_helpers import NOW, THERMAL, TOKEN, api, bearer, fetch

SILENCE = {"matchers": ['node="gpu-node-3"'], "author": "ana", "comment": "CHG-1", "duration": "1h"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def off_loopback(token: str | None = TOKEN) -> ApiAccess:
    return ApiAccess(token=token.encode() if token else None)


async def sign_in(base: str, token: str = TOKEN) -> tuple[int, dict[str, str], str | None]:
    """POST the login form: (status, headers, the session cookie's value if one was set)."""
    status, headers, _ = await fetch(base, LOGIN_PATH, method="POST", headers=FORM, data=f"token={token}")
    cookie = None
    if "Set-Cookie" in headers:
        cookie = headers["Set-Cookie"].split(";")[0].partition("=")[2]
    return status, headers, cookie


async def test_login_sets_a_read_only_session_cookie():
    access = off_loopback()
    async with api(access) as (service, base):
        access.loopback = False
        assert (await fetch(base, "/api/v1/incidents"))[0] == 401  # no token, no cookie
        status, headers, cookie = await sign_in(base)
        assert status == 303 and headers["Location"] == "/console"
        set_cookie = headers["Set-Cookie"]
        assert set_cookie.startswith(f"{SESSION_COOKIE}=")
        assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie and "Path=/" in set_cookie
        assert cookie and TOKEN not in set_cookie and TOKEN not in cookie
        jar = {SESSION_COOKIE: cookie}
        status, _, body = await fetch(base, "/api/v1/incidents", cookies=jar)
        assert status == 200 and len(body) == 3
        assert (await fetch(base, f"/api/v1/incidents/{THERMAL}", cookies=jar))[0] == 200
        assert (await fetch(base, "/api/v1/incidents", method="HEAD", cookies=jar))[0] == 200
        # writes: the cookie alone is refused (CSRF); the bearer header is what counts
        status, _, body = await fetch(base, "/api/v1/silences", method="POST", json=SILENCE, cookies=jar)
        assert status == 401 and service.written == []
        assert (await fetch(base, "/api/v1/silences/sil-x", method="DELETE", cookies=jar))[0] == 401
        status, _, created = await fetch(
            base, "/api/v1/silences", method="POST", json=SILENCE, cookies=jar, headers=bearer()
        )
        assert status == 201 and [s.id for s in service.written] == [created["id"]]


async def test_a_wrong_or_forged_cookie_is_refused():
    access = off_loopback()
    async with api(access) as (_, base):
        access.loopback = False
        status, headers, cookie = await sign_in(base, "wrong-" + TOKEN)
        assert status == 401 and cookie is None and "Set-Cookie" not in headers
        _, _, cookie = await sign_in(base)
        assert cookie is not None
        expires, _, mac = cookie.partition(".")
        for forged in (f"{int(expires) + 86400}.{mac}", f"{expires}.{'0' * len(mac)}", TOKEN, "", "x" * 500):
            assert (await fetch(base, "/api/v1/incidents", cookies={SESSION_COOKIE: forged}))[0] == 401, forged
    # another process (another key) does not take this one's cookie
    other = off_loopback()
    async with api(other) as (_, base):
        other.loopback = False
        assert (await fetch(base, "/api/v1/incidents", cookies={SESSION_COOKIE: cookie}))[0] == 401


def test_sessions_expire():
    now = [NOW]
    sessions = ConsoleSessions(ttl_s=60, clock=lambda: now[0])
    cookie = sessions.issue(TOKEN.encode())
    assert sessions.valid(cookie, TOKEN.encode())
    assert not sessions.valid(cookie, b"another token")
    assert not sessions.valid(cookie, None)
    now[0] += 61
    assert not sessions.valid(cookie, TOKEN.encode())
    assert repr(sessions) == "ConsoleSessions(ttl_s=60)"  # never the key


async def test_refused_console_pages_redirect_to_the_login_json_stays_401():
    access = off_loopback()
    async with api(access) as (_, base):
        access.loopback = False
        for path in ("/console", f"/console/incidents/{THERMAL}", "/console/silences", "/"):
            status, headers, _ = await fetch(base, path)
            assert status == 303 and headers["Location"] == LOGIN_PATH, path
        status, headers, body = await fetch(base, "/api/v1/incidents")
        assert status == 401 and body["error"] and headers["WWW-Authenticate"].startswith("Bearer")
        status, headers, page = await fetch(base, LOGIN_PATH)
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
        assert f'action="{LOGIN_PATH}"' in page and 'name="token"' in page
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]


async def test_console_pages_with_the_cookie():
    access = off_loopback()
    async with api(access) as (_, base):
        access.loopback = False
        _, _, cookie = await sign_in(base)
        status, headers, body = await fetch(base, "/console", cookies={SESSION_COOKIE: cookie or ""})
        assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8" and THERMAL in body


async def test_login_without_a_configured_token_is_impossible():
    access = off_loopback(token=None)
    async with api(access) as (_, base):
        access.loopback = False
        status, headers, page = await fetch(base, LOGIN_PATH, method="POST", headers=FORM, data="token=anything")
        assert status == 403 and "Set-Cookie" not in headers and "No API token is configured" in page


@pytest.mark.parametrize(
    ("data", "status"),
    [
        ("token=" + "x" * (MAX_LOGIN_BODY_BYTES + 1), 413),
        (b"token=\xff\xfe", 400),
        ("&".join(f"f{i}=1" for i in range(20)), 400),
    ],
)
async def test_the_login_body_is_bounded(data, status):
    access = off_loopback()
    async with api(access) as (_, base):
        access.loopback = False
        got, headers, _ = await fetch(base, LOGIN_PATH, method="POST", headers=FORM, data=data)
        assert got == status and "Set-Cookie" not in headers


async def test_on_loopback_the_console_needs_no_login():
    async with api(off_loopback()) as (_, base):
        status, _, _ = await fetch(base, "/api/v1/incidents")
        assert status == 200
        assert (await fetch(base, "/api/v1/silences", method="POST", json=SILENCE))[0] == 401  # writes: token
