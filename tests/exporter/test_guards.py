"""The service against a browser page it did not serve, and what it says about itself: Host
(DNS rebinding), Origin (CSRF), HEAD, the upload's window field, readiness, the cached
report.html, the offline /docs and the OpenAPI schema. Real HTTP on 127.0.0.1."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from preemptscope.exporter.models import DeploymentDetail, DeploymentList

from tests.exporter.conftest import (
    append_lines,
    healthy_lines,
    over_capacity_lines,
    running_service,
    wait_for,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "vllm.log"
    append_lines(log, healthy_lines(datetime.now(UTC) - timedelta(minutes=3), 180))
    return log


def test_foreign_host_names_are_refused(tmp_path: Path) -> None:
    with running_service(
        tmp_path / "state", "--log", f"{_log(tmp_path)}=chat", "--allowed-hosts", "preemptscope"
    ) as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        port = live.url.rsplit(":", 1)[1]
        for path in ("/api/deployments", "/metrics", "/", "/api/dashboard/report.html"):
            refused = client.get(path, headers={"Host": "attacker.example"})
            assert refused.status_code == 400, path
            assert refused.json()["error"]["code"] == "bad_host"
            assert "--allowed-hosts" in refused.json()["error"]["message"]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"preemptscope:{port}", "[::1]"):
            assert client.get("/api/deployments", headers={"Host": host}).status_code == 200
        assert client.get("/metrics", headers={"Host": "preemptscope.evil"}).status_code == 400


def test_cross_origin_posts_and_costly_gets_are_refused(tmp_path: Path) -> None:
    sample = (FIXTURES / "v0-over-capacity.log").read_bytes()
    with running_service(tmp_path / "state", "--log", f"{_log(tmp_path)}=chat") as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        own = live.url
        files = {"log": ("prod.log", sample)}
        for headers in (
            {"Origin": "http://attacker.example"},
            {"Origin": "null"},  # sandboxed iframe, file:// page
            {"Origin": own.replace("127.0.0.1", "localhost")},  # another origin, same machine
            {"Sec-Fetch-Site": "cross-site"},
        ):
            refused = client.post("/api/report", files=files, headers=headers)
            assert refused.status_code == 403, headers
            assert refused.json()["error"]["code"] == "cross_origin"
        costly = client.get("/api/dashboard/report.html", headers={"Origin": "http://evil.test"})
        assert costly.status_code == 403
        # The same origin (the live page itself) and non-browser clients pass.
        assert client.post("/api/report", files=files, headers={"Origin": own}).status_code == 200
        assert client.post("/api/report", files=files).status_code == 200
        # A cross-site page may still read nothing but the public shells: a GET of / is served.
        assert client.get("/", headers={"Sec-Fetch-Site": "cross-site"}).status_code == 200


def test_head_works_where_get_does(tmp_path: Path) -> None:
    with running_service(tmp_path / "state", "--log", f"{_log(tmp_path)}=chat") as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        for path in ("/healthz", "/readyz", "/metrics", "/api/deployments", "/", "/docs"):
            get = client.get(path)
            head = client.head(path)
            assert head.status_code == get.status_code == 200, path
            assert head.content == b""
            assert head.headers["content-type"] == get.headers["content-type"]
        assert client.head("/no/such/route").status_code == 404
        assert client.head("/api/report").status_code == 405  # POST only


def test_upload_window_must_be_a_sane_duration(tmp_path: Path) -> None:
    with running_service(tmp_path / "state", "--log", f"{_log(tmp_path)}=chat") as live:
        client = live.client()
        for window in ("inf", "-inf", "nan", "-5", "0", "1e999", "abc", "9" * 400, "2d"):
            response = client.post(
                "/api/report", files={"log": ("a.log", b"x\n")}, data={"window": window}
            )
            assert response.status_code == 422, (window, response.text)
            assert response.json()["error"]["message"].startswith("window: "), window


def test_upload_window_accepts_seconds_and_durations(tmp_path: Path) -> None:
    sample = (FIXTURES / "v0-over-capacity.log").read_bytes()
    with running_service(tmp_path / "state", "--log", f"{_log(tmp_path)}=chat") as live:
        client = live.client()
        for window, seconds in (("30", 30.0), ("2m", 120.0)):
            response = client.post(
                "/api/report", files={"log": ("p.log", sample)}, data={"window": window}
            )
            assert response.status_code == 200, response.text
            assert response.json()["parameters"]["window_s"] == seconds


def test_readiness_fails_when_inputs_go_quiet(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with running_service(
        tmp_path / "state", "--log", f"{log}=chat", "--ready-after", "2s", "--poll-interval", "0.1"
    ) as live:
        client = live.client()
        ready = wait_for(lambda: (r := client.get("/readyz")).status_code == 200 and r.json())
        assert ready["status"] == "ready" and ready["ready_after_seconds"] == 2.0
        quiet = wait_for(lambda: (r := client.get("/readyz")).status_code == 503 and r.json())
        assert "nothing read from any log or scrape target" in quiet["error"]["message"]
        assert quiet["error"]["detail"]["input_age_seconds"] > 2
        assert client.get("/healthz").status_code == 200  # alive all the same
        append_lines(log, healthy_lines(datetime.now(UTC), 5))
        wait_for(lambda: client.get("/readyz").status_code == 200)


def test_report_html_is_built_once_per_analysis_result(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with running_service(tmp_path / "state", "--log", f"{log}=chat") as live:
        client = live.client()
        wait_for(
            lambda: (
                (r := client.get("/api/deployments")).status_code == 200
                and r.json()["deployments"][0]["verdict"] == "ok"
            )
        )
        cache = live.app.state.report_html
        first = client.get("/api/dashboard/report.html")
        assert first.status_code == 200
        assert first.headers["content-type"].startswith("text/html")
        assert cache.builds == 1
        # The loop re-analyses every few seconds even without new data ("now" moves on):
        # the same result is not built again.
        assert live.service is not None
        analysed = live.service.snapshot().analysed_at
        wait_for(lambda: live.service.snapshot().analysed_at != analysed, timeout=20)
        for _ in range(3):
            assert client.get("/api/dashboard/report.html").status_code == 200
            assert client.head("/api/dashboard/report.html").status_code == 200
        assert cache.builds == 1
        # New data changes the analysis: built again, once.
        append_lines(log, over_capacity_lines(datetime.now(UTC) - timedelta(seconds=30), 30))
        wait_for(
            lambda: (
                (
                    client.get("/api/deployments").json()["deployments"][0][
                        "preemptions_in_history"
                    ]
                    or 0
                )
                > 0
            )
        )
        client.get("/api/dashboard/report.html")
        client.get("/api/dashboard/report.html")
        assert cache.builds == 2


def test_docs_are_local_and_the_schema_describes_the_responses(tmp_path: Path) -> None:
    with running_service(tmp_path / "state", "--log", f"{_log(tmp_path)}=chat") as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        docs = client.get("/docs")
        assert docs.status_code == 200
        # Nothing fetched from elsewhere (Swagger UI came from a CDN): no script at all.
        assert "<script" not in docs.text and "cdn" not in docs.text.lower()
        assert "default-src 'none'" in docs.headers["content-security-policy"]
        assert "/api/deployments/{name}" in docs.text and "openapi.json" in docs.text
        assert client.get("/redoc").status_code == 404
        spec = client.get("/openapi.json").json()
        paths = spec["paths"]
        metrics = paths["/metrics"]["get"]["responses"]["200"]["content"]
        assert list(metrics) == ["text/plain; version=0.0.4; charset=utf-8"]
        html = paths["/api/dashboard/report.html"]["get"]["responses"]["200"]["content"]
        assert list(html) == ["text/html"]

        def schema_ref(path: str) -> str:
            content = paths[path]["get"]["responses"]["200"]["content"]
            return str(content["application/json"]["schema"]["$ref"])

        assert schema_ref("/api/deployments").endswith("/DeploymentList")
        assert schema_ref("/api/deployments/{name}").endswith("/DeploymentDetail")
        assert "DeploymentDetail" in spec["components"]["schemas"]
        # The models describe what is really sent (extra fields are refused).
        DeploymentList.model_validate(client.get("/api/deployments").json())
        DeploymentDetail.model_validate(client.get("/api/deployments/chat").json())


def test_gzip_uploads_are_read_and_bombs_refused(tmp_path: Path) -> None:
    import gzip

    sample = (FIXTURES / "v0-over-capacity.log").read_bytes()
    with running_service(
        tmp_path / "state", "--log", f"{_log(tmp_path)}=chat", "--max-upload", "1MiB"
    ) as live:
        client = live.client()
        plain = client.post("/api/report", files={"log": ("prod.log", sample)}).json()
        packed = client.post("/api/report", files={"log": ("prod.log.gz", gzip.compress(sample))})
        assert packed.status_code == 200, packed.text
        body = packed.json()
        assert body["deployments"][0]["verdict"] == plain["deployments"][0]["verdict"]
        assert body["sources"][0]["path"] == "prod.log"  # the client's name, no temp path
        # 64 MiB of zeros is 64 KiB gzipped: under --max-upload, far over 16x it inflated.
        bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
        assert len(bomb) < 1024 * 1024
        refused = client.post("/api/report", files={"log": ("bomb.log.gz", bomb)})
        assert refused.status_code == 413, refused.text
        assert "once decompressed" in refused.json()["error"]["message"]
        assert refused.json()["error"]["message"].startswith("bomb.log.gz: ")
