"""A stand-in vLLM /metrics endpoint for the demo stack and the live tests.

`python -m preemptscope.exporter.demo_vllm --port 8000` serves two simulated vLLM 0.33
servers on one port, in vLLM's own exposition (prometheus_client, vLLM's metric names and
default bucket sets, `engine` and `model_name` labels):

- /overloaded/metrics: the KV cache full, a queue that grows, about one preemption a second
  (`vllm:num_preemptions_total`), preempted requests in the e2e tail;
- /healthy/metrics: KV at about a third, no queue, no preemption; every queue time in the
  first bucket (about 20 us), as a real idle-queue server shows it.

Time is the wall clock: the counters move as a real server's would between two scrapes, and
the same seed gives the same traffic. Nothing here is read by the analysis; it only stands
where a vLLM server would.
"""

from __future__ import annotations

import argparse
import math
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# vllm/v1/metrics/buckets.py defaults (docs: ../shared/reference/vllm-observability.md).
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120,
                           240, 480, 960, 1920, 7680)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5,
                7.5, 10, 20, 40, 80, 160, 640, 2560)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5,
               10, 20, 40, 80)  # fmt: skip
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class Profile:
    """How one simulated server behaves, per second of wall time."""

    requests_per_s: float
    preemptions_per_s: float
    kv_usage: tuple[float, float]  # low, high
    running: tuple[int, int]
    waiting_start: float
    waiting_growth_per_s: float
    e2e: tuple[float, float]  # typical e2e latency range, seconds
    preempted_e2e: tuple[float, float]  # e2e of a preempted request (the tail)
    queue: tuple[float, float]


OVERLOADED = Profile(
    requests_per_s=4.0,
    preemptions_per_s=1.0,
    kv_usage=(0.97, 1.0),
    running=(46, 48),
    waiting_start=8.0,
    waiting_growth_per_s=0.05,
    e2e=(2.0, 8.0),
    preempted_e2e=(25.0, 55.0),
    queue=(0.5, 6.0),
)
HEALTHY = Profile(
    requests_per_s=3.0,
    preemptions_per_s=0.0,
    kv_usage=(0.30, 0.38),
    running=(8, 12),
    waiting_start=0.0,
    waiting_growth_per_s=0.0,
    e2e=(1.0, 3.0),
    preempted_e2e=(1.0, 3.0),
    queue=(0.000015, 0.000025),
)


class SimulatedServer:
    """One vLLM server's metrics, advanced to the wall clock on every scrape."""

    def __init__(self, profile: Profile, *, seed: int, clock: float | None = None) -> None:
        self.profile = profile
        self.random = random.Random(seed)
        self.started = time.time() if clock is None else clock
        self.last = self.started
        self.lock = threading.Lock()
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["engine", "model_name"]
        r = self.registry
        self.running = Gauge("vllm:num_requests_running", "Running", labels, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Waiting", labels, registry=r)
        self.kv = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
            registry=r,
        )  # fmt: skip
        self.preemptions = Counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels,
            registry=r,
        )  # fmt: skip
        self.success = Counter(
            "vllm:request_success", "Count of successfully processed requests.",
            [*labels, "finished_reason"], registry=r,
        )  # fmt: skip
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
            labels, buckets=REQUEST_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.queue = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", labels,
            buckets=REQUEST_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            labels, buckets=TTFT_BUCKETS, registry=r,
        )  # fmt: skip
        self.itl = Histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            labels, buckets=ITL_BUCKETS, registry=r,
        )  # fmt: skip
        self.per_request = Histogram(
            "vllm:request_num_preemptions", "Number of preemptions per finished request.",
            labels, buckets=PREEMPTION_BUCKETS, registry=r,
        )  # fmt: skip
        info = Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            ["block_size", "engine", "gpu_memory_utilization", "num_gpu_blocks"], registry=r,
        )  # fmt: skip
        info.labels("16", "0", "0.9", "27608").set(1)
        self.labels = ("0", MODEL)
        # A real server exports every series from its start (a counter at 0, not absent).
        for family in (self.preemptions, self.e2e, self.queue, self.ttft, self.itl,
                       self.per_request):  # fmt: skip
            family.labels(*self.labels)
        self.preemption_debt = 0.0
        self.request_debt = 0.0
        self._set_gauges(self.started)

    def _set_gauges(self, now: float) -> None:
        p, rnd = self.profile, self.random
        self.kv.labels(*self.labels).set(round(rnd.uniform(*p.kv_usage), 4))
        self.running.labels(*self.labels).set(rnd.randint(*p.running))
        waiting = p.waiting_start + p.waiting_growth_per_s * (now - self.started)
        self.waiting.labels(*self.labels).set(math.floor(waiting))

    def advance(self, now: float | None = None) -> None:
        """Everything that happened since the last call, at the profile's rates."""
        at = time.time() if now is None else now
        with self.lock:
            elapsed = max(0.0, at - self.last)
            self.last = max(self.last, at)
            p, rnd = self.profile, self.random
            self.preemption_debt += p.preemptions_per_s * elapsed
            self.request_debt += p.requests_per_s * elapsed
            preempted = int(self.preemption_debt)
            self.preemption_debt -= preempted
            if preempted:
                self.preemptions.labels(*self.labels).inc(preempted)
            finished = int(self.request_debt)
            self.request_debt -= finished
            share = min(1.0, p.preemptions_per_s / p.requests_per_s) if p.requests_per_s else 0
            for _ in range(finished):
                hit = rnd.random() < share * 0.3  # some requests are preempted several times
                times = rnd.randint(1, 4) if hit else 0
                e2e = rnd.uniform(*(p.preempted_e2e if hit else p.e2e))
                self.e2e.labels(*self.labels).observe(e2e)
                self.queue.labels(*self.labels).observe(rnd.uniform(*p.queue))
                self.ttft.labels(*self.labels).observe(rnd.uniform(0.02, 0.09) * (8 if hit else 1))
                for _ in range(4):
                    self.itl.labels(*self.labels).observe(rnd.uniform(0.012, 0.03))
                self.per_request.labels(*self.labels).observe(times)
                reason = "length" if rnd.random() < 0.1 else "stop"
                self.success.labels(*self.labels, reason).inc()
            self._set_gauges(at)

    def exposition(self, now: float | None = None) -> bytes:
        self.advance(now)
        with self.lock:
            return generate_latest(self.registry)


def serve(port: int, host: str = "127.0.0.1", *, seed: int = 7) -> ThreadingHTTPServer:
    """A server (not yet serving) answering /overloaded/metrics and /healthy/metrics."""
    servers = {
        "/overloaded/metrics": SimulatedServer(OVERLOADED, seed=seed),
        "/healthy/metrics": SimulatedServer(HEALTHY, seed=seed + 1),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server = servers.get(self.path.split("?", 1)[0])
            if server is None:
                self.send_error(404, "try /overloaded/metrics or /healthy/metrics")
                return
            body = server.exposition()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass  # one line per scrape would drown the demo's own logs

    return ThreadingHTTPServer((host, port), Handler)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    httpd = serve(args.port, args.host, seed=args.seed)
    print(f"demo vLLM metrics on http://{args.host}:{httpd.server_address[1]}/", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


if __name__ == "__main__":
    main()
