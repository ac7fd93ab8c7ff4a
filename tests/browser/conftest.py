"""Browser-test fixtures: a real ``recycle serve`` with real data, and headless Chromium.

Chromium is Debian's ``chromium`` driven by its ``chromium-driver`` through selenium (installed
by ``scripts/browser.sh``, which ``scripts/test.sh`` runs). Set ``RECYCLE_CHROMIUM`` and
``RECYCLE_CHROMEDRIVER`` to use other binaries. Without a browser the tests are skipped locally
and fail when ``CI=true``.

Screenshots of every page go to ``test-artifacts/screenshots/``; with
``RECYCLE_SCREENSHOTS_DIR=docs/screenshots`` they are also written there (the committed copies).
"""

from __future__ import annotations

import base64
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.client import RecycleClient
from tests.browser.dashboard_data import DashboardData, make_files, populate
from tests.serving import REPO_ROOT, Served, serve

ARTIFACTS = REPO_ROOT / "test-artifacts" / "screenshots"
WINDOW = (1440, 900)
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--lang=en-US",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
)


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(
            f"headless Chromium is required in CI: {reason} (scripts/browser.sh installs it)"
        )
    pytest.skip(f"no headless browser: {reason} (run scripts/browser.sh)")


def _first_existing(*candidates: str | None) -> str | None:
    for candidate in candidates:
        if candidate and (Path(candidate).is_file() or shutil.which(candidate)):
            return shutil.which(candidate) or candidate
    return None


# --------------------------------------------------------------------------- the service


@dataclass
class Stack:
    served: Served
    client: RecycleClient
    data: DashboardData


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """``recycle serve`` filled with the tiny upgrade story (see dashboard_data.py)."""
    root = tmp_path_factory.mktemp("dashboard")
    files = make_files(root)
    with serve(root) as served:
        client = RecycleClient(served.url, served.api_key, timeout=120)
        try:
            data = populate(client, files)
        except Exception:
            print(served.log_tail())
            raise
        try:
            yield Stack(served, client, data)
        finally:
            client.close()


# --------------------------------------------------------------------------- the browser


class ConsoleErrors(AssertionError):
    pass


@dataclass
class Dashboard:
    """A signed-in headless Chromium on the dashboard, with helpers the tests share."""

    driver: Any
    base_url: str
    shots: list[Path] = field(default_factory=list)

    def open(self, path: str, *, check_console: bool = True, timeout: float = 30.0) -> None:
        self.driver.get(self.base_url + path)
        self.wait_for(
            "return document.body && document.body.dataset.ready === 'true'",
            timeout,
            f"{path} to render",
        )
        time.sleep(0.3)  # the last fetches settle (charts drawn after their data)
        if check_console:
            self.assert_no_console_errors(path)

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(
        self, script: str, timeout: float = 30.0, what: str = "a condition", *args: Any
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.driver.execute_script(script, *args)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)

    def console_errors(self) -> list[str]:
        """SEVERE browser log entries since the last call (the log is drained)."""
        return [
            entry["message"]
            for entry in self.driver.get_log("browser")
            if entry["level"] == "SEVERE"
        ]

    def assert_no_console_errors(self, where: str) -> None:
        errors = self.console_errors()
        page_error = self.js(
            "const e = document.getElementById('page-error'); return e && !e.hidden ? e.textContent : ''"
        )
        if errors or page_error:
            raise ConsoleErrors(f"{where}: console errors {errors}; page error {page_error!r}")

    def screenshot(self, name: str) -> Path:
        """A full-page PNG (Chrome DevTools capture beyond the viewport) of the current page."""
        self.js("window.scrollTo(0, 0); if (document.activeElement) document.activeElement.blur();")
        height = int(self.js("return Math.ceil(document.documentElement.scrollHeight)"))
        shot = self.driver.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": WINDOW[0], "height": height, "scale": 1},
            },
        )
        png = base64.b64decode(shot["data"])
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(png)
        committed = os.environ.get("RECYCLE_SCREENSHOTS_DIR")
        if committed:
            target = Path(committed)
            target = target if target.is_absolute() else REPO_ROOT / target
            target.mkdir(parents=True, exist_ok=True)
            (target / f"{name}.png").write_bytes(png)
        self.shots.append(path)
        return path

    def sign_in(self, api_key: str) -> None:
        from selenium.webdriver.common.by import By

        if self.driver.current_url.startswith(self.base_url):
            self.js("sessionStorage.clear()")
        self.open("/dashboard/login", check_console=False)
        field = self.driver.find_element(By.ID, "api-key")
        field.clear()
        field.send_keys(api_key)
        self.driver.find_element(By.ID, "login-submit").click()
        self.wait_for(
            "return location.pathname === '/dashboard' && document.body.dataset.ready === 'true'",
            30,
            "the overview after signing in",
        )

    def text(self, css: str) -> str:
        return str(
            self.js(
                "const e = document.querySelector(arguments[0]); return e ? e.textContent : ''", css
            )
        )

    def count(self, css: str) -> int:
        return int(self.js("return document.querySelectorAll(arguments[0]).length", css))


@dataclass(frozen=True)
class Chromium:
    binary: str
    driver: str


@pytest.fixture(scope="module")
def chromium() -> Chromium:
    """Where Chromium and its driver are (skip locally, fail in CI, when they are not)."""
    try:
        import selenium  # noqa: F401
    except ImportError as error:
        _unavailable(f"selenium is not installed ({error})")
    binary = _first_existing(
        os.environ.get("RECYCLE_CHROMIUM"), "/usr/bin/chromium", "chromium", "chromium-browser"
    )
    driver = _first_existing(
        os.environ.get("RECYCLE_CHROMEDRIVER"), "/usr/bin/chromedriver", "chromedriver"
    )
    if binary is None or driver is None:
        _unavailable(f"chromium at {binary}, chromedriver at {driver}")
    assert binary is not None and driver is not None
    return Chromium(binary, driver)


def _chrome(paths: Chromium) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager download anything
    options = webdriver.ChromeOptions()
    options.binary_location = paths.binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        return webdriver.Chrome(service=Service(paths.driver), options=options)
    except Exception as error:  # noqa: BLE001 (a browser that does not start is "unavailable")
        _unavailable(f"Chromium did not start: {error}")


@pytest.fixture(scope="module")
def browser(chromium: Chromium, stack: Stack) -> Iterator[Dashboard]:
    """Headless Chromium signed in with the admin key (checked for before the stack is built)."""
    driver = _chrome(chromium)
    dashboard = Dashboard(driver, stack.served.url)
    try:
        dashboard.sign_in(stack.served.api_key)
        dashboard.console_errors()  # drained
        yield dashboard
    finally:
        driver.quit()
