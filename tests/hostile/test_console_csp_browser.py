"""The console's CSP allows no inline style it did not write (style-src by hash, no 'unsafe-inline'), checked in
a real headless Chromium: every console page and the login form render with their style sheets and charts
and report no CSP violation, while a style attribute injected into a page is refused (and reported)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from tailhound.notifier.webconsole.access import LOGIN_PATH, LOGIN_STYLE
from tailhound.notifier.webconsole.assets import STYLE
from tailhound.notifier.webconsole.routes import script_hash
from tests.browser.conftest import browser  # noqa: F401 - the fixture
from tests.notifier.webconsole.api_helpers import THERMAL, api, fetch

#: collects the page's CSP violations from its first byte on (DevTools' script runs before the page's)
RECORD_VIOLATIONS = (
    "window.__csp = []; document.addEventListener('securitypolicyviolation', "
    "e => window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || e.sample || '')));"
)
PAGES = ["/console", f"/console/incidents/{THERMAL}", "/console/silences", LOGIN_PATH]


@contextmanager
def console() -> Iterator[str]:
    """The console with its test incidents, served from a thread of its own (Selenium is synchronous)."""
    loop = asyncio.new_event_loop()
    started, stop = threading.Event(), asyncio.Event()
    base: list[str] = []

    async def serve() -> None:
        async with api() as (_, url):
            base.append(url)
            started.set()
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    try:
        assert started.wait(15), "the console did not start"
        yield base[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


async def test_the_style_sources_are_the_consoles_own_sheets():
    async with api() as (_, base):
        status, headers, page = await fetch(base, "/console")
        _, _, login = await fetch(base, LOGIN_PATH)
    style_src = re.search(r"style-src ([^;]+)", headers["Content-Security-Policy"]).group(1).split()
    assert status == 200 and "'unsafe-inline'" not in style_src
    assert sorted(style_src) == sorted({script_hash(STYLE), script_hash(LOGIN_STYLE)})
    sheets = re.findall(r"<style>(.*?)</style>", page + login, re.S)
    assert sheets and all(script_hash(s) in style_src for s in sheets)
    assert not re.search(r"\sstyle=", page + login)  # no style attribute the policy would refuse


def test_every_console_page_renders_in_chromium_without_a_csp_violation(browser):  # noqa: F811
    with console() as base:
        browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_VIOLATIONS})
        seen = {}
        for path in PAGES:
            browser.get(base + path)
            seen[path] = {
                "violations": browser.execute_script("return window.__csp"),
                "background": browser.execute_script("return getComputedStyle(document.body).backgroundColor"),
                "chart_fonts": browser.execute_script(
                    "return [...document.querySelectorAll('svg.chart text')].slice(0, 3)"
                    ".map(t => getComputedStyle(t).fontFamily + ' ' + getComputedStyle(t).fontSize)"
                ),
            }
        # a style attribute injected into the page: refused, reported, not applied
        browser.execute_script("document.body.setAttribute('style', 'background: rgb(255, 0, 0)')")
        injected = browser.execute_script("return [window.__csp, getComputedStyle(document.body).backgroundColor]")

    for path, page in seen.items():
        assert page["violations"] == [], (path, page)
        assert page["background"] not in ("rgba(0, 0, 0, 0)", "transparent"), (path, page)  # the sheet applied
    charts = seen[f"/console/incidents/{THERMAL}"]["chart_fonts"]
    assert charts and all("system-ui" in f and f.endswith("11px") for f in charts), charts
    violations, background = injected
    assert background != "rgb(255, 0, 0)" and any(v.startswith("style-src") for v in violations), injected
