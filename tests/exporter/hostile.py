"""Hostile and friendly /metrics targets on 127.0.0.1 (real HTTP, a thread per connection)."""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

METRICS = (
    "# HELP vllm:num_requests_running Number of requests running.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    'vllm:num_requests_running{model_name="m"} 3.0\n'
)


class Target:
    """One HTTP server; `hits` counts requests per path."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.hits: dict[str, int] = {}
        self.stop = threading.Event()
        target = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                target.hits[self.path] = target.hits.get(self.path, 0) + 1
                route = target.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                route(self, target)

            def log_message(self, *args: Any) -> None:  # quiet test output
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)


@contextmanager
def serving(routes: dict[str, Any]) -> Iterator[Target]:
    target = Target(routes)
    target.thread.start()
    try:
        yield target
    finally:
        target.stop.set()
        target.server.shutdown()
        target.server.server_close()


def metrics(handler: BaseHTTPRequestHandler, target: Target) -> None:
    body = METRICS.encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain; version=0.0.4")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def gzip_bomb(size: int) -> Any:
    """A gzip body of `size` zero bytes (about size/1000 on the wire)."""
    payload = gzip.compress(b"\0" * size, compresslevel=9)

    def route(handler: BaseHTTPRequestHandler, target: Target) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)

    return route


def redirect_to(location: str) -> Any:
    def route(handler: BaseHTTPRequestHandler, target: Target) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


def trickle(every_s: float) -> Any:
    """Headers at once, then one byte of a never-ending body every `every_s` seconds."""

    def route(handler: BaseHTTPRequestHandler, target: Target) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain; version=0.0.4")
        handler.end_headers()
        handler.wfile.flush()
        try:
            while not target.stop.wait(every_s):
                handler.wfile.write(b"#")
                handler.wfile.flush()
        except OSError:  # the scraper hung up
            return

    return route


def wait_until(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    return predicate()
