"""The Prometheus API client over real HTTP on 127.0.0.1: answers, errors, limits."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest
from preemptscope.ingest.promapi import (
    PromAuth,
    PromClient,
    PrometheusError,
    matchers,
    series_frame,
)

Handler = Callable[[BaseHTTPRequestHandler], None]


@contextmanager
def serving(handle: Handler) -> Iterator[str]:
    class Serve(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            handle(self)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def reply(request: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    request.send_response(status)
    request.send_header("Content-Type", "application/json")
    request.send_header("Content-Length", str(len(body)))
    for key, value in headers.items():
        request.send_header(key, value)
    request.end_headers()
    request.wfile.write(body)


def matrix(result: Sequence[object]) -> bytes:
    return json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}
    ).encode()


START = datetime(2026, 11, 2, tzinfo=UTC)


def test_raw_samples_become_metric_samples() -> None:
    t0 = START.timestamp()
    values = [[t0 + 15 * i, v] for i, v in enumerate(["0", "NaN", "+Inf", "-Inf", "1e+06"])]
    result = [
        {"metric": {"__name__": "vllm:num_preemptions_total", "pod": "p", "engine": "0",
                    "model_name": "m"}, "values": values},
        {"metric": {"__name__": "vllm:e2e_request_latency_seconds_bucket", "le": "+Inf",
                    "pod": "p"}, "values": values[:2]},
        {"metric": {"__name__": "vllm:e2e_request_latency_seconds_count", "pod": "p"},
         "values": []},
        {"metric": {"__name__": "vllm:gpu_cache_usage_perc", "pod": "p", "weird": 'a"values":[1'},
         "values": values[:1]},
    ]  # fmt: skip
    seen: list[dict[str, list[str]]] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        seen.append(parse_qs(urlparse(request.path).query))
        reply(request, 200, matrix(result))

    with serving(handle) as url, PromClient(url) as client:
        chunks = list(client.raw('{pod="p"}', START - timedelta(seconds=1), START))
    assert seen[0]["query"] == ['{pod="p"}[1000ms]']
    frame = series_frame(chunks, source="prom", deployment="d", drop={"pod"})
    counter = frame.filter(frame["metric"] == "num_preemptions")
    # Only the sample inside (start, end] is kept: chunks never overlap.
    assert counter["value"].to_list() == [0.0]
    assert counter["type"].to_list() == ["counter"]
    assert counter["engine"].to_list() == ["0"] and counter["model_name"].to_list() == ["m"]
    assert frame.filter(frame["metric"] == "e2e_request_latency_seconds")["le"].to_list() == [
        math.inf
    ]
    kv = frame.filter(frame["metric"] == "kv_cache_usage_perc")  # the old name, folded
    assert json.loads(kv["labels"].item()) == {"weird": 'a"values":[1'}


def test_special_values_survive() -> None:
    t0 = START.timestamp()
    values = [[t0 + i, v] for i, v in enumerate(["0.5", "NaN", "+Inf", "-Inf", "1e+06"], 1)]
    result = [{"metric": {"__name__": "vllm:num_requests_running"}, "values": values}]
    with serving(lambda r: reply(r, 200, matrix(result))) as url, PromClient(url) as client:
        (chunk,) = client.raw("{}", START, START + timedelta(seconds=10))
    got = chunk.samples["v"].to_list()
    assert got[0] == 0.5 and math.isnan(got[1]) and got[2:] == [math.inf, -math.inf, 1e6]


def test_errors_are_one_line() -> None:
    def handle(request: BaseHTTPRequestHandler) -> None:
        path = urlparse(request.path).path
        if path.startswith("/moved"):
            reply(request, 302, b"", Location="http://elsewhere.invalid/")
        elif path.startswith("/locked"):
            reply(request, 401, b"no")
        elif path.startswith("/bad"):
            body = {"status": "error", "errorType": "bad_data", "error": "parse error"}
            reply(request, 400, json.dumps(body).encode())
        elif path.startswith("/html"):
            reply(request, 200, b"<html>login</html>")
        elif path.startswith("/big"):
            reply(request, 200, b"x" * 200_000)
        elif path.startswith("/slow"):
            request.send_response(200)
            request.send_header("Content-Length", "1000")
            request.end_headers()
            for _ in range(20):
                request.wfile.write(b" " * 10)
                request.wfile.flush()
                time.sleep(0.1)

    with serving(handle) as url:
        end = START + timedelta(hours=1)
        cases = {
            "/moved": "redirect to http://elsewhere.invalid/ (not followed",
            "/locked": "HTTP 401",
            "/bad": "HTTP 400: bad_data: parse error",
            "/html": "did not answer as the Prometheus API does",
            "/big": "answer over 0 MiB",
            "/slow": "timed out after 0.5 s",
        }
        for path, message in cases.items():
            client = PromClient(url + path, timeout=0.5, max_bytes=100_000)
            with client, pytest.raises(PrometheusError) as caught:
                client.series(["{}"], START, end)
            assert message in str(caught.value), (path, str(caught.value))
            assert "\n" not in str(caught.value)


def test_auth_headers() -> None:
    seen: list[str | None] = []

    def handle(request: BaseHTTPRequestHandler) -> None:
        seen.append(request.headers.get("Authorization"))
        reply(request, 200, json.dumps({"status": "success", "data": []}).encode())

    with serving(handle) as url:
        with PromClient(url, auth=PromAuth(token="t0k")) as client:
            client.series(["{}"], START, START + timedelta(hours=1))
        with PromClient(url, auth=PromAuth(username="u", password="p")) as client:
            client.series(["{}"], START, START + timedelta(hours=1))
    assert seen == ["Bearer t0k", "Basic dTpw"]


def test_unreachable_and_bad_urls() -> None:
    with serving(lambda r: None) as url:
        pass  # the port is closed again
    with PromClient(url) as client, pytest.raises(PrometheusError, match="cannot connect"):
        client.series(["{}"], START, START + timedelta(hours=1))
    with pytest.raises(PrometheusError, match="http:// or https://"):
        PromClient("localhost:9090")
    with pytest.raises(PrometheusError, match="CA file not found"):
        PromClient("https://127.0.0.1:1", auth=PromAuth(ca_file="/nonexistent.pem"))


def test_selector_matchers() -> None:
    assert matchers('{namespace="llm"}') == 'namespace="llm"'
    assert matchers('namespace="llm",') == 'namespace="llm"'
    assert matchers(None) == ""
    with pytest.raises(PrometheusError, match="expected"):
        matchers('{namespace="llm"')
