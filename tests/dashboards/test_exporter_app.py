"""The dashboard inside the real exporter app (its bearer guard and JSON error shape)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from preemptscope.analysis.report import Report
from preemptscope.exporter.app import create_app
from preemptscope.exporter.live import Snapshot

from tests.dashboards.conftest import Watched, plotted
from tests.dashboards.server import TOKEN, serve
from tests.dashboards.synthetic import make_report


@dataclass
class Source:
    report: Report | None = field(default_factory=lambda: make_report(360, hostile=True))

    def snapshot(self) -> Snapshot:
        return Snapshot(
            report=self.report,
            totals={},
            scrapes={},
            analysis_seconds=None,
            analysed_at=None,
            model_names={},
        )


@pytest.fixture
def source() -> Source:
    return Source()


@pytest.fixture
def base(source: Source) -> Iterator[str]:
    with serve(create_app(source.snapshot, token=TOKEN)) as url:
        yield url


def test_exporter_guards_the_dashboard_api(base: str, source: Source) -> None:
    assert source.report is not None
    name = source.report.deployments[0].name
    with httpx.Client(base_url=base) as client:
        assert client.get("/").status_code == 200
        denied = client.get(f"/api/deployments/{name}/figures")
        assert denied.status_code == 401 and denied.json()["error"]["status"] == 401
        # No Basic challenge on the API: browsers would pop a login dialog over the page.
        assert denied.headers["www-authenticate"] == 'Bearer realm="preemptscope"'
        auth = {"Authorization": f"Bearer {TOKEN}"}
        ok = client.get(f"/api/deployments/{name}/figures", params={"range": "15m"}, headers=auth)
        assert ok.status_code == 200 and ok.json()["windows"] == 90
        bad = client.get(f"/api/deployments/{name}/figures?range=x", headers=auth)
        assert bad.status_code == 422 and "expected e.g. 15m" in bad.json()["error"]["message"]
        source.report = None
        starting = client.get("/api/dashboard/deployments", headers=auth)
        assert starting.status_code == 503


@pytest.mark.integration
def test_live_page_in_the_exporter_app(base: str, source: Source, watched: Watched) -> None:
    assert source.report is not None
    page = watched.page
    page.goto(f"{base}/?token={TOKEN}")
    page.locator("ul.deployments a").first.click()
    page.wait_for_function("window.__preemptscopeUpdates >= 1 && document.body.dataset.windows")
    assert {g["id"] for g in plotted(page)} == {"fig-timeline", "fig-tail", "fig-capacity"}
    assert page.evaluate("window.__xss") is None
    assert watched.console_errors == []
    assert watched.foreign_requests() == []
    watched.screenshot("live-exporter.png")


@pytest.mark.integration
def test_sign_in_against_the_exporter_guard(base: str, watched: Watched) -> None:
    page = watched.page
    page.goto(f"{base}/")
    page.wait_for_selector("#login:not([hidden])", timeout=15_000)
    page.fill("#token", TOKEN)
    page.click("#login-form button")
    page.wait_for_selector("ul.deployments li")
    assert all("401" in e for e in watched.console_errors), watched.console_errors
