"""kill -9 and restart: `preemptscope serve` as a real process, a followed log and two scraped
(demo) vLLM servers over real HTTP on 127.0.0.1. The verdict and the window gauges after the
restart are what they were before it: the history is in the state directory."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from preemptscope.exporter import demo_vllm
from preemptscope.exporter.history import HistoryError, HistoryJournal, decode, encode

from tests.exporter.conftest import (
    append_lines,
    metric_value,
    over_capacity_lines,
    running_service,
    serve_process,
    wait_for,
)
from tests.exporter.test_prometheus_integration import (
    PROMETHEUS,
    ROOT,
    alerts,
    free_port,
    query,
    start_prometheus,
    stop_process,
)

pytestmark = pytest.mark.slow


@contextmanager
def demo_server() -> Iterator[str]:
    httpd = demo_vllm.serve(0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def start_serve(*argv: str) -> tuple[subprocess.Popen[str], str]:
    process, url, _ = serve_process("--port", "0", *argv, drain=True)
    return process, url


def first_ready(url: str) -> tuple[str, dict[str, Any]]:
    """/metrics and /api/deployments as first served once /readyz says ready."""
    with httpx.Client(base_url=url, timeout=10) as client:
        wait_for(lambda: client.get("/readyz").status_code == 200, timeout=30, interval=0.05)
        return client.get("/metrics").text, client.get("/api/deployments").json()


def verdicts(listing: dict[str, Any]) -> dict[str, str]:
    return {d["name"]: d["verdict"] for d in listing["deployments"]}


def deployment(url: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{url}/api/deployments/{name}", timeout=10).json()
    return body


def settled_windows(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Windows with data the served analysis calls complete: every input of the deployment
    was read past their end (its `complete_before`, else the analysis time)."""
    cuts = body["parameters"]["complete_before"]
    settled = datetime.fromisoformat(cuts.get(body["name"], body["generated_at"]))
    return [
        w
        for w in body["windows"]
        if (w["samples"] or w["preemptions"]) and datetime.fromisoformat(w["end"]) <= settled
    ]


def windows(url: str, name: str) -> list[dict[str, Any]]:
    return [w for w in deployment(url, name)["windows"] if w["samples"] or w["preemptions"]]


class LogWriter(threading.Thread):
    def __init__(self, path: Path) -> None:
        super().__init__(daemon=True)
        self.path, self.counter = path, 5001
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            append_lines(self.path, over_capacity_lines(datetime.now(UTC), 1, first=self.counter))
            self.counter += 50
            self.stop.wait(1.0)


def test_kill_9_keeps_the_verdict_and_the_window_gauges(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append_lines(log, over_capacity_lines(datetime.now(UTC) - timedelta(seconds=40), 40, step=2))
    writer = LogWriter(log)
    writer.start()
    with demo_server() as fake:
        argv = (
            "--state-dir", str(tmp_path / "state"), "--log", f"{log}=logged",
            "--scrape", f"{fake}/overloaded/metrics=over",
            "--scrape", f"{fake}/healthy/metrics=ok",
            "--scrape-interval", "1s", "--window", "10s", "--min-episode", "20s",
            "--resolve-after", "30s", "--history", "5m", "--poll-interval", "0.1",
        )  # fmt: skip
        process, url = start_serve(*argv)
        try:
            with httpx.Client(base_url=url, timeout=10) as client:

                def over_for_both() -> bool:
                    text = client.get("/metrics").text
                    return all(
                        metric_value(text, "preemptscope_over_capacity", deployment=name) == 1.0
                        for name in ("over", "logged")
                    )

                wait_for(over_for_both, timeout=90, interval=0.5)
                served: dict[str, dict[str, Any]] = {}

                def two_settled_each() -> bool:
                    served.update({n: deployment(url, n) for n in ("over", "logged", "ok")})
                    return all(len(settled_windows(body)) >= 2 for body in served.values())

                wait_for(two_settled_each, timeout=60, interval=0.5)
                time.sleep(1.5)  # a checkpoint after the latest scrape
                before = {name: settled_windows(body) for name, body in served.items()}
                listing = client.get("/api/deployments").json()
            # What came in after the last checkpoint (at most a second or two before the
            # kill) is not in the history; the windows compared below ended well before.
            time.sleep(3.0)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            assert verdicts(listing) == {
                "logged": "over_capacity", "over": "over_capacity", "ok": "ok",
            }  # fmt: skip

            process, url = start_serve(*argv)
            text, after_listing = first_ready(url)
            # The first answer after the restart already says what the last run said.
            assert verdicts(after_listing) == verdicts(listing)
            for name, expected in (("over", 1.0), ("logged", 1.0), ("ok", 0.0)):
                assert metric_value(text, "preemptscope_over_capacity", deployment=name) == (
                    expected
                )
                counted = metric_value(text, "preemptscope_window_preemptions", deployment=name)
                assert counted is not None, name
            # Every window that had ended before the kill reads the same after the restart.
            for name, ended in before.items():
                new = {w["start"]: w for w in windows(url, name)}
                assert len(ended) >= 2, name
                for window in ended:
                    again = new[window["start"]]
                    for key in ("preemptions", "kv_usage_max", "waiting_max", "over_capacity"):
                        assert again[key] == window[key], (name, window["start"], key)
        finally:
            writer.stop.set()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_damaged_segment_is_refused_with_its_name(tmp_path: Path) -> None:
    """Damage from outside reads as one reason naming the file (the service then logs it once
    and starts with the totals of its checkpoint: the history fills again)."""
    journal = HistoryJournal(tmp_path)
    journal.write(1, demo_segment())
    assert [len(s.metrics) for s in journal.read([1])] == [1]
    journal.path(1).write_bytes(b"PSHIST1\n" + (10**6).to_bytes(8, "big") + b"{")
    with pytest.raises(HistoryError, match=r"segment-000000000001\.bin: damaged segment"):
        journal.read([1])


def demo_segment() -> Any:
    from preemptscope.exporter.history import HistorySegment
    from preemptscope.ingest.metrics import parse_metrics_text

    server = demo_vllm.SimulatedServer(demo_vllm.OVERLOADED, seed=1, clock=0.0)
    samples = parse_metrics_text(
        server.exposition(30.0).decode(), timestamp=datetime.now(UTC), source="demo", deployment="x"
    )
    segment = HistorySegment(metrics=[("x", samples)])
    again = decode(encode(segment))
    assert again.metrics[0][1].equals(samples)
    return segment


def test_a_service_with_a_damaged_history_starts_with_its_totals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    HistoryJournal(state).path(7).parent.mkdir()
    HistoryJournal(state).path(7).write_bytes(b"not a segment")
    totals = {"deployments": {"over": {"lines": 0, "preemptions": {"metrics_counter": 41}}}}
    checkpoint = {"version": 1, "followers": {}, "totals": totals, "history": {"segments": [7]}}
    (state / "checkpoint.json").write_text(json.dumps(checkpoint))
    with demo_server() as fake, caplog.at_level("WARNING"):
        argv = ("--scrape", f"{fake}/overloaded/metrics=over", "--scrape-interval", "1s")
        with running_service(state, *argv) as live, live.client() as client:
            wait_for(lambda: client.get("/readyz").status_code == 200)
            text = client.get("/metrics").text
            counted = metric_value(
                text, "preemptscope_preemptions_total", deployment="over", source="metrics_counter"
            )
            assert counted is not None and counted >= 41
    warned = [r.getMessage() for r in caplog.records if "history of the last run" in r.getMessage()]
    assert len(warned) == 1 and "segment-000000000007.bin" in warned[0]


@pytest.mark.integration
@pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus binary")
def test_the_alert_stays_firing_through_kill_9_with_a_real_prometheus(tmp_path: Path) -> None:
    """Issue 25: after a restart the gauge read 0 and the alert resolved. Debian's Prometheus
    scrapes serve (on one port across the restart) every second with the shipped rules: every
    sample of preemptscope_over_capacity after the restart is 1, and the alert that fired
    before is the same alert after (its activeAt unchanged)."""
    port = free_port()
    with demo_server() as fake:
        argv = (
            "--state-dir", str(tmp_path / "state"), "--port", str(port),
            "--scrape", f"{fake}/overloaded/metrics=over", "--scrape-interval", "1s",
            "--window", "5s", "--min-episode", "15s",
        )  # fmt: skip
        process, url = start_serve(*argv)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(ROOT / "dashboards" / "prometheus" / "rules.yml")],
            "scrape_configs": [
                {"job_name": "preemptscope", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            ],
        }
        try:
            prom, client = start_prometheus(tmp_path, config)
        except BaseException:
            process.kill()
            raise
        try:

            def firing() -> list[dict[str, Any]]:
                return [
                    a for a in alerts(client, "PreemptscopeOverCapacity") if a["state"] == "firing"
                ]

            before = wait_for(firing, timeout=90, interval=0.5)
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
            killed = time.time()
            process, url = start_serve(*argv)
            first_ready(url)
            # Prometheus scrapes the restarted service for a while.
            wait_for(
                lambda: query(
                    client,
                    f'timestamp(preemptscope_over_capacity{{deployment="over"}}) > {killed + 3}',
                ),
                timeout=30,
                interval=0.5,
            )
            since = max(2, int(time.time() - killed))
            lowest = query(
                client, f'min_over_time(preemptscope_over_capacity{{deployment="over"}}[{since}s])'
            )
            assert float(lowest[0]["value"][1]) == 1.0
            after = firing()
            assert [a["activeAt"] for a in after] == [a["activeAt"] for a in before]
        finally:
            stop_process(prom)
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def test_a_segment_of_another_version_is_refused() -> None:
    """Tables whose columns this version does not write would break the analysis: refused as
    a damaged history (the service then starts without it)."""
    segment = demo_segment()
    name, samples = segment.metrics[0]
    segment.metrics[0] = (name, samples.rename({"value": "sample_value"}))
    with pytest.raises(HistoryError, match="table samples has columns"):
        decode(encode(segment))
