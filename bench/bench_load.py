"""Load and follow-latency benchmark of `preemptscope serve` (loopback only, bounded in time).

    python bench/bench_load.py [--clients 100] [--load-seconds 60] [--follow-seconds 30]

Starts `preemptscope serve` as a subprocess on 127.0.0.1 (a free port) following a temp log,
then measures:
1. follow phase: a writer appends `--rate` lines/s (a realistic V0 mix: stats lines, request
   lines, access lines, preemption warnings); the service's CPU (utime+stime from /proc) and
   the latency from a line's write to `preemptscope_log_lines_read_total` counting it;
2. load phase: `--clients` concurrent clients for `--load-seconds` on /metrics,
   /api/deployments and /api/deployments/{name} (round robin), while lines keep arriving;
   errors and latency percentiles per endpoint.
Prints a JSON summary and the Markdown table used in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int, thread: str | None = None) -> float:
    """utime + stime of the process, or of its OS threads named `thread` (the service names
    its follow and analysis threads ps-follow / ps-analysis)."""
    if thread is None:
        stats = [Path(f"/proc/{pid}/stat")]
    else:
        stats = [
            task / "stat"
            for task in Path(f"/proc/{pid}/task").iterdir()
            if (task / "comm").read_text().strip() == thread
        ]
    total = 0
    for stat in stats:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def vllm_lines(number: int, moment: datetime) -> list[str]:
    """Ten lines of a busy V0 server with per-request logging: received/added/finished and
    access lines for ~3 requests; every 500th group a stats line, every 100th a preemption
    warning (V0 prints every 50th preemption), as a loaded server does at 1,000 lines/s."""
    ts = moment.strftime("%m-%d %H:%M:%S")
    lines: list[str] = []
    if number % 500 == 0:
        lines.append(
            f"INFO {ts} metrics.py:467] Avg prompt throughput: 812.4 tokens/s, Avg generation "
            f"throughput: 1510.7 tokens/s, Running: 64 reqs, Swapped: 0 reqs, Pending: 17 reqs, "
            f"GPU KV cache usage: 98.7%, CPU KV cache usage: 0.0%."
        )
    if number % 100 == 0:
        lines.append(
            f"WARNING {ts} scheduler.py:1057] Sequence group cmpl-{number:032x} is preempted by "
            "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can "
            "affect the end-to-end performance. Increase gpu_memory_utilization or "
            "tensor_parallel_size to provide more KV cache memory. "
            f"total_num_cumulative_preemption={number // 2 + 1}"
        )
    for i in range(3):
        rid = f"cmpl-{number:028x}{i:04x}"
        lines.append(
            f"INFO {ts} logger.py:37] Received request {rid}: prompt: 'Summarise the report', "
            "params: SamplingParams(n=1, temperature=0.7, max_tokens=256), prompt_token_ids: None."
        )
        lines.append(f"INFO {ts} async_llm_engine.py:208] Added request {rid}.")
        lines.append(f"INFO {ts} async_llm_engine.py:180] Finished request {rid}.")
    lines.append('INFO:     127.0.0.1:40000 - "POST /v1/completions HTTP/1.1" 200 OK')
    return lines


class Writer(threading.Thread):
    """Appends `rate` lines/s in 50-ms batches; remembers (write time, cumulative lines)."""

    def __init__(self, path: Path, rate: float) -> None:
        super().__init__(daemon=True)
        self.path, self.rate = path, rate
        self.stop = threading.Event()
        self.marks: list[tuple[float, int]] = []
        self.written = 0

    def run(self) -> None:
        batch_every = 0.05
        number = 0
        pending: list[str] = []
        with self.path.open("a", encoding="utf-8") as handle:
            next_at = time.monotonic()
            while not self.stop.is_set():
                want = round(self.rate * batch_every)
                while len(pending) < want:
                    pending += vllm_lines(number, datetime.now(UTC))
                    number += 1
                batch, pending = pending[:want], pending[want:]
                handle.write("".join(line + "\n" for line in batch))
                handle.flush()
                self.written += len(batch)
                self.marks.append((time.monotonic(), self.written))
                next_at += batch_every
                time.sleep(max(0.0, next_at - time.monotonic()))


def lines_read(client: httpx.Client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("preemptscope_log_lines_read_total{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def follow_phase(url: str, pid: int, writer: Writer, seconds: float) -> dict[str, Any]:
    """CPU of the service and line->/metrics latency while the writer runs."""
    client = httpx.Client(base_url=url, timeout=10)
    observed: list[tuple[float, float]] = []
    names = (None, "ps-follow", "ps-analysis")
    cpu0, wall0 = {n: cpu_seconds(pid, n) for n in names}, time.monotonic()
    deadline = wall0 + seconds
    while time.monotonic() < deadline:
        observed.append((time.monotonic(), lines_read(client)))
        time.sleep(0.02)
    wall = time.monotonic() - wall0
    cpu = {n or "process": (cpu_seconds(pid, n) - cpu0[n]) / wall for n in names}
    latencies = []
    j = 0
    marks = [m for m in writer.marks if wall0 + 1 <= m[0] <= deadline - 2]
    for written_at, total in marks:
        while j < len(observed) and (observed[j][0] < written_at or observed[j][1] < total):
            j += 1
        if j < len(observed):
            latencies.append(observed[j][0] - written_at)
    return {
        "rate_lines_per_s": writer.rate,
        "cpu_fraction_of_one_core": cpu,
        "lines_written": writer.written,
        "follow_latency_s": {
            "samples": len(latencies),
            "p50": percentile(latencies, 50),
            "p99": percentile(latencies, 99),
            "max": max(latencies) if latencies else None,
        },
    }


class Connection:
    """A minimal HTTP/1.1 keep-alive client on asyncio streams: the load generator must cost
    far less than the server it loads (httpx's pool alone saturated a core at 100 clients)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str) -> int:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)
        return status

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()


async def load_phase(
    url: str, clients: int, seconds: float, name: str, per_client_rate: float | None
) -> dict[str, Any]:
    """`clients` concurrent keep-alive clients on three routes. Open loop (`per_client_rate`
    requests/s each, like dashboards and Prometheus servers polling) measures latency at a
    given load; closed loop (None: each client sends its next request as soon as the last
    returns) measures saturation throughput, where latency is mostly queueing."""
    host, port = url.removeprefix("http://").split(":")
    paths = ["/metrics", "/api/deployments", f"/api/deployments/{name}"]
    timings: dict[str, list[float]] = {p: [] for p in paths}
    errors: dict[str, int] = dict.fromkeys(paths, 0)
    deadline = time.monotonic() + seconds

    async def worker(offset: int) -> None:
        connection = Connection(host, int(port))
        i = offset
        if per_client_rate:  # spread the clients' first requests over one period
            await asyncio.sleep(offset / clients / per_client_rate)
        next_at = time.monotonic()
        try:
            while time.monotonic() < deadline:
                if per_client_rate:
                    next_at += 1.0 / per_client_rate
                path = paths[i % len(paths)]
                i += 1
                started = time.perf_counter()
                try:
                    ok = await connection.get(path) == 200
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    ok = False
                    await connection.close()
                    connection = Connection(host, int(port))
                timings[path].append(time.perf_counter() - started)
                if not ok:
                    errors[path] += 1
                if per_client_rate:
                    await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        finally:
            await connection.close()

    await asyncio.gather(*(worker(k) for k in range(clients)))
    return {
        path: {
            "requests": len(values),
            "errors": errors[path],
            "per_s": len(values) / seconds,
            "p50_ms": percentile(values, 50) * 1000,
            "p99_ms": percentile(values, 99) * 1000,
        }
        for path, values in timings.items()
    }


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("preemptscope serve did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--follow-seconds", type=float, default=30.0)
    parser.add_argument("--rate", type=float, default=1000.0, help="lines/s in the follow phase")
    parser.add_argument("--load-rate", type=float, default=100.0, help="lines/s during load")
    parser.add_argument(
        "--per-client-rate", type=float, default=1.0, help="requests/s per client (open loop)"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="preemptscope-bench-") as tmp:
        log = Path(tmp) / "vllm.log"
        log.touch()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        command = [
            sys.executable, "-m", "preemptscope", "serve", "--log", f"{log}=bench",
            "--state-dir", str(Path(tmp) / "state"), "--port", str(port),
            "--log-level", "warning",
        ]  # fmt: skip
        server = subprocess.Popen(command)
        try:
            probe = httpx.Client(base_url=url, timeout=5)
            wait_until(lambda: probe.get("/readyz").status_code == 200, 60)
            writer = Writer(log, args.rate)
            writer.start()
            follow = follow_phase(url, server.pid, writer, args.follow_seconds)
            writer.rate = args.load_rate
            rate = args.per_client_rate
            load = asyncio.run(load_phase(url, args.clients, args.load_seconds, "bench", rate))
            saturation = asyncio.run(
                load_phase(url, args.clients, args.load_seconds, "bench", None)
            )
            writer.stop.set()
            writer.join(timeout=5)
        finally:
            server.terminate()
            server.wait(timeout=30)
    summary = {
        "clients": args.clients,
        "load_seconds": args.load_seconds,
        "follow": follow,
        "load_open_loop": {"per_client_rate": args.per_client_rate, "routes": load},
        "load_closed_loop": saturation,
        "cpus": os.cpu_count(),
    }
    print(json.dumps(summary, indent=2))
    print()
    print("| load | endpoint | requests | errors | req/s | p50 | p99 |")
    print("|---|---|---|---|---|---|---|")
    for label, rows in (
        (f"{args.clients} clients x {args.per_client_rate:g} req/s", load),
        (f"{args.clients} clients, closed loop", saturation),
    ):
        for path, row in rows.items():
            print(
                f"| {label} | `{path}` | {row['requests']} | {row['errors']} "
                f"| {row['per_s']:.0f} | {row['p50_ms']:.1f} ms | {row['p99_ms']:.1f} ms |"
            )
    lat = follow["follow_latency_s"]
    cpu = follow["cpu_fraction_of_one_core"]
    print(
        f"\nfollow at {follow['rate_lines_per_s']:.0f} lines/s: CPU (share of one core) "
        f"follower {cpu['ps-follow'] * 100:.1f} %, analysis {cpu['ps-analysis'] * 100:.1f} %, "
        f"whole process {cpu['process'] * 100:.1f} %; line -> /metrics "
        f"p50 {lat['p50'] * 1000:.0f} ms, p99 {lat['p99'] * 1000:.0f} ms "
        f"({lat['samples']} samples)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
