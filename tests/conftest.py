"""Fixtures every test folder shares: ONE headless Chromium for the whole session (Playwright's
sync API cannot start a second one while the first runs, so the fixture lives here, once)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboards.conftest import CHROMIUM, CHROMIUM_ARGS, Watched


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    seen = Watched(page)

    def route(route: Any) -> None:
        url = route.request.url
        seen.urls.append(url)
        if url in seen.foreign_requests():
            route.abort()  # never let a request leave the machine, but remember it
        else:
            route.continue_()

    context.route("**/*", route)
    page.on("request", lambda request: seen.urls.append(request.url))
    page.on(
        "console",
        lambda msg: seen.console_errors.append(msg.text) if msg.type == "error" else None,
    )
    page.on("pageerror", lambda exc: seen.console_errors.append(f"pageerror: {exc}"))
    try:
        yield seen
    finally:
        context.close()
