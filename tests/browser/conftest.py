"""Headless Debian Chromium driven by Playwright; screenshots go to tests/results/screenshots."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[1] / "results" / "screenshots"
LOCAL = ("file:", "data:", "about:", "http://localhost:", "http://127.0.0.1:")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.is_file():
        pytest.fail(f"the browser tests need Debian's chromium at {CHROMIUM}: run `make browser` "
                    "(apt-get install chromium)", pytrace=False)  # fmt: skip
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page that records its script errors (``page.errors``), the errors it logs to the
    console (``page.console_errors``) and every request that would leave the machine
    (``page.remote``), which it blocks; files and servers on this machine's loopback are
    reached."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    page = context.new_page()
    page.errors = []  # type: ignore[attr-defined]
    page.console_errors = []  # type: ignore[attr-defined]
    page.remote = []  # type: ignore[attr-defined]
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda m: page.console_errors.append(m.text) if m.type == "error" else None)

    def offline(route) -> None:
        if route.request.url.startswith(LOCAL):
            route.continue_()
        else:
            page.remote.append(route.request.url)
            route.abort()

    page.route("**/*", offline)
    yield page
    context.close()


@pytest.fixture
def screenshot(page: Page) -> Callable[[str], Path]:
    """``screenshot(name)`` saves the page as ``tests/results/screenshots/<name>.png``."""

    def save(name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=path)
        return path

    return save
