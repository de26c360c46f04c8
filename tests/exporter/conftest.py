"""Shared helpers: a real uvicorn server on 127.0.0.1 (port 0) and vLLM-like log lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from preemptscope.exporter.service import Service

from preemptscope import settings as settings_mod
from preemptscope.commands.serve import build

PREEMPT = (
    "WARNING {ts} scheduler.py:1057] Sequence group cmpl-{rid} is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
    "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
    "provide more KV cache memory. total_num_cumulative_preemption={n}"
)
STATS = (
    "INFO {ts} metrics.py:467] Avg prompt throughput: {pt:.1f} tokens/s, Avg generation "
    "throughput: {gt:.1f} tokens/s, Running: {run} reqs, Swapped: 0 reqs, Pending: {pend} reqs, "
    "GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%."
)


def stamp(moment: datetime) -> str:
    """vLLM's V0 timestamp: month-day and time, no year, no zone."""
    return moment.astimezone(UTC).strftime("%m-%d %H:%M:%S")


def stats_line(moment: datetime, *, kv: float, running: int, pending: int) -> str:
    return STATS.format(ts=stamp(moment), pt=120.0, gt=900.0, run=running, pend=pending, kv=kv)


def preempt_line(moment: datetime, n: int) -> str:
    return PREEMPT.format(ts=stamp(moment), rid=f"{n:032x}", n=n)


def over_capacity_lines(
    start: datetime, seconds: int, *, step: int = 5, first: int = 1
) -> list[str]:
    """V0 stats at KV 99-100% with a growing queue, and every-50th preemption warnings."""
    lines, counter = [], first
    for i in range(0, seconds, step):
        moment = start + timedelta(seconds=i)
        lines.append(
            stats_line(moment, kv=99.0 + (i % 2) * 0.8, running=48 - i % 4, pending=20 + i)
        )
        lines.append(preempt_line(moment, counter))
        counter += 50
    return lines


def healthy_lines(start: datetime, seconds: int, *, step: int = 5) -> list[str]:
    return [
        stats_line(start + timedelta(seconds=i), kv=35.0, running=12, pending=0)
        for i in range(0, seconds, step)
    ]


def append_lines(path: Path, lines: list[str]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(line + "\n" for line in lines))


class LiveServer:
    def __init__(self, service: Service | None, app: Any) -> None:
        self.service = service
        self.app = app
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = ""

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not (self.server.started and self.server.servers):
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=20, **kwargs)


def serve_settings(state_dir: Path, *argv: str) -> settings_mod.ServeSettings:
    import argparse

    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser)
    args = parser.parse_args(["--state-dir", str(state_dir), *argv])
    return settings_mod.resolve(args, environ={})


@contextmanager
def running_service(state_dir: Path, *argv: str) -> Iterator[LiveServer]:
    """`preemptscope serve` as the CLI builds it, on 127.0.0.1 port 0."""
    service, app = build(serve_settings(state_dir, *argv))
    with LiveServer(service, app) as live:
        yield live


def wait_for(predicate: Any, timeout: float = 15.0, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def metric_value(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample in Prometheus text output, or None."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


def serve_process(
    *argv: str, env: dict[str, str] | None = None, drain: bool = False
) -> tuple[subprocess.Popen[str], str, list[str]]:
    """`python -m preemptscope serve *argv` as a real process; returns it, the URL it serves
    on (from its "serving on" line) and the stderr lines read so far. `drain`: read the rest
    of stderr in a thread, so a long run never blocks on a full pipe."""
    process = subprocess.Popen(
        [sys.executable, "-m", "preemptscope", "serve", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert process.stderr is not None and process.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(r"serving on (http://[\d.]+:\d+)", line)
        if match:
            if drain:
                threading.Thread(target=process.stderr.read, daemon=True).start()
                threading.Thread(target=process.stdout.read, daemon=True).start()
            return process, match.group(1), seen
    process.kill()
    raise AssertionError("serve did not start: " + "".join(seen))
