"""Scraping a vLLM /metrics endpoint (a real HTTP server on 127.0.0.1): counter deltas with
restart detection, persisted across preemptscope restarts, model_name on the gauges."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.exporter.conftest import metric_value, running_service, wait_for

TEMPLATE = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="llama-3-8b"}} {value}
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="llama-3-8b"}} 0.97
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="llama-3-8b"}} 7
"""


class FakeVllm:
    """Serves TEMPLATE with a counter the test sets; counts the scrapes it answered."""

    def __init__(self) -> None:
        self.value = 0.0
        self.served = 0
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with fake.lock:
                    body = TEMPLATE.format(value=fake.value).encode()
                    fake.served += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def set(self, value: float) -> int:
        with self.lock:
            self.value = value
            return self.served


@contextmanager
def fake_vllm() -> Iterator[FakeVllm]:
    fake = FakeVllm()
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        fake.server.shutdown()
        fake.server.server_close()


def test_counter_deltas_resets_and_restarts(tmp_path: Path) -> None:
    state = tmp_path / "state"
    with fake_vllm() as vllm:

        def total(live: object) -> float | None:
            text = live.client().get("/metrics").text  # type: ignore[attr-defined]
            return metric_value(
                text, "preemptscope_preemptions_total", deployment="gpu0", source="metrics_counter"
            )

        def step(live: object, value: float, expected: float) -> None:
            served = vllm.set(value)
            wait_for(lambda: vllm.served >= served + 2)  # two scrapes saw the new value
            assert wait_for(lambda: total(live) == expected)

        argv: tuple[str, ...] = ("--scrape", f"{vllm.url}=gpu0", "--scrape-interval", "1s",
                                 "--window", "2s")  # fmt: skip
        # The timeout is a deadline for the whole scrape: room for a loaded test machine.
        argv += ("--scrape-timeout", "1s")
        vllm.set(100)  # preemptions before preemptscope started are not ours
        with running_service(state, *argv) as live:
            step(live, 100, 0)
            step(live, 130, 30)
            step(live, 5, 35)  # vLLM restarted: 5 new preemptions, not -125
            text = live.client().get("/metrics").text
            assert metric_value(text, "preemptscope_scrape_up", deployment="gpu0") == 1.0

            def waiting() -> float | None:
                # A window gauge: there once a window holding scrapes is complete.
                return metric_value(
                    live.client().get("/metrics").text,
                    "preemptscope_requests_waiting",
                    deployment="gpu0",
                    model_name="llama-3-8b",
                )

            assert wait_for(waiting) == 7.0
        vllm.set(12)  # preemptscope down: vLLM counted 7 more meanwhile
        with running_service(state, *argv) as live:
            step(live, 12, 42)
