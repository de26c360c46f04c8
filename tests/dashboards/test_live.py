"""The live dashboard router: HTTP contract on a real loopback server, then in headless chromium."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from preemptscope.dashboards.live import parse_range

from preemptscope.errors import ConfigError
from tests.dashboards.conftest import Watched, plotted
from tests.dashboards.server import TOKEN, Holder, make_app, serve
from tests.dashboards.synthetic import make_report

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def holder() -> Holder:
    return Holder(make_report(720, hostile=True, deployments=2))


@pytest.fixture
def base(holder: Holder) -> Iterator[str]:
    with serve(make_app(holder, token=True)) as url:
        yield url


def test_parse_range() -> None:
    assert parse_range("1h") == timedelta(hours=1)
    assert parse_range("90m") == timedelta(minutes=90)
    assert parse_range("all") is None
    for bad in ("0h", "1w", "", "-1h"):
        with pytest.raises(ConfigError):
            parse_range(bad)


def test_pages_are_public_shells_and_the_api_needs_the_token(base: str, holder: Holder) -> None:
    name = holder.report.deployments[0].name
    with httpx.Client(base_url=base) as client:
        index = client.get("/")
        assert index.status_code == 200
        assert "default-src 'none'" in index.headers["content-security-policy"]
        page = client.get(f"/deployments/{name}")
        assert page.status_code == 200
        assert "<script>window" not in page.text  # the name in the URL is escaped
        assert "&lt;script&gt;" in page.text
        assert client.get("/static/plotly.min.js").content.startswith(b"/**")
        assert client.get("/static/live.js").headers["content-type"].startswith("text/javascript")
        assert client.get("/static/../pyproject.toml").status_code == 404
        assert client.get("/api/dashboard/deployments").status_code == 401
        assert client.get(f"/api/deployments/{name}/figures").status_code == 401
        assert client.get("/api/dashboard/report.html").status_code == 401
        snapshot = client.get("/api/dashboard/report.html", headers=AUTH)
        assert snapshot.text.startswith("<!doctype html>")
        assert snapshot.headers["content-disposition"].startswith("attachment; filename=")
        rows = client.get("/api/dashboard/deployments", headers=AUTH).json()
        assert [r["name"] for r in rows] == [d.name for d in holder.report.deployments]
        assert rows[0]["state"] == "over_capacity"


def test_figures_api_ranges_and_errors(base: str, holder: Holder) -> None:
    name = holder.report.deployments[0].name
    with httpx.Client(base_url=base, headers=AUTH) as client:
        hour = client.get(f"/api/deployments/{name}/figures", params={"range": "1h"})
        assert hour.status_code == 200
        assert hour.json()["windows"] == 360
        assert "<" not in hour.text  # log text in JSON is \\u003c-escaped as well
        everything = client.get(f"/api/deployments/{name}/figures", params={"range": "all"})
        assert everything.json()["windows"] == 720
        bad = client.get(f"/api/deployments/{name}/figures", params={"range": "soon"})
        assert bad.status_code == 422 and "expected e.g. 15m" in bad.text
        missing = client.get("/api/deployments/nope/figures")
        assert missing.status_code == 404 and "nope" in missing.text


def _open_deployment(watched: Watched, base: str, holder: Holder) -> None:
    page = watched.page
    page.goto(f"{base}/?token={TOKEN}")
    page.wait_for_selector("ul.deployments li a")
    assert "token" not in page.url  # moved to sessionStorage, out of the address bar
    badges = page.locator("ul.deployments .badge").all_text_contents()
    assert badges == ["Over capacity", "Over capacity"]
    # The hostile name shows as text in the list.
    assert (
        page.locator("ul.deployments a").first.text_content() == holder.report.deployments[0].name
    )
    page.locator("ul.deployments a").first.click()
    page.wait_for_function("window.__preemptscopeUpdates >= 1 && document.body.dataset.windows")


@pytest.mark.integration
def test_live_page_renders_updates_in_place_and_stays_local(
    base: str, holder: Holder, watched: Watched
) -> None:
    page = watched.page
    _open_deployment(watched, base, holder)
    graphs = plotted(page)
    assert {g["id"] for g in graphs} == {"fig-timeline", "fig-tail", "fig-capacity"}
    assert all(g["traces"] > 0 for g in graphs)
    assert page.locator("#card .verdict-card").count() == 1
    assert page.evaluate("window.__xss") is None
    assert page.locator("body").get_attribute("data-windows") == "360"

    # New data arrives: the periodic refresh redraws without a reload (our marker survives).
    page.evaluate("window.__marker = 42")
    holder.report = make_report(1440, hostile=True, deployments=2)
    new_end = holder.report.deployments[0].windows[-1].end.isoformat()
    page.wait_for_function(
        f"document.getElementById('updated').textContent.includes('{new_end}')", timeout=20_000
    )
    assert page.locator("body").get_attribute("data-windows") == "360"
    # The range selector: everything, drawn in place.
    page.locator("[data-range='all']").click()
    page.wait_for_function("document.body.dataset.windows === '1440'", timeout=20_000)
    assert page.locator("[data-range='all']").get_attribute("aria-pressed") == "true"
    assert page.evaluate("window.__marker") == 42

    assert page.evaluate("window.__xss") is None
    assert watched.console_errors == []
    assert watched.foreign_requests() == []
    assert any(u.endswith("/static/plotly.min.js") for u in watched.urls)
    watched.screenshot("live.png")


@pytest.mark.integration
def test_sign_in_form_when_no_token(base: str, holder: Holder, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{base}/")
    page.wait_for_selector("#login:not([hidden])")
    assert page.locator("#content").is_hidden()
    page.fill("#token", "wrong")
    page.click("#login-form button")
    page.wait_for_function("document.getElementById('status').textContent === 'token rejected'")
    page.fill("#token", TOKEN)
    page.click("#login-form button")
    page.wait_for_selector("ul.deployments li")
    assert page.locator("#login").is_hidden()
    # Only the two expected 401 responses were complained about.
    assert all("401" in e for e in watched.console_errors), watched.console_errors
    assert watched.foreign_requests() == []


def test_figure_cache_holds_only_the_current_report() -> None:
    from preemptscope.exporter.pages import _FigureCache

    cache = _FigureCache(2)
    old, new = make_report(5), make_report(5)
    cache.put(old, "a", "1h", b"old")
    assert cache.get(old, "a", "1h") == b"old"
    assert cache.get(new, "a", "1h") is None  # a new report object misses
    cache.put(new, "a", "1h", b"new")
    assert cache.get(old, "a", "1h") is None  # and the old one is dropped, not pinned
    cache.put(new, "b", "1h", b"b")
    cache.put(new, "c", "1h", b"c")
    assert cache.get(new, "a", "1h") is None  # least recently used beyond the size
    assert cache.get(new, "c", "1h") == b"c"


@pytest.mark.integration
def test_download_the_html_report_from_the_live_page(
    base: str, watched: Watched, tmp_path: Path
) -> None:
    page = watched.page
    page.goto(f"{base}/?token={TOKEN}")
    page.wait_for_selector("ul.deployments li a")
    with page.expect_download() as info:
        page.click("#download")
    saved = tmp_path / info.value.suggested_filename
    info.value.save_as(saved)
    assert saved.name.startswith("preemptscope-") and saved.suffix == ".html"
    text = saved.read_text()
    assert text.startswith("<!doctype html>") and 'id="fig-1-timeline"' in text
    assert watched.console_errors == []
