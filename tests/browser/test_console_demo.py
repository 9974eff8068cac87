"""The incident console in a real browser (headless Chromium): the demo's thermal incident with its charts
and peer view, a silence created (with its preview) and expired through the page, and the offline HTML
replay report of the same fault opened from disk. Screenshots: .tailhound/screenshots/console-*.png."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.broker]

FAULT = "thermal-throttle@20m+20m:node=gpu-node-2:gpus=3,5"
URL_LINE = re.compile(r"incident console\S*:? (http://127\.0\.0\.1:\d+/console)")
CAUSE = "gpu-thermal-throttle"


class Demo:
    """`tailhound demo` in a child process, its console held open; output collected in the background."""

    def __init__(self, tmp: Path) -> None:
        env = {**os.environ, "COLUMNS": "200"}
        self.proc = subprocess.Popen(
            # 43 minutes of fleet time (the fault ends at 40, the incident resolves a minute later) at 120x
            [
                sys.executable,
                "-m",
                "tailhound",
                "demo",
                "--nodes",
                "2",
                "--minutes",
                "43",
                "--speed",
                "120",
                "--fault",
                FAULT,
                "--console",
                "127.0.0.1:0",
                "--hold",
                "600",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern, timeout_s: float) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            m = pattern.search(self.output())
            if m:
                return m
            assert self.proc.poll() is None, f"the demo exited:\n{self.output()[-4000:]}"
            time.sleep(0.2)
        raise AssertionError(f"not seen in {timeout_s:.0f} s: {pattern.pattern}\n{self.output()[-4000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as resp:  # loopback only
        return json.loads(resp.read())


def wait_resolved(base: str, timeout_s: float) -> dict:
    """The thermal incident once it resolved and its resolve was delivered."""
    deadline = time.monotonic() + timeout_s
    found: list = []
    while time.monotonic() < deadline:
        found = [i for i in get_json(f"{base}/api/v1/incidents?state=all") if i.get("root_cause") == CAUSE]
        if found and found[0].get("state") == "resolved":
            detail = get_json(f"{base}/api/v1/incidents/{found[0]['incident_id']}")
            if any(d["kind"] == "resolved" and d["outcome"] == "delivered" for d in detail["deliveries"]):
                return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no resolved and notified {CAUSE} incident in {timeout_s:.0f} s: {found}")


def test_the_console_shows_the_demo_incident_and_silences_work_through_the_page(browser, screenshot, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    demo = Demo(tmp_path)
    try:
        console_url = demo.wait_for(URL_LINE, 90).group(1)
        base = console_url.rsplit("/console", 1)[0]
        incident = wait_resolved(base, 240)
        wait = WebDriverWait(browser, 20)

        # the list: the thermal incident, its cause, node and state
        browser.get(console_url)
        rows = wait.until(EC.presence_of_all_elements_located((By.CSS_SELECTOR, '[data-testid="incident-row"]')))
        thermal = [r for r in rows if r.get_attribute("data-cause") == CAUSE]
        assert thermal, [r.text for r in rows]
        assert "gpu-node-2" in thermal[0].text
        screenshot("console-index")

        # the incident page: a timeline per evidence signal, the peer view of the hot GPUs, what was sent
        thermal[0].find_element(By.CSS_SELECTOR, "a").click()
        wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="timeline-chart"]')))
        timelines = browser.find_elements(By.CSS_SELECTOR, '[data-testid="timeline-chart"]')
        signals = {t.get_attribute("data-signal") for t in timelines}
        assert "gpu.temperature" in signals, signals
        peers = browser.find_elements(By.CSS_SELECTOR, '[data-testid="peer-chart"]')
        assert any(p.get_attribute("data-signal") == "gpu.sm_clock" for p in peers), [
            p.get_attribute("data-signal") for p in peers
        ]
        assert all(t.size["height"] > 100 and t.size["width"] > 300 for t in timelines[:2])  # drawn, not empty
        page = browser.page_source
        assert incident["incident_id"] in page and "gpu-node-2" in page
        sent = browser.find_elements(By.CSS_SELECTOR, '[data-testid="notification-row"]')
        assert len(sent) >= 2 and "console" in sent[0].text, [s.text for s in sent]  # the page and the resolve
        screenshot("console-incident")
        screenshot("console-incident-top", height=1500)

        # silences: prefilled from the incident, previewed, created, then expired through the page
        browser.find_element(By.CSS_SELECTOR, '[data-testid="silence-incident"]').click()
        form = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="silence-form"]')))
        matchers = form.find_element(By.NAME, "matchers")
        assert 'node="gpu-node-2"' in matchers.get_attribute("value")
        form.find_element(By.NAME, "author").send_keys("browser-test")
        form.find_element(By.NAME, "comment").send_keys("airflow work on gpu-node-2")
        form.find_element(By.CSS_SELECTOR, '[data-testid="silence-preview-button"]').click()
        preview = wait.until(
            EC.text_to_be_present_in_element(
                (By.CSS_SELECTOR, '[data-testid="silence-preview"]'), incident["incident_id"]
            )
        )
        assert preview
        form.find_element(By.CSS_SELECTOR, '[data-testid="silence-create-button"]').click()
        row = wait.until(EC.presence_of_element_located((By.CSS_SELECTOR, '[data-testid="silence-row"]')))
        silence_id = row.get_attribute("data-silence")
        active = get_json(f"{base}/api/v1/silences")
        assert [s["id"] for s in active] == [silence_id] and active[0]["state"] == "active"
        assert active[0]["author"] == "browser-test"
        screenshot("console-silences")
        row.find_element(By.CSS_SELECTOR, '[data-testid="silence-expire"]').click()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and get_json(f"{base}/api/v1/silences"):
            time.sleep(0.2)
        assert get_json(f"{base}/api/v1/silences") == []  # expired: no longer active
        expired = [s for s in get_json(f"{base}/api/v1/silences?all=1") if s["id"] == silence_id]
        assert expired and expired[0]["state"] == "expired"
    finally:
        demo.stop()


def test_the_replay_report_shows_the_incident_with_its_charts_from_disk(browser, screenshot, tmp_path):
    from selenium.webdriver.common.by import By

    recording, report = tmp_path / "fleet.jsonl", tmp_path / "report.html"
    tailhound = [sys.executable, "-m", "tailhound"]
    subprocess.run(
        [*tailhound, "simulate", "--nodes", "2", "--minutes", "45", "--fault", FAULT, "--record", str(recording)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(
        [*tailhound, "replay", str(recording), "--html", str(report)], check=True, capture_output=True, timeout=300
    )
    browser.get(report.as_uri())
    rows = browser.find_elements(By.CSS_SELECTOR, '[data-testid="incident-row"]')
    assert any(r.get_attribute("data-cause") == CAUSE for r in rows), [r.text for r in rows]
    signals = {
        t.get_attribute("data-signal") for t in browser.find_elements(By.CSS_SELECTOR, '[data-testid="timeline-chart"]')
    }
    assert "gpu.temperature" in signals
    assert browser.find_elements(By.CSS_SELECTOR, '[data-testid="peer-chart"]')
    # nothing was fetched from anywhere: every resource is in the file
    resources = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources == []
    screenshot("report")
