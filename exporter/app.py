"""The HTTP face: /metrics, the JSON API, health, OpenAPI docs and the live dashboard.

In front of every route: the Host/Origin guard (DNS rebinding, CSRF), HEAD as GET, and the
access log (exporter/guards.py, exporter/accesslog.py).

Every error, whatever raised it (404, 405, 413, 415, 422, 500, auth), has ONE JSON shape:
`{"error": {"status": 404, "code": "not_found", "message": "...", "detail": ...}}`
(exporter/api_errors.py). Uploads to /api/report are exporter/uploads.py.
"""

from __future__ import annotations

import contextlib
import html
import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from preemptscope.analysis.report import DeploymentReport, Report
from preemptscope.exporter.accesslog import AccessLog
from preemptscope.exporter.api_errors import (
    STATUS_CODES,
    ApiError,
    BodyLimit,
    bearer_guard,
    error_response,
)
from preemptscope.exporter.collector import build_registry, latest_window
from preemptscope.exporter.guards import HeadAsGet, HostOriginGuard
from preemptscope.exporter.live import Snapshot
from preemptscope.exporter.models import DeploymentDetail, DeploymentList
from preemptscope.exporter.uploads import UPLOAD_EXPANSION, report_from_uploads, upload_window
from prometheus_client import generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from preemptscope import __version__

LOG = logging.getLogger("preemptscope.exporter.app")

DOCS_CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
Readiness = bool | tuple[bool, dict[str, Any]]


class PrometheusText(PlainTextResponse):
    """The classic 0.0.4 text format: every Prometheus 2.x and 3.x reads it."""

    media_type = CONTENT_TYPE_PLAIN_0_0_4


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a missing figure is null (as in Report.to_dict)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _deployment_json(report: Report, deployment: DeploymentReport, snap: Snapshot) -> Any:
    one = Report(
        deployments=[deployment],
        sources=[s for s in report.sources if s.deployment == deployment.name],
        parameters=report.parameters,
        generated_at=report.generated_at,
    ).to_dict()
    body = one["deployments"][0]
    body["sources"] = one["sources"]
    body["live"] = _live_json(deployment, snap)
    body["generated_at"] = one["generated_at"]
    body["parameters"] = one["parameters"]
    return body


def _live_json(deployment: DeploymentReport, snap: Snapshot) -> dict[str, Any]:
    totals = snap.totals.get(deployment.name)
    window = latest_window(deployment, snap.report) if snap.report else None
    return {
        "over_capacity": deployment.verdict.state == "over_capacity",
        "model_name": snap.model_names.get(deployment.name) or deployment.capacity.model,
        "kv_cache_usage": window.kv_usage_mean if window else None,
        "requests_waiting": window.waiting_mean if window else None,
        "latest_window_start": window.start.isoformat() if window else None,
        "totals": totals.to_dict() if totals else None,
        "scrapes": [
            {
                "target": s.url,
                "up": s.up,
                "duration_seconds": s.duration_s,
                "last_error": s.last_error,
                "scrapes": s.scrapes,
                "failures": s.failures,
            }
            for s in snap.scrapes.values()
            if s.deployment == deployment.name
        ],
    }


def create_app(
    get_snapshot: Callable[[], Snapshot],
    *,
    token: str | None = None,
    protect_metrics: bool = False,
    max_upload: int = 64 * 1024 * 1024,
    is_ready: Callable[[], Readiness] = lambda: True,
    window_s: float = 60.0,
    lifespan: Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]] | None = None,
    allowed_hosts: Sequence[str] = (),
    access_log: bool = False,
) -> FastAPI:
    """The FastAPI app over a snapshot source (the Service in production, fakes in tests).

    `allowed_hosts`: Host names answered besides IP addresses and localhost (`*`: any).
    `is_ready`: True/False, or (ready, details) for /readyz.
    """
    app = FastAPI(
        title="preemptscope",
        version=__version__,
        description="Is this vLLM deployment over capacity? Live verdict, evidence and advice.",
        lifespan=lifespan,
        # Swagger UI would load its scripts from a CDN (blank offline, unpinned code in the
        # page): /docs is a local page over /openapi.json instead.
        docs_url=None,
        redoc_url=None,
    )
    guard = Depends(bearer_guard(token))
    registry = build_registry(get_snapshot)

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        # A Basic challenge makes browsers pop a login dialog, even over the live page's own
        # fetch() calls: /api/* (signed in by the page, with a bearer token) challenges Bearer
        # only; elsewhere (/metrics opened by hand) Basic with the token as password works.
        api = request.url.path.startswith("/api/")
        challenge = 'Bearer realm="preemptscope"' if api else 'Bearer, Basic realm="preemptscope"'
        headers = {"WWW-Authenticate": challenge}
        return error_response(
            exc.status, exc.message, exc.detail, exc.code, headers if exc.status == 401 else None
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = str(exc.detail) if exc.detail else STATUS_CODES.get(exc.status_code, "error")
        if exc.status_code == 404 and exc.detail == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        if exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"location": list(e.get("loc", ())), "message": e.get("msg", "")} for e in exc.errors()
        ]
        first = problems[0] if problems else {"location": [], "message": "invalid"}
        where = ".".join(str(p) for p in first["location"])
        return error_response(422, f"invalid request: {where}: {first['message']}", problems)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        LOG.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal error; see the service log")

    def current() -> tuple[Snapshot, Report]:
        snap = get_snapshot()
        if snap.report is None:
            raise ApiError(503, "no analysis yet; the service is starting")
        return snap, snap.report

    # Before the API's routes: `/api/deployments/{name:path}` would take `NAME/figures`.
    try:
        from preemptscope.exporter import pages
    except ImportError as exc:  # the dashboard is optional; the API works without it
        LOG.warning("live dashboard unavailable: %s", exc)
    else:

        def report_for_pages() -> Report:
            return current()[1]

        # On app.state so a test can count the (costly) report builds.
        app.state.report_html = pages.ReportHtmlCache()
        app.include_router(
            pages.build_router(report_for_pages, [guard], report_cache=app.state.report_html)
        )

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process answers HTTP (nothing else is checked: restarting the process
        would not help anything else)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "not ready"}})
    async def readyz() -> dict[str, Any]:
        """Readiness: the first analysis is done, the last analysis is recent and some input
        (log line or successful scrape) was read within --ready-after."""
        state = is_ready()
        ready, details = state if isinstance(state, tuple) else (state, {})
        if not ready:
            reason = details.get("reason", "the first analysis has not finished")
            raise ApiError(503, f"not ready: {reason}", detail=details or None)
        return {"status": "ready", **details}

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return HTMLResponse(
            _docs_page(app.openapi()),
            headers={"Content-Security-Policy": DOCS_CSP, "X-Content-Type-Options": "nosniff"},
        )

    metrics_deps = [guard] if protect_metrics else []

    # Rendered bodies per snapshot version: under load, most requests reuse the last body
    # (the snapshot changes a few times a second, a request costs microseconds).
    rendered: dict[str, tuple[int, bytes]] = {}

    def cached(key: str, version: int, render: Callable[[], bytes]) -> bytes:
        hit = rendered.get(key)
        if hit is not None and hit[0] == version:
            return hit[1]
        body = render()
        if len(rendered) > 1000:
            rendered.clear()
        rendered[key] = (version, body)
        return body

    def json_body(value: Any) -> bytes:
        return json.dumps(_finite(value), separators=(",", ":"), allow_nan=False).encode()

    @app.get(
        "/metrics",
        tags=["metrics"],
        dependencies=metrics_deps,
        response_class=PrometheusText,
        responses={200: {"description": "Prometheus text exposition format 0.0.4"}},
    )
    async def metrics() -> Response:
        """preemptscope's own metrics in the Prometheus text format."""
        version = get_snapshot().version
        body = cached("/metrics", version, lambda: generate_latest(registry))
        return PrometheusText(body)

    @app.get(
        "/api/deployments",
        tags=["api"],
        dependencies=[guard],
        responses={200: {"model": DeploymentList}, 503: {"description": "no analysis yet"}},
    )
    async def deployments() -> Response:
        """Every deployment with its verdict and headline figures."""
        snap, report = current()
        body = cached("/api/deployments", snap.version, lambda: json_body(listing(snap, report)))
        return Response(body, media_type="application/json")

    def listing(snap: Snapshot, report: Report) -> dict[str, Any]:
        return {
            "generated_at": report.generated_at.isoformat() if report.generated_at else None,
            "deployments": [
                {
                    "name": d.name,
                    "verdict": d.verdict.state,
                    "problem": d.verdict.problem,
                    "preemptions_in_history": d.preemptions.total,
                    "episodes": len(d.episodes),
                    **_live_json(d, snap),
                }
                for d in report.deployments
            ],
        }

    @app.get(
        "/api/deployments/{name:path}",  # Kubernetes names are namespace/pod
        tags=["api"],
        dependencies=[guard],
        responses={200: {"model": DeploymentDetail}, 404: {"description": "no such deployment"}},
    )
    async def deployment(name: str) -> Response:
        """Windows, verdict, evidence and advice of one deployment (the report JSON)."""
        snap, report = current()
        for d in report.deployments:
            if d.name == name:
                body = cached(
                    f"/api/deployments/{name}",
                    snap.version,
                    lambda d=d: json_body(_deployment_json(report, d, snap)),  # type: ignore[misc]
                )
                return Response(body, media_type="application/json")
        known = ", ".join(d.name for d in report.deployments) or "none"
        raise ApiError(404, f"no deployment named {name!r} (known: {known})")

    @app.post(
        "/api/report",
        tags=["api"],
        dependencies=[guard],
        responses={413: {"description": "too large"}, 415: {"description": "not a log/bench"}},
    )
    async def report_upload(request: Request) -> Any:
        """Upload vLLM log files (`log` fields) and/or bench/client-result JSON (`bench`
        fields) as multipart/form-data; get the same JSON report as `preemptscope report`."""
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(
                415,
                f"expected multipart/form-data with 'log' and/or 'bench' file fields,"
                f" got {ctype or 'no content type'}",
            )
        form = await request.form()
        logs = [f for f in form.getlist("log") if isinstance(f, UploadFile)]
        benches = [f for f in form.getlist("bench") if isinstance(f, UploadFile)]
        unknown = sorted(set(form.keys()) - {"log", "bench", "window"})
        if unknown:
            raise ApiError(422, f"unknown form field(s) {', '.join(unknown)}; use log / bench")
        if not logs and not benches:
            raise ApiError(422, "no file uploaded: send at least one 'log' or 'bench' file")
        window_value = upload_window(form.get("window"), window_s)
        return await report_from_uploads(
            logs, benches, window_value, max_inflated=UPLOAD_EXPANSION * max_upload
        )

    # Added innermost first: the access log sees every request, guards' refusals included.
    app.add_middleware(BodyLimit, limit=max_upload)
    app.add_middleware(HostOriginGuard, allowed_hosts=tuple(allowed_hosts))
    app.add_middleware(HeadAsGet)
    if access_log:
        app.add_middleware(AccessLog, secrets=(token,) if token else ())
    return app


def _docs_page(spec: dict[str, Any]) -> str:
    """The API reference from the OpenAPI schema: no script, nothing loaded from elsewhere."""
    rows = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            statuses = ", ".join(sorted(op.get("responses", {})))
            rows.append(
                f"<tr><td><code>{html.escape(method.upper())}</code></td>"
                f"<td><code>{html.escape(path)}</code></td>"
                f"<td>{html.escape(op.get('summary', ''))}<br><small>"
                f"{html.escape(op.get('description', ''))}</small></td>"
                f"<td>{html.escape(statuses)}</td></tr>"
            )
    title = html.escape(f"{spec['info']['title']} {spec['info']['version']} API")
    return (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{title}</title>"
        "<style>body{font:14px system-ui,sans-serif;margin:2em;max-width:70em}"
        "td{border-top:1px solid #ddd;padding:.4em;vertical-align:top}</style></head><body>"
        f"<h1>{title}</h1><p>Machine-readable schema: <a href=openapi.json>/openapi.json</a>"
        " (OpenAPI 3; load it into any OpenAPI viewer). Errors share one shape:"
        ' <code>{"error": {"status", "code", "message", "detail"}}</code>.</p>'
        "<table><tr><th>method</th><th>path</th><th>what</th><th>statuses</th></tr>"
        + "".join(rows)
        + "</table></body></html>"
    )
