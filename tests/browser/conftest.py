"""A real headless browser for the incident console: Debian's ``chromium`` driven through its
``chromedriver`` (package ``chromium-driver``) with Selenium. Without them the tests skip saying how to
install them (and fail under CI, where ``make test`` installs them).

Screenshots go to ``.tailhound/screenshots/`` (or ``$TAILHOUND_SCREENSHOTS``), kept with the test output.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_tool

INSTALL = "apt-get install chromium chromium-driver (Debian; `make test` does it as root)"
SCREENSHOTS = Path(
    os.environ.get("TAILHOUND_SCREENSHOTS", Path(__file__).resolve().parents[2] / ".tailhound" / "screenshots")
)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)  # type: ignore[return-value]
    return require_tool("chromium", INSTALL)


@pytest.fixture
def browser() -> Iterator:
    """A headless Chromium (1280x900), closed after the test."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the dev extra: pip install -e .[dev]")
    from selenium.webdriver.chrome.service import Service

    driver_path = require_tool("chromedriver", INSTALL)
    options = webdriver.ChromeOptions()
    options.binary_location = _chromium()
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-sync",
        "--disable-default-apps",
        "--disable-component-update",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshot(browser):
    """``screenshot(name)`` saves the page as ``<SCREENSHOTS>/<name>.png`` (the whole page's height;
    ``height=`` for its top only). docs/img/console-incident.png in the README is ``console-incident-top``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(name: str, full_page: bool = True, height: int | None = None) -> Path:
        """The whole page (at most 6000 px), or the top `height` pixels of it."""
        path = SCREENSHOTS / f"{name}.png"
        if height is not None:
            browser.set_window_size(1280, height)
        elif full_page:
            height = browser.execute_script("return Math.min(document.body.scrollHeight, 6000)")
            browser.set_window_size(1280, max(int(height) + 40, 900))
        browser.save_screenshot(str(path))
        browser.set_window_size(1280, 900)
        print(f"screenshot: {path}")
        return path

    return take
