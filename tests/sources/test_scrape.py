"""`preemptscope scrape` and scrape_once against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import gzip
import http.server
import io
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from preemptscope.ingest.scrape import read_metrics_path, scrape_once

from preemptscope.cli import main
from preemptscope.commands.scrape import record
from preemptscope.errors import ScrapeError

FIXTURE = (Path(__file__).parent.parent / "fixtures" / "metrics" / "v1_033.prom").read_bytes()

# Each request takes the next response: (status, body, delay seconds).
Response = tuple[int, bytes, float]


class _Server:
    def __init__(self, responses: Callable[[int], Response]) -> None:
        self.hits = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, body, delay = responses(server.hits)
                server.hits += 1
                time.sleep(delay)
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory() -> Iterator[Callable[[Callable[[int], Response]], _Server]]:
    started: list[_Server] = []

    def start(responses: Callable[[int], Response]) -> _Server:
        server = _Server(responses).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__()


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


def test_scrape_once(server_factory: Callable[[Callable[[int], Response]], _Server]) -> None:
    server = server_factory(lambda _: (200, FIXTURE, 0.0))
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    frame = scrape_once(server.url, timeout=2.0, deployment="live", now=now)
    assert frame["source"].unique().to_list() == [server.url]
    assert frame["timestamp"].unique().to_list() == [now]
    assert "num_preemptions" in frame["metric"].to_list()


def test_scrape_once_errors(server_factory: Callable[[Callable[[int], Response]], _Server]) -> None:
    with pytest.raises(ScrapeError, match="ConnectError"):
        scrape_once(_closed_port_url(), timeout=1.0, deployment="d")
    broken = server_factory(lambda _: (503, b"busy", 0.0))
    with pytest.raises(ScrapeError, match="HTTP 503"):
        scrape_once(broken.url, timeout=1.0, deployment="d")
    slow = server_factory(lambda _: (200, FIXTURE, 1.0))
    with pytest.raises(ScrapeError, match=r"timed out after 0\.2 s"):
        scrape_once(slow.url, timeout=0.2, deployment="d")
    garbage = server_factory(lambda _: (200, b"ok 1\nthis is { not metrics\n", 0.0))
    with pytest.raises(ScrapeError, match="line 2"):
        scrape_once(garbage.url, timeout=1.0, deployment="d")


def test_scrape_command_records_a_readable_series(
    tmp_path: Path,
    server_factory: Callable[[Callable[[int], Response]], _Server],
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = server_factory(lambda _: (200, FIXTURE, 0.0))
    out = tmp_path / "snaps"
    code = main(["scrape", server.url, "--out", str(out), "--interval", "50ms", "--count", "3"])
    assert code == 0
    files = sorted(out.iterdir())
    assert len(files) == 3 and all(f.name.endswith("Z.prom") for f in files)
    assert files[0].read_bytes() == FIXTURE
    frame = read_metrics_path(out, deployment="live")
    stamps = frame["timestamp"].unique().sort()
    assert stamps.len() == 3
    gaps = stamps.diff().drop_nulls().dt.total_milliseconds().to_list()
    assert all(gap >= 40 for gap in gaps), gaps  # fixed rate, not back-to-back
    err = capsys.readouterr().err
    assert "3 snapshots written" in err and "0 failed" in err


def test_scrape_command_reports_errors_and_keeps_going(
    tmp_path: Path,
    server_factory: Callable[[Callable[[int], Response]], _Server],
    capsys: pytest.CaptureFixture[str],
) -> None:
    def flaky(hit: int) -> Response:
        return [
            (200, FIXTURE, 0.0),
            (500, b"oops", 0.0),
            (200, b"<html>login</html>", 0.0),
            (200, FIXTURE, 0.0),
        ][hit]

    server = server_factory(flaky)
    out = tmp_path / "snaps"
    code = main(
        ["scrape", server.url, "--out", str(out), "--interval", "20ms", "--count", "4", "--gzip"]
    )
    assert code == 0
    snapshots = sorted(p.name for p in out.glob("*.prom.gz"))
    assert len(snapshots) == 2
    assert len(list(out.glob("*.rejected"))) == 1
    assert gzip.decompress((out / snapshots[0]).read_bytes()) == FIXTURE
    err = capsys.readouterr().err
    assert "HTTP 500" in err and "looks like HTML" in err
    assert "2 snapshots written" in err and "2 failed" in err
    assert read_metrics_path(out, deployment="d")["timestamp"].n_unique() == 2


def test_scrape_command_target_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["scrape", _closed_port_url(), "--out", str(tmp_path), "--interval", "10ms", "--count", "2"]
    )
    assert code == 1
    assert "0 snapshots written" in capsys.readouterr().err


def test_scrape_warns_when_not_vllm(
    tmp_path: Path, server_factory: Callable[[Callable[[int], Response]], _Server]
) -> None:
    server = server_factory(lambda _: (200, b"# TYPE up gauge\nup 1\n", 0.0))
    stream = io.StringIO()
    tally = record(server.url, tmp_path, interval=0.01, timeout=1.0, count=2, stream=stream)
    assert tally.ok == 2
    assert stream.getvalue().count("no vllm: or ray_vllm_ metrics") == 1


def test_duration_limit_uses_the_clock(tmp_path: Path) -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds + 0.3  # each scrape (failing here) also costs time

    tally = record(
        _closed_port_url(),
        tmp_path,
        interval=1.0,
        timeout=0.5,
        duration=3.0,
        stream=io.StringIO(),
        clock=lambda: now[0],
        sleep=sleep,
    )
    # ticks at 0, 1, 2, 3 (the one at 3 s ends the run)
    assert tally.failed == 4 and tally.ok == 0
    assert slept == pytest.approx([1.0, 0.7, 0.7])


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["scrape", "http://127.0.0.1:1/metrics", "--interval", "soon"],
        ["scrape", "http://127.0.0.1:1/metrics", "--count", "0"],
        ["scrape", "http://127.0.0.1:1/metrics", "--count", "2", "--duration", "1m"],
    ):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
    assert "duration" in capsys.readouterr().err


def test_frame_from_directory_is_sorted(tmp_path: Path) -> None:
    (tmp_path / "20261129T100015.000Z.prom").write_bytes(FIXTURE)
    (tmp_path / "20261129T100000.000Z.prom").write_bytes(FIXTURE)
    frame = read_metrics_path(tmp_path, deployment="d")
    assert frame["timestamp"].is_sorted()
    preempt = frame.filter((pl.col("metric") == "num_preemptions") & (pl.col("sample") == "value"))
    assert preempt.height == 4  # 2 engines x 2 snapshots


def test_ctrl_c_ends_a_recording_cleanly(
    tmp_path: Path, server_factory: Callable[[Callable[[int], Response]], _Server]
) -> None:
    server = server_factory(lambda _: (200, FIXTURE, 0.0))

    def interrupted(_: float) -> None:
        raise KeyboardInterrupt

    tally = record(
        server.url, tmp_path, interval=1.0, timeout=1.0, stream=io.StringIO(), sleep=interrupted
    )
    assert tally.ok == 1 and tally.failed == 0
    assert len(list(tmp_path.glob("*.prom"))) == 1
    assert not list(tmp_path.glob(".*"))  # no temporary left behind
