"""`preemptscope parse`: vLLM logs of any version into typed frames, a summary or Parquet.

`--json` prints one JSON object per input, one per line (the contract is in docs/frames.md).
Without it, a short table. `--out DIR` writes every frame as Parquet partitioned by deployment
and date. Inputs stream chunk by chunk, so memory stays flat as files grow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table

from preemptscope.errors import ConfigError
from preemptscope.ingest._reader import display_name
from preemptscope.ingest.logs import ParseOptions, iter_log_paths, iter_parse_path
from preemptscope.ingest.parquet import write_frames
from preemptscope.ingest.summary import LogSummary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "parse",
        help="read vLLM logs (any version) into frames; print a summary, JSON lines or Parquet",
        description=(
            "Read vLLM logs of any version (plain, .gz, directories, globs, '-' for stdin; "
            "PATH=NAME names the deployment) and report what they contain."
        ),
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="file, .gz, dir, glob or -")
    parser.add_argument("--json", action="store_true", help="one JSON object per input (JSONL)")
    parser.add_argument("--out", metavar="DIR", help="write frames as hive-partitioned Parquet")
    parser.add_argument("--year", type=int, help="year of the first record (logs have none)")
    parser.add_argument("--start", help="ISO time of the first record (anchors the year)")
    parser.add_argument("--tz", default="UTC", help="IANA zone of the log's clock (default UTC)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def _start(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            f"bad --start {text!r}: expected ISO 8601, e.g. 2026-05-01T09:00:00"
        ) from None
    return moment


def _table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(
        title="preemptscope parse",
        caption=(
            "P lines: V0 preemption-warning lines; P total: preemptions reconstructed from their "
            "counters (no count: the log says nothing, as V1 logs do). R/W/KV: last stats record."
        ),
    )
    table.add_column("input", overflow="fold")
    for column in ("lines", "unrec.", "vLLM", "era", "stats", "P lines", "P total", "last R/W/KV"):
        table.add_column(column, no_wrap=True)
    for item in summaries:
        last = item["last_scheduler_stats"]
        last_text = (
            "—"
            if last is None
            else f"{last['running']}/{last['waiting']}/{last['gpu_kv_cache_usage'] * 100:.1f}%"
        )
        total = item["preemptions"]["reconstructed_total"]
        table.add_row(
            item["path"],
            str(item["lines"]),
            str(item["unrecognized_lines"]),
            item["vllm_version"] or "?",
            item["log_era"] or "?",
            str(item["records"]["scheduler_stats"]),
            str(item["preemptions"]["warning_lines"]),
            "no count" if total is None else str(total),
            last_text,
        )
    return table


def run(args: argparse.Namespace) -> int:
    options = ParseOptions(year=args.year, start=_start(args.start), tz=args.tz)
    show_progress = not args.quiet and sys.stderr.isatty()
    summaries: list[dict[str, Any]] = []
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=not show_progress,
    )
    with progress:
        for path, name in iter_log_paths(args.paths):
            size = Path(path).stat().st_size if path != "-" else None
            task = progress.add_task(path, total=size)
            summary: LogSummary | None = None
            tag = hashlib.sha1(path.encode()).hexdigest()[:8]

            def advance(n: int, task_id: TaskID = task) -> None:
                progress.advance(task_id, n)

            for index, frames in enumerate(
                iter_parse_path(
                    path,
                    deployment=name,
                    options=options,
                    summary_only=args.out is None,
                    progress=advance,
                )
            ):
                if summary is None:
                    summary = LogSummary(path=path, deployment=frames.deployment)
                summary.add(frames)
                if args.out is not None:
                    write_frames(frames, args.out, f"{Path(path).name}-{tag}-{index:05d}")
            progress.remove_task(task)
            if summary is None:  # an empty input
                summary = LogSummary(path=path, deployment=name or display_name(path))
            result = summary.to_json()
            if args.json:
                sys.stdout.write(json.dumps(result, ensure_ascii=False) + "\n")
                sys.stdout.flush()
            summaries.append(result)
    if not args.json:
        Console().print(_table(summaries))
        if args.out is not None:
            Console().print(f"Parquet written under {args.out}")
    return 0
