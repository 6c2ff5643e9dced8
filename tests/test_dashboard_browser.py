"""The dashboard in a real headless Chromium, loaded while a local cluster trains.

Needs Debian's ``chromium`` (``.ci/run`` installs it) and the ``playwright``
Python package (driving that browser; no browser download). The screenshot
goes to ``test-artifacts/dashboard.png`` (ignored by git) for a person to see.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.conftest import REPO, wait_until

if TYPE_CHECKING:
    from playwright.sync_api import Page

TOKEN = "dashboard-test-token"
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_FLAGS = [
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-quic",
]


def _chromium() -> str:
    path = os.environ.get("FTRL_PS_TEST_CHROMIUM") or shutil.which("chromium") or ""
    if not path:
        pytest.skip("no chromium on this machine (.ci/run installs Debian's chromium)")
    return path


@pytest.fixture()
def running_cluster(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """A local cluster (1 server, 2 workers) training slowly enough to watch; its shard 0 URL."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "ftrl_ps", "gen", str(data), "--rows", "150000",
                    "--test-rows", "10", "--bits", "18", "--seed", "3", "--quiet"],
                   check=True, capture_output=True, cwd=REPO)
    env = dict(os.environ, FTRL_PS_TOKEN=TOKEN, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "ftrl_ps", "train", str(data / "train.svm"), "--workers", "2",
         "--staleness", "0", "--bits", "18", "--batch-size", "25", "--fetch-step", "1",
         "--push-step", "1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert proc.stderr is not None
        url, seen = None, []
        deadline = time.monotonic() + 60
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            seen.append(line)
            if line.startswith("servers: "):
                url = line.split()[1].rstrip(",")
        assert url, "no 'servers:' line: " + "".join(seen)
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # the launcher stops its servers and workers
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _points(page: Page, chart: str) -> int:
    """How many points the chart says it draws (its ``data-points`` attribute)."""
    value = page.locator(chart).get_attribute("data-points")
    return int(value) if value and value.isdigit() else 0


@pytest.mark.slow
def test_dashboard_shows_workers_and_charts_in_chromium(
    running_cluster: tuple[str, subprocess.Popen[str]],
) -> None:
    chromium = _chromium()
    sync_api = pytest.importorskip("playwright.sync_api")
    url, proc = running_cluster
    errors: list[str] = []
    requests: list[str] = []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(f"{url}/dashboard")
            # the servers have a token: the page asks for it
            page.wait_for_selector("#login:not([hidden])", timeout=15_000)
            page.fill("#token", TOKEN)
            page.click("#login button[type=submit]")
            page.wait_for_selector("#main:not([hidden])", timeout=15_000)
            # Poll from Python: wait_for_function's in-page polling evaluates a string,
            # which the page's Content-Security-Policy (script-src 'self') rightly refuses.
            wait_until(lambda: page.locator("#workers tbody tr").count() == 2, 20,
                       "the page showing 2 workers", interval=0.1)
            wait_until(lambda: _points(page, "#chart-rate") >= 2
                       and _points(page, "#chart-loss") >= 2, 30,
                       "the page showing 2 points per chart", interval=0.1)
            rows = page.locator("#workers tbody tr")
            indices = sorted(rows.nth(i).locator("td").first.inner_text() for i in range(2))
            shards = page.locator("#shards tbody tr").count()
            rate_points = page.locator("#chart-rate polyline").get_attribute("points") or ""
            loss_points = page.locator("#chart-loss polyline").get_attribute("points") or ""
            rows_card = page.inner_text("#c-rows")
            stored = page.evaluate("sessionStorage.getItem('ftrl-ps-token')")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
            still_running = proc.poll() is None
        finally:
            browser.close()
    assert still_running, "the cluster finished before the checks: the page was not live"
    assert indices == ["0", "1"]
    assert shards == 1
    assert len(rate_points.split()) >= 2 and len(loss_points.split()) >= 2
    assert rows_card not in ("", "–", "0")
    assert stored == TOKEN
    assert not any(TOKEN in r for r in requests), "the token went into a URL"
    assert all(r.startswith(url) or r.startswith("data:") for r in requests), requests
    assert errors == [], errors
