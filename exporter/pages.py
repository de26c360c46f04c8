"""The live dashboard's FastAPI router: pages, static files and the figures API.

The exporter includes it with its auth dependency. Pages and static files are public shells that
carry no report data (a browser cannot attach a bearer token to a navigation); every byte of
report data comes from the API routes, which are guarded by `dependencies`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import plotly
from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse
from preemptscope.analysis.report import DeploymentReport, Report
from preemptscope.dashboards.figures import figures_json
from preemptscope.dashboards.html import render_report_html, script_json
from preemptscope.dashboards.live import (
    DEFAULT_RANGE,
    PAGE_CSP,
    deployment_page_html,
    deployment_summaries,
    index_page_html,
    parse_range,
    window_json,
    window_split,
)

from preemptscope.errors import ConfigError

STATIC_TYPES = {
    "style.css": "text/css; charset=utf-8",
    "plots.js": "text/javascript; charset=utf-8",
    "live.js": "text/javascript; charset=utf-8",
}
CACHE_ENTRIES = 32  # (deployment, range) figure payloads kept for the current report


@cache
def _static(name: str) -> bytes:
    if name == "plotly.min.js":
        return (Path(plotly.__file__).parent / "package_data" / "plotly.min.js").read_bytes()
    return resources.files("preemptscope.dashboards").joinpath("static", name).read_bytes()


class _FigureCache:
    """Figure payloads of the current report per (deployment, range): building a week costs
    seconds. Reports are immutable and replaced whole, so a new report object clears the cache;
    only the current report is referenced (a sidecar must not pin old reports in memory)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._report: Report | None = None
        self._items: OrderedDict[tuple[str, str], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, report: Report, name: str, key: str) -> bytes | None:
        with self._lock:
            if report is not self._report:
                return None
            body = self._items.get((name, key))
            if body is not None:
                self._items.move_to_end((name, key))
            return body

    def put(self, report: Report, name: str, key: str, body: bytes) -> None:
        with self._lock:
            if report is not self._report:
                self._report = report
                self._items.clear()
            self._items[(name, key)] = body
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class ReportHtmlCache:
    """The self-contained report costs seconds of CPU: it is built again only when the
    analysis changed. The live loop re-analyses every few seconds even without new data, so
    the key is the report's content (its JSON without `generated_at` and `now`), not the object; one
    build at a time (concurrent requests wait for it rather than build it again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._report: Report | None = None
        self._key = ""
        self._body = b""
        self.builds = 0

    def get(self, report: Report) -> bytes:
        with self._lock:
            if report is self._report:
                return self._body
            content = report.to_dict()
            content.pop("generated_at", None)
            content.get("parameters", {}).pop("now", None)
            content.get("parameters", {}).pop("complete_before", None)
            key = hashlib.sha256(
                json.dumps(content, sort_keys=True, default=str).encode()
            ).hexdigest()
            if key != self._key:
                self._body = render_report_html(report).encode("utf-8")
                self._key = key
                self.builds += 1
            self._report = report
            return self._body


def _json(body: bytes) -> Response:
    return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})


def _page(text: str) -> HTMLResponse:
    return HTMLResponse(
        text,
        headers={
            "Content-Security-Policy": PAGE_CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache",
        },
    )


def _find(report: Report, name: str) -> DeploymentReport:
    for dep in report.deployments:
        if dep.name == name:
            return dep
    raise HTTPException(status_code=404, detail=f"no deployment named {name!r}")


def build_router(
    get_report: Callable[[], Report],
    dependencies: Sequence[Any] = (),
    report_cache: ReportHtmlCache | None = None,
) -> APIRouter:
    """Routes: GET /, /deployments/{name}, /static/{file}, /api/dashboard/deployments,
    /api/dashboard/report.html and /api/deployments/{name}/figures?range=1h. `dependencies`
    (e.g. the exporter's bearer-token check, as `Depends(...)` objects or plain callables) guard
    the three API routes."""
    guards = [d if hasattr(d, "dependency") else Depends(d) for d in dependencies]
    router = APIRouter()
    cache_ = _FigureCache(CACHE_ENTRIES)
    report_cache = report_cache if report_cache is not None else ReportHtmlCache()

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    def index(request: Request) -> HTMLResponse:
        return _page(index_page_html(request.scope.get("root_path", "")))

    @router.get("/deployments/{name:path}", response_class=HTMLResponse, include_in_schema=False)
    def deployment_page(name: str, request: Request) -> HTMLResponse:
        return _page(deployment_page_html(name, request.scope.get("root_path", "")))

    @router.get("/static/{filename}", include_in_schema=False)
    def static(filename: str) -> Response:
        if filename == "plotly.min.js":
            media = "text/javascript; charset=utf-8"
        elif filename in STATIC_TYPES:
            media = STATIC_TYPES[filename]
        else:
            raise HTTPException(status_code=404, detail=f"no static file {filename!r}")
        return Response(
            _static(filename),
            media_type=media,
            headers={"Cache-Control": "public, max-age=3600", "X-Content-Type-Options": "nosniff"},
        )

    @router.get("/api/dashboard/deployments", dependencies=guards, tags=["dashboard"])
    def deployments() -> Response:
        """Deployment list for the dashboard: name, verdict and headline numbers."""
        return _json(script_json(deployment_summaries(get_report())).encode())

    @router.get(
        "/api/dashboard/report.html",
        dependencies=guards,
        tags=["dashboard"],
        response_class=HTMLResponse,
        responses={200: {"description": "the report as one HTML file, no external resource"}},
    )
    def report_html() -> Response:
        """The current report as the self-contained HTML file (`preemptscope report --html`);
        built once per analysis result, not per request."""
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        return Response(
            report_cache.get(get_report()),
            media_type="text/html; charset=utf-8",
            headers={
                "Content-Disposition": f'attachment; filename="preemptscope-{stamp}.html"',
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
            },
        )

    @router.get("/api/deployments/{name:path}/figures", dependencies=guards, tags=["dashboard"])
    def figures(
        name: str,
        range_: str = Query(DEFAULT_RANGE, alias="range", description="15m, 1h, 24h, 7d, all"),
    ) -> Response:
        """The live page's Plotly figures and verdict card for one deployment and time range."""
        try:
            span = parse_range(range_)
        except ConfigError as exc:
            raise HTTPException(status_code=422, detail=str(exc)) from exc
        report = get_report()
        dep = _find(report, name)
        body = cache_.get(report, name, range_)
        if body is None:
            since: datetime | None = None
            if span is not None and dep.windows:
                since = dep.windows[-1].end - span  # relative to the data, not the wall clock
            data = figures_json(dep, since=since)
            complete, filling = window_split(dep, report)
            data["complete_window"] = window_json(complete)
            data["filling_window"] = window_json(filling)
            body = script_json(data).encode()
            cache_.put(report, name, range_, body)
        return _json(body)

    return router
