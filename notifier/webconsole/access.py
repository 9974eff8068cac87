"""Signing in to the incident console from a browser: a token login that sets a session cookie for reads.

Off loopback, reads of the notifier's API need the bearer token, which a browser does not send by itself.
``GET /console/login`` shows a form; ``POST /console/login`` (form field ``token``, a bounded body, compared
in constant time) sets the cookie :data:`SESSION_COOKIE` -- HttpOnly, SameSite=Strict -- and redirects to
the console. The cookie holds an expiry and an HMAC of the token and that expiry under a key drawn at random
when the process starts (:class:`ConsoleSessions`): never the token, useless once the process restarts or
the expiry passes, and it cannot be forged without the key.

The API's guard accepts the cookie for reads only (GET, HEAD). Writes keep needing the
``Authorization: Bearer`` header, which the silences page's script sends with the token typed into it, so
another site cannot make a signed-in browser create or expire a silence (CSRF). A console page that is
refused redirects here (:func:`login_redirect`) instead of answering a JSON 401.

Guessing is throttled (:class:`LoginThrottle`): after 5 wrong tokens from one address within a minute, or
50 from all addresses together, sign-in answers 429 with ``Retry-After`` until the oldest failure is a
minute old (the bearer-token API is not affected).
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from urllib.parse import parse_qs

from aiohttp import web

from tailhound.notifier.limits import CONSOLE_SESSION_S, MAX_LOGIN_BODY_BYTES

SESSION_COOKIE = "tailhound_session"
CONSOLE_PATH = "/console"
LOGIN_PATH = "/console/login"
_COOKIE_METHODS = frozenset({"GET", "HEAD"})


class ConsoleSessions:
    """Issues and checks session cookies: ``<expiry>.<HMAC-SHA256(key, token | expiry)>``, the key random per
    process (or given, for tests)."""

    def __init__(
        self, key: bytes | None = None, *, ttl_s: float = CONSOLE_SESSION_S, clock: Callable[[], float] = time.time
    ) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self.clock = clock

    def __repr__(self) -> str:  # never the key
        return f"ConsoleSessions(ttl_s={self.ttl_s:g})"

    def _mac(self, token: bytes, expires: int) -> str:
        return hmac.new(self._key, token + b"|" + str(expires).encode(), hashlib.sha256).hexdigest()

    def issue(self, token: bytes) -> str:
        expires = int(self.clock() + self.ttl_s)
        return f"{expires}.{self._mac(token, expires)}"

    def valid(self, cookie: str | None, token: bytes | None) -> bool:
        """Whether `cookie` was issued by this process for `token` and has not expired."""
        if not cookie or token is None or len(cookie) > 128:
            return False
        expires, _, mac = cookie.partition(".")
        if not expires.isdigit() or int(expires) <= self.clock():
            return False
        return hmac.compare_digest(mac.encode(), self._mac(token, int(expires)).encode())

    def allows(self, request: web.Request, token: bytes | None) -> bool:
        """A read (GET, HEAD) carrying a valid session cookie."""
        return request.method in _COOKIE_METHODS and self.valid(request.cookies.get(SESSION_COOKIE), token)


class LoginThrottle:
    """Failed sign-ins in the last `window_s`: per client address at most `per_client`, all together at
    most `overall`; past either, :meth:`wait` says how long until the oldest failure leaves the window.
    At most `max_clients` addresses are tracked (the oldest forgotten: the overall bound still holds)."""

    def __init__(
        self,
        *,
        per_client: int = 5,
        overall: int = 50,
        window_s: float = 60.0,
        max_clients: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_client, self.overall, self.window_s, self.max_clients = per_client, overall, window_s, max_clients
        self.clock = clock
        self._clients: OrderedDict[str, deque[float]] = OrderedDict()
        self._all: deque[float] = deque(maxlen=overall)
        self.refused = 0  # sign-in attempts answered 429

    def _left(self, failures: deque[float], bound: int, now: float) -> float | None:
        while failures and failures[0] <= now - self.window_s:
            failures.popleft()
        return failures[0] + self.window_s - now if len(failures) >= bound else None

    def wait(self, client: str) -> float | None:
        """Seconds `client` must wait before its next try (None: it may try now)."""
        now = self.clock()
        mine = self._clients.get(client)
        left = self._left(mine, self.per_client, now) if mine is not None else None
        overall = self._left(self._all, self.overall, now)
        waits = [w for w in (left, overall) if w is not None]
        return max(waits) if waits else None

    def failed(self, client: str) -> None:
        now = self.clock()
        mine = self._clients.pop(client, None) or deque(maxlen=self.per_client)
        mine.append(now)
        self._clients[client] = mine  # most recent last
        while len(self._clients) > self.max_clients:
            self._clients.popitem(last=False)
        self._all.append(now)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)


def is_console_path(path: str) -> bool:
    return path in ("/", CONSOLE_PATH) or path.startswith(CONSOLE_PATH + "/")


def login_redirect(request: web.Request) -> web.Response | None:
    """For a refused read of a console page: a redirect to the login form (None for anything else)."""
    if request.method in _COOKIE_METHODS and is_console_path(request.path) and request.path != LOGIN_PATH:
        return web.Response(status=303, headers={"Location": LOGIN_PATH})
    return None


#: the login form's CSS (allowed by its hash in the console's CSP, like the pages' STYLE)
LOGIN_STYLE = """
body { font: 15px/1.4 system-ui, sans-serif; margin: 0; display: grid; place-items: center; min-height: 100vh;
        background: #f5f6f8; color: #1d2330; }
form { background: #fff; padding: 24px 28px; border-radius: 8px; box-shadow: 0 1px 4px #0002; min-width: 300px; }
h1 { font-size: 18px; margin: 0 0 12px; }
label { display: block; margin-bottom: 6px; }
input { width: 100%; box-sizing: border-box; padding: 6px 8px; font: inherit; }
button { margin-top: 12px; padding: 6px 14px; font: inherit; }
.error { color: #b00020; }
.hint { color: #5b6270; font-size: 13px; }
"""


def login_page(message: str = "", *, status: int = 200) -> web.Response:
    """The login form (`message`: why the last try failed)."""
    note = f'<p class="error" role="alert">{html.escape(message)}</p>' if message else ""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>tailhound: sign in</title>
<style>{LOGIN_STYLE}</style></head>
<body><form method="post" action="{LOGIN_PATH}">
<h1>tailhound incident console</h1>{note}
<label for="token">API token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
<p class="hint">The notifier's API token (TAILHOUND_NOTIFIER__API_TOKEN). It is not stored in the browser:
the session cookie only lets you read.</p>
</form></body></html>
"""
    return web.Response(text=body, content_type="text/html", charset="utf-8", status=status)


def add_login_routes(
    app: web.Application,
    token: Callable[[], bytes | None],
    sessions: ConsoleSessions,
    throttle: LoginThrottle | None = None,
) -> None:
    """``GET`` and ``POST`` :data:`LOGIN_PATH`. `token` gives the configured API token (None: none, and no
    one can sign in); `throttle` bounds the guesses (a fresh :class:`LoginThrottle` by default)."""
    throttle = throttle if throttle is not None else LoginThrottle()

    async def show(_request: web.Request) -> web.Response:
        return login_page()

    async def sign_in(request: web.Request) -> web.Response:
        expected = token()
        if expected is None:
            return login_page(
                "No API token is configured (TAILHOUND_NOTIFIER__API_TOKEN or "
                "notifier.api_token_file): signing in is not possible.",
                status=403,
            )
        size = request.content_length
        if size is None or size > MAX_LOGIN_BODY_BYTES:
            return login_page(f"The form is larger than {MAX_LOGIN_BODY_BYTES} bytes.", status=413)
        try:
            form = parse_qs((await request.read()).decode("utf-8"), max_num_fields=8)
        except (UnicodeDecodeError, ValueError):
            return login_page("The form could not be read.", status=400)
        client = request.remote or "?"
        if (wait := throttle.wait(client)) is not None:  # checked before the token: a guess is not even tried
            throttle.refused += 1
            response = login_page("Too many wrong tokens: try again in a minute.", status=429)
            response.headers["Retry-After"] = str(max(int(wait + 0.999), 1))
            return response
        given = (form.get("token") or [""])[0].strip().encode()
        if not hmac.compare_digest(given, expected):
            throttle.failed(client)
            return login_page("Wrong token.", status=401)
        throttle.succeeded(client)
        response = web.Response(status=303, headers={"Location": CONSOLE_PATH})
        response.set_cookie(
            SESSION_COOKIE,
            sessions.issue(expected),
            max_age=int(sessions.ttl_s),
            path="/",
            httponly=True,
            samesite="Strict",
            secure=request.secure,
        )
        return response

    app.router.add_get(LOGIN_PATH, show)
    app.router.add_post(LOGIN_PATH, sign_in)
