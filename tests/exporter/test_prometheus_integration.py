"""The real thing: Debian's prometheus scrapes `preemptscope serve`, which follows a log the
test writes; the shipped over-capacity alert (with short `for:`) fires, then resolves."""

from __future__ import annotations

import shutil
import socket
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.exporter.conftest import (
    append_lines,
    healthy_lines,
    over_capacity_lines,
    running_service,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus binary"),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Writer(threading.Thread):
    """Appends one V0 stats line (and, over capacity, a preemption warning) per second."""

    def __init__(self, path: Path, *, over: bool, first_counter: int = 1) -> None:
        super().__init__(daemon=True)
        self.path, self.over, self.counter = path, over, first_counter
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            now = datetime.now(UTC)
            if self.over:
                lines = over_capacity_lines(now, 1, first=self.counter)
                self.counter += 50
            else:
                lines = healthy_lines(now, 1)
            append_lines(self.path, lines)
            self.stop.wait(1.0)


def start_prometheus(
    tmp_path: Path, config: dict[str, Any]
) -> tuple[subprocess.Popen[bytes], httpx.Client]:
    """Debian's prometheus on 127.0.0.1 (a free port) with `config`; returns once ready."""
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.err").open("w"),
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5)

    def ready() -> bool:
        try:
            return client.get("/-/ready").status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(ready, timeout=30)
    except AssertionError:
        stop_process(proc)
        raise
    return proc, client


def stop_process(process: subprocess.Popen[Any]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def short_rules(directory: Path) -> Path:
    """The shipped rules with every `for:` and `keep_firing_for:` cut to 2s, so the test takes
    seconds."""
    rules = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "rules.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            for key in ("for", "keep_firing_for"):
                if key in rule:
                    rule[key] = "2s"
    path = directory / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    return path


def alerts(client: httpx.Client, name: str) -> list[dict[str, Any]]:
    body = client.get("/api/v1/alerts").json()
    return [a for a in body["data"]["alerts"] if a["labels"].get("alertname") == name]


def firing_alerts(client: httpx.Client) -> list[dict[str, Any]]:
    return [a for a in alerts(client, "PreemptscopeOverCapacity") if a["state"] == "firing"]


def query(client: httpx.Client, expr: str) -> list[dict[str, Any]]:
    body = client.get("/api/v1/query", params={"query": expr}).json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_over_capacity_alert_fires_then_resolves(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    # A minute already over capacity, then live lines every second.
    append_lines(log, over_capacity_lines(datetime.now(UTC) - timedelta(seconds=60), 60, step=2))
    argv = (
        "--log", f"{log}=chat", "--window", "10s", "--min-episode", "20s",
        "--resolve-after", "15s", "--poll-interval", "0.1", "--analysis-interval", "0.5s",
        "--history", "5m",
    )  # fmt: skip
    with running_service(tmp_path / "state", *argv) as live:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(short_rules(tmp_path))],
            "scrape_configs": [
                {
                    "job_name": "preemptscope",
                    "static_configs": [{"targets": [live.url.removeprefix("http://")]}],
                }
            ],
        }
        over = Writer(log, over=True, first_counter=1501)
        over.start()
        proc, prom = start_prometheus(tmp_path, config)
        try:
            firing = wait_for(
                lambda: [
                    a for a in alerts(prom, "PreemptscopeOverCapacity") if a["state"] == "firing"
                ],
                timeout=60,
                interval=0.5,
            )
            assert firing[0]["labels"]["deployment"] == "chat"
            # The values behind it, as Prometheus stored them.
            kv = query(prom, 'preemptscope_kv_cache_usage_max_ratio{deployment="chat"}')
            assert float(kv[0]["value"][1]) >= 0.98
            counted = query(
                prom,
                'preemptscope_preemptions_total{deployment="chat",source="v0_warning_counter"}',
            )
            assert float(counted[0]["value"][1]) >= 1501
            wait_for(
                lambda: (
                    (
                        r := query(
                            prom, 'deployment:preemptscope_preemptions:rate{deployment="chat"}'
                        )
                    )
                    and float(r[0]["value"][1]) > 1
                ),
                # The V0 source is read over 30 m (its counter moves in steps of 50) and
                # rate() divides by the window: 50/s written needs ~40 s of history.
                timeout=60,
                interval=0.5,
            )
            assert query(prom, 'up{job="preemptscope"}')[0]["value"][1] == "1"

            # Healthy phase: KV at 35 %, no queue, no preemption. The verdict must clear
            # (resolve_after past the last over-capacity window) and the alert resolve.
            over.stop.set()
            over.join(timeout=5)
            healthy = Writer(log, over=False)
            healthy.start()
            try:
                wait_for(
                    lambda: (
                        not [
                            a
                            for a in alerts(prom, "PreemptscopeOverCapacity")
                            if a["state"] == "firing"
                        ]
                    ),
                    timeout=60,
                    interval=0.5,
                )
                value = query(prom, 'preemptscope_over_capacity{deployment="chat"}')
                assert value[0]["value"][1] == "0"
                kv = query(prom, 'preemptscope_kv_cache_usage_max_ratio{deployment="chat"}')
                assert float(kv[0]["value"][1]) == pytest.approx(0.35)
            finally:
                healthy.stop.set()
                healthy.join(timeout=5)
        finally:
            over.stop.set()
            stop_process(proc)
