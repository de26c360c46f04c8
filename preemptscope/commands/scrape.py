"""`preemptscope scrape URL`: record vLLM /metrics snapshots for later reports.

Each good scrape is written as `<UTC time, ISO 8601 basic>.prom` (e.g.
`20261129T100015.123Z.prom`), atomically, so `preemptscope report --metrics DIR` and
`read_metrics_path` read the directory as one time series. A target that is down, slow or
serving something else is reported on stderr and retried at the next tick; the body of a
response that is not Prometheus text is kept as `<time>.rejected` for inspection.
"""

from __future__ import annotations

import argparse
import gzip
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import httpx

from preemptscope.commands.report import parse_duration  # one duration syntax for all commands
from preemptscope.errors import ConfigError, InputError, ScrapeError
from preemptscope.ingest.metrics import PREFIXES, parse_metrics_text
from preemptscope.ingest.scrape import fetch_metrics_text


@dataclass
class ScrapeTally:
    ok: int = 0
    failed: int = 0
    last_error: str | None = None


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scrape",
        help="record vLLM /metrics snapshots into a directory",
        description=(
            "Scrape a vLLM /metrics endpoint at a fixed interval and write each snapshot as "
            "<UTC-time>.prom into DIR (read later with `preemptscope report --metrics DIR`). "
            "Errors are reported and retried; the recording stops after --count scrapes, after "
            "--duration, or on Ctrl-C."
        ),
    )
    parser.add_argument("url", metavar="URL", help="e.g. http://127.0.0.1:8000/metrics")
    parser.add_argument(
        "--out", type=Path, default=Path("scrapes"), metavar="DIR", help="default: ./scrapes"
    )
    parser.add_argument(
        "--interval", type=_duration, default=15.0, metavar="D", help="default: 15s"
    )
    parser.add_argument("--timeout", type=_duration, default=5.0, metavar="D", help="default: 5s")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--count", type=_count, metavar="N", help="stop after N scrape attempts")
    limit.add_argument("--duration", type=_duration, metavar="D", help="stop after D (e.g. 1h)")
    parser.add_argument(
        "--gzip", action="store_true", help="write .prom.gz (a week of 15-s scrapes is ~40k files)"
    )
    parser.add_argument("--quiet", action="store_true", help="report errors only")
    parser.set_defaults(func=run)


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y%m%dT%H%M%S.") + f"{moment.microsecond // 1000:03d}Z"


def _write_atomically(target: Path, data: bytes) -> None:
    # Hidden (never read as a snapshot), created exclusively under an unpredictable name: a
    # symlink planted at a guessable temporary name is never written through.
    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(name, 0o644)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def scrape_to_file(
    url: str, out: Path, *, timeout: float, compress: bool, client: httpx.Client, now: datetime
) -> tuple[Path, int, int]:
    """One scrape written to `out`: (file, samples, vLLM samples). ScrapeError on failure."""
    text = fetch_metrics_text(url, timeout=timeout, client=client)
    try:
        frame = parse_metrics_text(text, timestamp=now, source=url, deployment="-")
    except InputError as exc:
        rejected = out / f"{_stamp(now)}.rejected"
        _write_atomically(rejected, text.encode("utf-8"))
        where = f"line {exc.line}: " if exc.line is not None else ""
        raise ScrapeError(url, f"{where}{exc.reason} (body kept in {rejected})") from exc
    vllm = sum(1 for name in frame["raw_name"] if name.startswith(PREFIXES))
    data = text.encode("utf-8")
    target = out / f"{_stamp(now)}.prom{'.gz' if compress else ''}"
    _write_atomically(target, gzip.compress(data, mtime=0) if compress else data)
    return target, frame.height, vllm


def record(
    url: str,
    out: Path,
    *,
    interval: float,
    timeout: float,
    count: int | None = None,
    duration: float | None = None,
    compress: bool = False,
    quiet: bool = False,
    stream: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> ScrapeTally:
    """Scrape at a fixed rate (missed ticks are skipped, never bunched) until a limit is hit."""
    stream = stream if stream is not None else sys.stderr
    out.mkdir(parents=True, exist_ok=True)
    tally = ScrapeTally()
    warned_not_vllm = False
    attempts = 0
    with httpx.Client(follow_redirects=True) as client:
        begin = clock()  # after the client: building it takes a noticeable part of a tick
        try:
            while True:
                now = datetime.now(UTC)
                attempts += 1
                try:
                    target, samples, vllm = scrape_to_file(
                        url, out, timeout=timeout, compress=compress, client=client, now=now
                    )
                except ScrapeError as exc:
                    tally.failed += 1
                    tally.last_error = exc.reason
                    print(f"{now:%H:%M:%S} scrape failed: {exc}", file=stream)
                else:
                    tally.ok += 1
                    if not quiet:
                        print(
                            f"{now:%H:%M:%S} {samples} samples ({vllm} vLLM) -> {target}",
                            file=stream,
                        )
                    if vllm == 0 and not warned_not_vllm:
                        warned_not_vllm = True
                        hint = "is it vLLM's /metrics?"
                        print(
                            f"warning: {url} serves no vllm: or ray_vllm_ metrics; {hint}",
                            file=stream,
                        )
                if count is not None and attempts >= count:
                    break
                elapsed = clock() - begin
                if duration is not None and elapsed >= duration:
                    break
                next_tick = math.floor(elapsed / interval + 1) * interval
                if duration is not None and next_tick > duration:
                    break
                sleep(max(0.0, next_tick - (clock() - begin)))
        except KeyboardInterrupt:
            pass  # stopping a recording by hand is the normal way to end it
    return tally


def run(args: argparse.Namespace) -> int:
    try:
        tally = record(
            args.url,
            args.out,
            interval=args.interval,
            timeout=args.timeout,
            count=args.count,
            duration=args.duration,
            compress=args.gzip,
            quiet=args.quiet,
        )
    except OSError as exc:
        raise InputError(str(args.out), f"cannot write snapshots: {exc}") from exc
    print(f"{tally.ok} snapshots written to {args.out}, {tally.failed} failed", file=sys.stderr)
    # Scripts notice a recording that captured nothing.
    return 0 if tally.ok else 1
