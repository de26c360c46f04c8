"""What people see: the demo's HTML report and live pages in Chromium at three widths.

No two text boxes (HTML text and the SVG text of Plotly charts) may overlap, no table may break a
word across lines, and `demo --serve` must fill the panels its report fills. Everything runs
through the real `preemptscope` process; the live service listens on 127.0.0.1, port 0.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.dashboards.conftest import ARTIFACTS
from tests.dashboards.overlap import broken_words, text_overlaps

pytestmark = pytest.mark.integration
WIDTHS = (1024, 1400, 1920)
WORDS = "table, .verdict-card, ul.deployments"
# The service's own line, or uvicorn's (which an --access-log/--log-level choice may hide).
LISTENING = re.compile(r"(?:serving on|Uvicorn running on) (http://127\.0\.0\.1:\d+)")
PREEMPTSCOPE = str(Path(sys.executable).parent / "preemptscope")


def _page(browser: Any, width: int) -> tuple[Any, Any]:
    """A page that may fetch file:, data:, blob: and 127.0.0.1 only (all else is aborted)."""
    context = browser.new_context(viewport={"width": width, "height": 1000})
    foreign: list[str] = []

    def route(route: Any) -> None:
        parts = urlsplit(route.request.url)
        local = parts.scheme in ("file", "data", "blob", "about") or parts.hostname == "127.0.0.1"
        if local:
            route.continue_()
        else:
            foreign.append(route.request.url)
            route.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.foreign = foreign
    return context, page


def _check(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name), full_page=True)
    boxes, overlaps = text_overlaps(page)
    assert boxes > 5  # the collector saw the page's text
    assert overlaps == [], f"{name}: text drawn on text: {overlaps[:5]}"
    assert broken_words(page, WORDS) == [], name
    assert page.foreign == []


@pytest.fixture(scope="module")
def demo_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    done = subprocess.run(
        [PREEMPTSCOPE, "demo", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return out / "report.html"


@pytest.fixture(scope="module")
def plain_report(demo_report: Path) -> Path:
    """`preemptscope report ... --html` on the demo's files: no what-if panel."""
    out = demo_report.parent
    html = out / "plain.html"
    names = ("chat-a10g", "chat-a100")
    args = [f"{out / name / 'vllm.log'}={name}" for name in names]
    for name in names:
        args += ["--metrics", f"{out / name / 'metrics'}={name}"]
        args += ["--bench", f"{out / name / 'bench.json'}={name}"]
    done = subprocess.run(
        [PREEMPTSCOPE, "report", *args, "--html", str(html), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return html


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("which", ["demo", "plain"])
def test_the_html_report_draws_no_text_on_text(
    browser: Any, demo_report: Path, plain_report: Path, which: str, width: int
) -> None:
    context, page = _page(browser, width)
    try:
        page.goto((demo_report if which == "demo" else plain_report).as_uri())
        page.wait_for_function("window.__preemptscopeRendered !== undefined", timeout=60_000)
        titles = page.locator("#fig-0-capacity .gtitle, #fig-0-capacity .annotation-text")
        whatif = "What-if: max_num_seqs (simulated)" in titles.all_text_contents()
        assert whatif == (which == "demo")
        _check(page, f"layout-report-{which}-{width}.png")
    finally:
        context.close()


@pytest.fixture(scope="module")
def demo_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`preemptscope demo --serve --port 0`: the base URL, once the service answers."""
    out = tmp_path_factory.mktemp("demo-serve")
    log = (out / "stderr.txt").open("w+")
    proc = subprocess.Popen(
        [PREEMPTSCOPE, "demo", "--serve", "--port", "0", "--out", str(out / "files")],
        stdout=subprocess.DEVNULL,
        stderr=log,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        base = None
        while base is None and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
            log.seek(0)
            match = LISTENING.search(log.read())
            base = match.group(1) if match else None
        log.seek(0)
        assert base is not None, log.read()
        while time.monotonic() < deadline:  # the first analysis of the logs
            try:
                rows = json.loads(_get(base + "/api/dashboard/deployments"))
            except urllib.error.HTTPError as exc:
                # 503 until the first analysis is done (exporter/app.py): the service listens
                # before it has one, so a fast first poll meets it (a CI run did).
                if exc.code != 503:
                    raise
                rows = []
            if len(rows) == 2 and all(row["windows"] for row in rows):
                break
            time.sleep(0.5)
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        text: str = response.read().decode()
    return text


def test_demo_serve_fills_the_scatter_and_the_preemption_row(demo_service: str) -> None:
    """The live service follows only logs: they must carry the preemption counts."""
    payload = json.loads(_get(demo_service + "/api/deployments/chat-a10g/figures?range=all"))
    figures = payload["figures"]
    scatter = [y for t in figures["preemption_vs_tail"]["data"] for y in t["y"]]
    assert len(scatter) >= 5
    counted = [
        y
        for t in figures["timeline"]["data"]
        if str(t.get("name", "")).startswith("preemptions")
        for y in t.get("y") or []
        if y is not None
    ]
    assert counted and max(counted) > 0


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_pages_draw_no_text_on_text(browser: Any, demo_service: str, width: int) -> None:
    context, page = _page(browser, width)
    try:
        page.goto(demo_service + "/deployments/chat-a10g")
        page.wait_for_function("document.body.hasAttribute('data-windows')", timeout=60_000)
        page.wait_for_timeout(300)  # Plotly's responsive relayout after the first draw
        drawn = page.evaluate(
            """() => document.getElementById('fig-tail').data
                 .reduce((n, t) => n + t.y.length, 0)"""
        )
        assert drawn >= 5  # the scatter has points in the browser too
        _check(page, f"layout-live-deployment-{width}.png")
        page.goto(demo_service + "/")
        page.wait_for_function(
            "document.querySelectorAll('#deployments li').length === 2", timeout=60_000
        )
        # The list is not the figures (README and docs say so): the page says where they are.
        assert "for its verdict card and figures" in page.locator("#hint").inner_text()
        _check(page, f"layout-live-index-{width}.png")
    finally:
        context.close()
