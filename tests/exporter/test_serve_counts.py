"""`serve` counts a log's lines and records as `parse --json` counts the same lines.

The live path drops the rows the analysis never reads (access, other, most request and
unrecognised rows) and prunes the rest to its history; what it reports of a source (lines,
unrecognised lines, records per kind) is all the same the totals of every line read since
it started, over real HTTP on 127.0.0.1, against `parse --json` of the same file.
"""

from __future__ import annotations

import contextlib
import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from preemptscope.cli import main as cli
from tests.exporter.conftest import append_lines, running_service, stamp, stats_line, wait_for

ACCESS = '(APIServer pid=1) INFO:     10.0.0.{n}:5{n:04d} - "POST /v1/completions HTTP/1.1" 200 OK'
OTHER = "(APIServer pid=1) INFO {ts} [launcher.py:4{n}] Route: /v1/models, Methods: GET"
RECEIVED = (
    "(APIServer pid=1) INFO {ts} [logger.py:43] Received request cmpl-{n}: prompt: 'hi',"
    " params: SamplingParams(n=1), prompt_token_ids: [1], lora_request: None."
)
FINISHED = "(APIServer pid=1) INFO {ts} [async_llm.py:2] Finished request cmpl-{n}."
UVICORN = "INFO:     Started server process [{n}]"


def _log_lines(start: datetime, count: int) -> list[str]:
    """Every kind the live path drops or prunes, and lines nobody can read."""
    lines = []
    for n in range(count):
        moment = start + timedelta(seconds=n)
        ts = stamp(moment)
        lines += [
            stats_line(moment, kv=40.0, running=3, pending=0),
            ACCESS.format(n=n),
            OTHER.format(ts=ts, n=n),
            RECEIVED.format(ts=ts, n=n),
            FINISHED.format(ts=ts, n=n),
            UVICORN.format(n=n),
            "",
            f"noise line {n} that no format reads",
        ]
    return lines


def _parse_json(path: Path) -> dict[str, Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli(["parse", str(path), "--json"]) == 0
    source = json.loads(out.getvalue())
    assert isinstance(source, dict)
    return source


def test_serve_counts_every_kind_as_parse_json_does(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    start = datetime.now(UTC) - timedelta(minutes=2)
    # More unrecognised lines than the reducer keeps rows of, older lines than the history.
    lines = _log_lines(start - timedelta(hours=2), 700) + _log_lines(start, 600)
    append_lines(log, lines)
    batch = _parse_json(log)
    assert batch["parsed_lines"] + batch["unrecognized_lines"] + batch["blank_lines"] == len(lines)
    assert min(batch["records"][k] for k in ("access", "other", "requests")) > 0
    with running_service(
        tmp_path / "state", "--log", f"{log}=chat", "--poll-interval", "0.05"
    ) as live:
        client = live.client()

        def source() -> dict[str, Any] | None:
            response = client.get("/api/deployments/chat")
            if response.status_code != 200:
                return None
            sources = response.json()["sources"]
            done = len(sources) == 1 and sources[0]["lines"] == len(lines)
            return sources[0] if done else None

        served = wait_for(source, timeout=60)
    assert served["unrecognized_lines"] == batch["unrecognized_lines"]
    assert served["records"] == batch["records"]
