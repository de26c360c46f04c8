"""`preemptscope parse`: vLLM logs of any version into typed frames, a summary or Parquet.

`--json` prints one JSON object per input, one per line (the contract is in docs/frames.md).
Without it, a short table. `--out DIR` writes every frame as Parquet partitioned by deployment
and date. Inputs stream chunk by chunk, so memory stays flat as files grow.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)
from rich.table import Table
from rich.text import Text

from preemptscope.errors import ConfigError, InputError
from preemptscope.ingest import sniff
from preemptscope.ingest._reader import display_name
from preemptscope.ingest.logs import (
    ALL_KINDS,
    SUMMARY,
    ParseOptions,
    iter_log_paths,
    iter_parse_path,
)
from preemptscope.ingest.parquet import write_frames
from preemptscope.ingest.schema import LogFrames
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


COLUMNS = ("lines", "unrec.", "vLLM", "era", "stats", "P lines", "P total", "last R/W/KV")
CAPTION = (
    "P lines: V0 preemption-warning lines; P total: preemptions reconstructed from their "
    "counters (no count: the log says nothing, as V1 logs do). R/W/KV: last stats record."
)
# Narrower than this, the input column would fold a path into a letter per line: each input
# then gets its own block (path on one line, figures below) instead of a table row.
MIN_INPUT_WIDTH = 24


def _cells(item: dict[str, Any]) -> list[str]:
    last = item["last_scheduler_stats"]
    last_text = (
        "—"
        if last is None
        else f"{last['running']}/{last['waiting']}/{last['gpu_kv_cache_usage'] * 100:.1f}%"
    )
    total = item["preemptions"]["reconstructed_total"]
    return [
        str(item["lines"]),
        str(item["unrecognized_lines"]),
        item["vllm_version"] or "?",
        item["log_era"] or "?",
        str(item["records"]["scheduler_stats"]),
        str(item["preemptions"]["warning_lines"]),
        "no count" if total is None else str(total),
        last_text,
    ]


def _table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title="preemptscope parse", caption=CAPTION)
    longest = max((len(item["path"]) for item in summaries), default=5)
    table.add_column("input", overflow="fold", min_width=min(longest, MIN_INPUT_WIDTH))
    for column in COLUMNS:
        table.add_column(column, no_wrap=True)
    for item in summaries:
        table.add_row(item["path"], *_cells(item))
    return table


def _blocks(summaries: list[dict[str, Any]], width: int) -> Group:
    """The narrow layout: per input, its path, then `name value` pairs, broken between pairs."""
    parts: list[Any] = [Text("preemptscope parse", style="bold")]
    for item in summaries:
        parts.append(Text(item["path"], style="bold", overflow="fold"))
        line = ""
        for name, value in zip(COLUMNS, _cells(item), strict=True):
            pair = f"{name} {value}"
            if line and len(line) + 2 + len(pair) > width - 2:
                parts.append(Text("  " + line))
                line = ""
            line = f"{line}  {pair}" if line else pair
        parts.append(Text("  " + line))
    parts.append(Text(CAPTION, style="dim"))
    return Group(*parts)


def print_summary(summaries: list[dict[str, Any]], console: Console) -> None:
    """The table when it fits; in a pipe as wide as it needs (no folded paths to grep)."""
    table = _table(summaries)
    unbounded = Measurement.get(console, console.options.update_width(10_000), table)
    if not console.is_terminal:
        console.width = max(console.width, unbounded.maximum)
    if unbounded.minimum > console.width:
        console.print(_blocks(summaries, console.width))
    else:
        console.print(table)


def _check_out(out: str) -> None:
    """--out must be a directory we can create or write, checked before any input is read."""
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise ConfigError(f"--out {out}: exists and is not a directory (Parquet goes in a folder)")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out {out}: cannot create it: {exc.strerror or exc}") from None
    if not os.access(target, os.W_OK | os.X_OK):
        raise ConfigError(f"--out {out}: not writable")


def run(args: argparse.Namespace) -> int:
    options = ParseOptions(year=args.year, start=_start(args.start), tz=args.tz)
    for spec in args.paths:
        path = spec if Path(spec).exists() or "=" not in spec else spec.rpartition("=")[0]
        if (hint := sniff.metrics_only_dir(path)) is not None:
            raise InputError(path, hint)
    if args.out is not None:
        _check_out(args.out)
    show_progress = not args.quiet and sys.stderr.isatty()
    summaries: list[dict[str, Any]] = []
    # Inputs with no vLLM line (what each looks like); their JSON lines wait until one input
    # proves to be a log: with none, the command fails instead of summarising a picture.
    not_logs: list[tuple[str, str]] = []
    held: list[str] = []
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
            written: list[Path] = []

            def advance(n: int, task_id: TaskID = task) -> None:
                progress.advance(task_id, n)

            for index, frames in enumerate(
                iter_parse_path(
                    path,
                    deployment=name,
                    options=options,
                    keep=ALL_KINDS if args.out is not None else SUMMARY,
                    progress=advance,
                )
            ):
                if summary is None:
                    summary = LogSummary(path=path, deployment=frames.deployment)
                summary.add(frames)
                if args.out is not None:
                    written += _write(frames, args.out, f"{Path(path).name}-{tag}-{index:05d}")
            progress.remove_task(task)
            if summary is None:  # an empty input
                summary = LogSummary(path=path, deployment=name or display_name(path))
            result = summary.to_json()
            line = json.dumps(result, ensure_ascii=False) + "\n"
            if sniff.holds_vllm(result["records"]):
                ready, held = [*held, line], []
            else:
                not_logs.append((path, sniff.describe_path(path, result["lines"], report=False)))
                for part in written:  # its unrecognised lines are no frames worth keeping
                    part.unlink(missing_ok=True)
                ready = [line] if len(not_logs) <= len(summaries) else []
                held += [] if ready else [line]
            if args.json and ready:
                sys.stdout.write("".join(ready))
                sys.stdout.flush()
            summaries.append(result)
    if len(not_logs) == len(summaries) and not_logs:
        more = len(not_logs) - 1
        also = f" ({more} more input{'s' if more > 1 else ''} without a vLLM line)" if more else ""
        raise InputError(not_logs[0][0], not_logs[0][1] + also)
    err = Console(stderr=True)
    for path, why in not_logs:
        err.print(Text(f"note ({path}): {why}", style="yellow"), soft_wrap=True)
    if not args.json:
        print_summary(summaries, Console())
        if args.out is not None:
            Console().print(f"Parquet written under {args.out}")
    return 0


def _write(frames: LogFrames, out: str, part: str) -> list[Path]:
    try:
        return write_frames(frames, out, part)
    except OSError as exc:
        where = str(exc.filename or out)
        raise InputError(where, f"cannot write Parquet: {exc.strerror}") from None
