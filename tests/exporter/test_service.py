"""The live service end to end over real HTTP on 127.0.0.1: /metrics, API, errors, auth."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.exporter.conftest import (
    append_lines,
    healthy_lines,
    metric_value,
    over_capacity_lines,
    running_service,
    wait_for,
)

TOKEN = "s3cret-token-0123456789"
V0 = "v0_warning_counter"
FIXTURES = Path(__file__).parent / "fixtures"


def test_metrics_follow_a_log_and_pass_promtool(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    start = datetime.now(UTC) - timedelta(minutes=4)
    append_lines(log, over_capacity_lines(start, 240))  # 48 stats + 48 warnings
    with running_service(
        tmp_path / "state", "--log", f"{log}=chat", "--poll-interval", "0.05"
    ) as live:
        client = live.client()
        text = wait_for(
            lambda: (
                (t := client.get("/metrics").text)
                and metric_value(t, "preemptscope_log_lines_read_total", deployment="chat") == 96
                and t
            )
        )
        # 48 warnings at 1, 51, ..., 2351: the V0 counter is a lower bound of 2351.
        assert (
            metric_value(
                text,
                "preemptscope_preemptions_total",
                deployment="chat",
                source="v0_warning_counter",
            )
            == 2351
        )
        over = wait_for(
            lambda: (
                metric_value(
                    client.get("/metrics").text, "preemptscope_over_capacity", deployment="chat"
                )
                == 1.0
            )
        )
        assert over
        text = client.get("/metrics").text
        assert metric_value(
            text, "preemptscope_kv_cache_usage_max_ratio", deployment="chat"
        ) == pytest.approx(0.998)
        response = client.get("/metrics")
        assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    if shutil.which("promtool") is None:
        pytest.skip("promtool not installed")
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "" and check.stderr.strip() == ""


def test_api_shapes_and_errors(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append_lines(log, healthy_lines(datetime.now(UTC) - timedelta(minutes=3), 180))
    with running_service(tmp_path / "state", "--log", f"{log}=chat") as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        assert client.get("/healthz").json() == {"status": "ok"}
        listing = wait_for(
            lambda: (
                (r := client.get("/api/deployments").json())["deployments"][0]["totals"]["lines"]
                == 36
                and r
            )
        )
        assert [d["name"] for d in listing["deployments"]] == ["chat"]
        one = client.get("/api/deployments/chat").json()
        for key in ("verdict", "windows", "advice", "preemptions", "capacity", "live"):
            assert key in one
        assert one["verdict"]["state"] in ("ok", "insufficient_data")
        for response, status in (
            (client.get("/api/deployments/nope"), 404),
            (client.get("/no/such/route"), 404),
            (client.delete("/api/deployments"), 405),
            (client.post("/api/report", content=b"x", headers={"content-type": "text/plain"}), 415),
            (client.post("/api/report", files={"other": ("a.log", b"x")}), 422),
        ):
            assert response.status_code == status
            body = response.json()
            assert set(body) == {"error"}
            assert body["error"]["status"] == status
            assert body["error"]["message"]
        assert "nope" in client.get("/api/deployments/nope").json()["error"]["message"]
        spec = client.get("/openapi.json").json()
        assert {"/api/deployments", "/api/deployments/{name}", "/api/report", "/metrics"} <= set(
            spec["paths"]
        )


def test_report_upload_matches_cli_and_limits(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    sample = (FIXTURES / "v0-over-capacity.log").read_bytes()
    with running_service(tmp_path / "state", "--log", str(log), "--max-upload", "200KiB") as live:
        client = live.client()
        response = client.post("/api/report", files={"log": ("prod.log", sample)})
        assert response.status_code == 200, response.text
        body = response.json()
        assert [d["name"] for d in body["deployments"]] == ["prod"]
        assert body["sources"][0]["path"] == "prod.log"  # never our temp path
        # Same JSON as `preemptscope report --json` on the same file (but generated_at/paths).
        cli = subprocess.run(
            ["preemptscope", "report", "--json", f"{FIXTURES / 'v0-over-capacity.log'}=prod"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert cli.returncode == 0, cli.stderr
        import json

        expected = json.loads(cli.stdout)
        assert body["deployments"][0]["verdict"] == expected["deployments"][0]["verdict"]
        assert body["deployments"][0]["windows"] == expected["deployments"][0]["windows"]
        big = client.post("/api/report", files={"log": ("big.log", b"x" * 300_000)})
        assert big.status_code == 413
        assert "limit" in big.json()["error"]["message"]

        # A streamed (chunked) body without Content-Length is counted as it arrives.
        def stream() -> Iterator[bytes]:
            yield b'--x\r\nContent-Disposition: form-data; name="log"; filename="s.log"\r\n\r\n'
            for _ in range(30):
                yield b"y" * 10_000

        chunked = client.post(
            "/api/report",
            content=stream(),
            headers={"content-type": "multipart/form-data; boundary=x"},
        )
        assert chunked.status_code == 413
        assert "content-length" not in chunked.request.headers
        binary = client.post("/api/report", files={"log": ("a.bin", b"\x00\x01\x02" * 10)})
        assert binary.status_code == 415
        assert "binary" in binary.json()["error"]["message"]


def test_bearer_token_guards_api_and_optionally_metrics(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    with running_service(tmp_path / "s1", "--log", str(log), "--token", TOKEN) as live:
        client = live.client()
        wait_for(lambda: client.get("/readyz").status_code == 200)
        denied = client.get("/api/deployments")
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "unauthorized"
        assert "Bearer" in denied.headers["www-authenticate"]
        assert (
            client.get(
                "/api/deployments", headers={"Authorization": "Bearer wrong-token-000000"}
            ).status_code
            == 401
        )
        ok = client.get("/api/deployments", headers={"Authorization": f"Bearer {TOKEN}"})
        assert ok.status_code == 200
        assert client.get("/api/deployments", auth=("any", TOKEN)).status_code == 200  # browsers
        assert client.get("/metrics").status_code == 200  # open unless --protect-metrics
    with running_service(
        tmp_path / "s2", "--log", str(log), "--token", TOKEN, "--protect-metrics"
    ) as live:
        client = live.client()
        denied = client.get("/metrics")
        assert denied.status_code == 401
        # Opened by hand in a browser, /metrics offers the Basic login (token as password).
        assert "Basic" in denied.headers["www-authenticate"]
        assert client.get("/metrics", auth=("any", TOKEN)).status_code == 200
        assert (
            client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
        )
        assert client.get("/healthz").status_code == 200


def test_counters_stay_monotonic_across_restarts(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    start = datetime.now(UTC) - timedelta(minutes=2)
    append_lines(log, over_capacity_lines(start, 60))  # counters 1..551
    state = tmp_path / "state"

    def read(live: object) -> tuple[float | None, float | None]:
        text = live.client().get("/metrics").text  # type: ignore[attr-defined]
        return (
            metric_value(text, "preemptscope_log_lines_read_total", deployment="vllm"),
            metric_value(
                text,
                "preemptscope_preemptions_total",
                deployment="vllm",
                source="v0_warning_counter",
            ),
        )

    with running_service(state, "--log", str(log), "--poll-interval", "0.05") as live:
        assert wait_for(lambda: read(live) == (24.0, 551.0))
    # While down: vLLM restarts (its counter starts again at 1) and keeps logging.
    append_lines(log, over_capacity_lines(start + timedelta(seconds=60), 30, first=1))  # 1..251
    with running_service(state, "--log", str(log), "--poll-interval", "0.05") as live:
        # Nothing counted twice, nothing lost, and the reset is not a negative step.
        assert wait_for(lambda: read(live) == (36.0, 551.0 + 251.0))


def test_scrape_target_down_is_reported_not_fatal(tmp_path: Path) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/metrics"
    with running_service(
        tmp_path / "state",
        "--scrape",
        f"{dead}=gone",
        "--scrape-interval",
        "0.3s",
        "--scrape-timeout",
        "0.2s",
    ) as live:
        client = live.client()
        text = wait_for(
            lambda: (
                (t := client.get("/metrics").text)
                and (metric_value(t, "preemptscope_scrapes_total", deployment="gone") or 0) >= 2
                and t
            )
        )
        assert metric_value(text, "preemptscope_scrape_up", deployment="gone") == 0.0
        failures = metric_value(text, "preemptscope_scrape_failures_total", deployment="gone")
        assert (failures or 0) >= 2
        assert client.get("/healthz").status_code == 200
        detail = client.get("/api/deployments/gone").json()
        assert detail["live"]["scrapes"][0]["up"] is False
        assert detail["live"]["scrapes"][0]["last_error"]


def test_not_ready_and_internal_errors_use_the_error_shape() -> None:
    from preemptscope.exporter.app import create_app
    from preemptscope.exporter.live import Snapshot

    from tests.exporter.conftest import LiveServer

    empty = Snapshot(None, {}, {}, None, None, {})
    broken = {"on": False}

    def snapshot() -> Snapshot:
        if broken["on"]:
            raise RuntimeError("boom")
        return empty

    app = create_app(snapshot, is_ready=lambda: False)
    with LiveServer(None, app) as live:
        client = live.client()
        for path in ("/readyz", "/api/deployments"):
            response = client.get(path)
            assert response.status_code == 503
            assert response.json()["error"]["code"] == "not_ready"
        broken["on"] = True
        crash = client.get("/api/deployments")
        assert crash.status_code == 500
        assert crash.json() == {
            "error": {
                "status": 500,
                "code": "internal_error",
                "message": "internal error; see the service log",
                "detail": None,
            }
        }
        assert "boom" not in crash.text  # no internals leak to clients
