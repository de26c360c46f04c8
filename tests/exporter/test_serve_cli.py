"""`preemptscope serve` as a real process: port errors, the access log and JSON logs."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from preemptscope import settings
from preemptscope.commands.serve import EXIT_BIND
from tests.exporter.conftest import serve_process

TOKEN = "sign-in-token-0123456789abcdef"


def serve(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "preemptscope", "serve", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    process = serve(*argv, env=env)
    stdout, stderr = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_default_port_is_not_vllms() -> None:
    assert settings.BY_NAME["port"].default == settings.DEFAULT_PORT
    # vLLM/Triton/TensorRT-LLM, llama.cpp/TGI, SGLang, Ollama, LM Studio; Prometheus, Grafana,
    # node_exporter and NVIDIA's DCGM exporter (9400) on the same GPU hosts.
    taken = {8000, 8001, 8002, 8080, 30000, 11434, 1234, 3000, 9090, 9100, 9400}
    assert settings.DEFAULT_PORT not in taken
    # Outside the 9100-9999 exporter range (fully allocated) and the ephemeral range.
    assert not 9100 <= settings.DEFAULT_PORT <= 9999
    assert settings.DEFAULT_PORT < 32768


def test_port_in_use_is_one_line_with_its_own_exit_status(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run("--log", str(tmp_path / "v.log"), "--state-dir", str(tmp_path / "s"),
                   "--port", str(port))  # fmt: skip
    assert done.returncode == EXIT_BIND == 4
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "--port" in lines[0] and "in use" in lines[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "s").exists()  # refused before anything else started


def test_bad_port_values_are_one_line_exit_2(tmp_path: Path) -> None:
    log = str(tmp_path / "v.log")
    for argv, env, where in (
        (("--port", "abc"), {}, "--port"),
        ((), {"PREEMPTSCOPE_PORT": "abc"}, "PREEMPTSCOPE_PORT"),
        (("--port", "99999"), {}, "--port"),
        (("--port", "-1"), {}, "--port"),
    ):
        done = run("--log", log, *argv, env=env)
        assert done.returncode == 2, (argv, env, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr
        assert where in lines[0] and "port" in lines[0]
        assert "invalid literal" not in lines[0]  # Python's words, not ours


def _start(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen[str], str, list[str]]:
    """Start serve on port 0; returns the process, its URL and the stderr lines read so far."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "vllm.log"
    log.write_text("")
    return serve_process("--log", f"{log}=chat", "--state-dir", str(tmp_path / "state"),
                         "--port", "0", *argv)  # fmt: skip


def _stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=30)
    return rest


def _requests(url: str) -> None:
    with httpx.Client(base_url=url, timeout=20) as client:
        for _ in range(50):
            if client.get("/readyz").status_code == 200:
                break
            time.sleep(0.2)
        client.get("/", params={"token": TOKEN})  # a sign-in link
        client.get("/api/deployments", params={"token": TOKEN, "x": "1"})
        client.get("/metrics")


def test_sign_in_links_never_write_the_token_and_access_log_is_opt_in(tmp_path: Path) -> None:
    process, url, seen = _start(tmp_path / "a", "--token", TOKEN)
    _requests(url)
    quiet = "".join(seen) + _stop(process)
    assert TOKEN not in quiet
    assert "GET /metrics" not in quiet  # no access log unless asked for

    process, url, seen = _start(tmp_path / "b", "--token", TOKEN, "--access-log")
    _requests(url)
    text = "".join(seen) + _stop(process)
    assert TOKEN not in text
    assert '"GET /?token=REDACTED"' in text
    assert '"GET /api/deployments?token=REDACTED&x=1" 401' in text
    assert '"GET /metrics" 200' in text


def test_json_logs_for_collectors(tmp_path: Path) -> None:
    process, url, seen = _start(tmp_path, "--token", TOKEN, "--access-log", "--log-format", "json")
    _requests(url)
    text = "".join(seen) + _stop(process)
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert entries and all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    access = [e for e in entries if e["logger"] == "preemptscope.access"]
    metrics = [e for e in access if e["path"] == "/metrics"]
    assert metrics and metrics[0]["status"] == 200 and metrics[0]["method"] == "GET"
    assert isinstance(metrics[0]["duration_ms"], float)
    assert TOKEN not in text


def test_outgoing_scrapes_are_logged_only_when_they_fail(tmp_path: Path) -> None:
    """docs/exporter.md: a scrape of a vLLM target is no log line unless it fails."""
    from tests.exporter.test_restart import demo_server

    with demo_server() as fake:
        process, url, _ = _start(
            tmp_path, "--scrape", f"{fake}/healthy/metrics=ok", "--scrape",
            "http://127.0.0.1:9/metrics=gone", "--scrape-interval", "0.5s",
        )  # fmt: skip
        try:
            with httpx.Client(base_url=url, timeout=10) as client:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:
                    text = client.get("/metrics").text
                    if re.search(r'preemptscope_scrapes_total\{deployment="ok".*\} [3-9]', text):
                        break
                    time.sleep(0.2)
        finally:
            rest = _stop(process)
    assert "HTTP Request" not in rest and "/healthy/metrics" not in rest
    assert re.search(r"WARNING .*scrape of http://127\.0\.0\.1:9/metrics failed", rest), rest
