"""The floor of a pure-Polars `report` on a V1 request log, beside DuckDB, `parse` and `report`.

Issue 12 asks for `report` at 300 MB/s and within 2.5x of a DuckDB one-liner on a generated
1 GB V1 log with request logging on, on one pure-Polars path. This measures the least any
such reader must do on that file, written for its one format and trusting every line:

- read 16 MB chunks, split them into lines (the project's `_reader.split_lines`), two chunks
  at a time on two threads, as `report` does;
- per chunk: find the stats, `Received request` and `Generated response` lines by literal;
  take the stats fields (few lines), and each request line's time and id by literal finds
  and slices (no capture group: captures run the slow engine);
- at the end: date the times, join arrival to response by id, and reduce to per-10-s windows
  (requests, mean and p99 latency) and the stats maxima.

Nothing here checks a line: no envelope, prefix, era, wrapper, glue, hard-wrap or hostile
text, no accounting of unrecognised lines, no access or other rows. It is a lower bound on
`report`'s work, not a replacement. Each contender runs in its own process (wall, CPU from
wait4, peak RSS); read the ratios. Usage:

    python bench/bench_floor.py --size-mb 1024 [--repeat 2] [--path FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_parse import Run, _cli, _file, measure  # type: ignore[import-not-found]  # noqa: E402

CHUNK = 16 << 20
STATS = "Avg prompt throughput: "
RECEIVED = "] Received request "
GENERATED = "] Generated response "


def _chunks(path: str) -> Iterator[bytes]:
    """The file in chunks that end at a newline (no reader limits: the floor trusts its input)."""
    rest = b""
    with open(path, "rb") as handle:
        while block := handle.read(CHUNK):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            yield block[:cut]
            rest = block[cut:]
    if rest:
        yield rest


# The floors' work, one query on an eager frame (a chunk) or a lazy one (the whole file).
Frame = TypeVar("Frame", pl.DataFrame, pl.LazyFrame)


def _stats(lines: Frame, name: str) -> Frame:
    line = pl.col(name)
    return lines.filter(line.str.contains(STATS, literal=True)).select(
        line.str.extract(r"Running: ([0-9]+) reqs", 1).cast(pl.Int64).alias("running"),
        line.str.extract(r"Waiting: ([0-9]+) reqs", 1).cast(pl.Int64).alias("waiting"),
        line.str.extract(r"KV cache usage: ([0-9.]+)%", 1).cast(pl.Float64).alias("kv"),
    )


def _requests(lines: Frame, name: str) -> Frame:
    """Each request line's time (text), whether it is the arrival, and its id."""
    line = pl.col(name)
    req = lines.with_columns(
        line.str.contains(RECEIVED, literal=True).alias("arrival"),
        line.str.contains(GENERATED, literal=True).alias("end"),
    ).filter(pl.col("arrival") | pl.col("end"))
    # The header's `] ` ends the envelope; the time is the 14 characters before ` [`.
    close = line.str.find("] ", literal=True)
    opened = line.str.find(" [", literal=True)
    lead = pl.when(pl.col("arrival")).then(len(RECEIVED)).otherwise(len(GENERATED))
    req = req.with_columns(
        line.str.slice(opened - 14, 14).alias("ts"), line.str.slice(close + lead, 80).alias("_rest")
    )
    rest = pl.col("_rest")
    return req.select("ts", "arrival", rest.str.slice(0, rest.str.find(r"[ :,]")).alias("id"))


def _windows(req: Frame) -> Frame:
    """Date the times, join arrival to response by id, per-10-s requests, mean and p99."""
    req = req.with_columns(
        ("2026-" + pl.col("ts")).str.strptime(pl.Datetime, "%Y-%m-%d %H:%M:%S").alias("t")
    )
    arrivals = req.filter(pl.col("arrival")).group_by("id").agg(pl.col("t").min().alias("start"))
    ends = req.filter(~pl.col("arrival")).group_by("id").agg(pl.col("t").max().alias("end"))
    e2e = (pl.col("end") - pl.col("start")).dt.total_milliseconds() / 1000
    return (
        arrivals.join(ends, on="id")
        .group_by(pl.col("start").dt.truncate("10s"))
        .agg(pl.len().alias("requests"), e2e.mean().alias("mean"), e2e.quantile(0.99).alias("p99"))
    )


def _summary(stats: Frame, windows: Frame) -> tuple[Frame, Frame]:
    return (
        stats.select(
            pl.len().alias("stats"),
            pl.col("running").max().alias("max_running"),
            pl.col("waiting").max().alias("max_waiting"),
            pl.col("kv").max().alias("max_kv"),
        ),
        windows.select(
            pl.col("requests").sum(),
            pl.len().alias("windows"),
            pl.col("p99").max().alias("p99_of_p99"),
        ),
    )


def _chunk(data: bytes) -> tuple[pl.DataFrame, pl.DataFrame]:
    from preemptscope.ingest._reader import split_lines

    lines = pl.DataFrame({"raw": split_lines(data)})
    return _stats(lines, "raw"), _requests(lines, "raw")


def floor_report(path: str) -> dict[str, object]:
    """The report's shape: 16 MB chunks split by the project's reader, two on two threads."""
    parts: list[tuple[pl.DataFrame, pl.DataFrame]] = []
    in_flight: deque[Future[tuple[pl.DataFrame, pl.DataFrame]]] = deque()
    with ThreadPoolExecutor(max_workers=2) as pool:
        for data in _chunks(path):  # two chunks in flight, as `report` routes them
            in_flight.append(pool.submit(_chunk, data))
            while len(in_flight) > 2:
                parts.append(in_flight.popleft().result())
        parts.extend(future.result() for future in in_flight)
    stats = pl.concat([p[0] for p in parts])
    windows = _windows(pl.concat([p[1] for p in parts]))
    got = _summary(stats, windows)
    return got[0].to_dicts()[0] | got[1].to_dicts()[0]


def lazy_floor_report(path: str) -> dict[str, object]:
    """The same work as one lazy query on Polars' streaming engine (`scan_lines`, unstable in
    Polars 2.1: it fails on a file that is not UTF-8, and drops the `\\r` of a CRLF)."""
    lines = pl.scan_lines(path)
    stats, windows = _summary(_stats(lines, "line"), _windows(_requests(lines, "line")))
    got = pl.collect_all([stats, windows], engine="streaming")
    return got[0].to_dicts()[0] | got[1].to_dicts()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--path", help="a V1 request log (default: generated)")
    parser.add_argument("--inner", choices=["floor", "lazy", "duckdb"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner == "floor":
        print(json.dumps(floor_report(args.path), default=str))
        return
    if args.inner == "lazy":
        print(json.dumps(lazy_floor_report(args.path), default=str))
        return
    if args.inner == "duckdb":
        from bench_parse import duckdb_query

        print(json.dumps(duckdb_query(args.path)))
        return
    path = Path(args.path) if args.path else _file(args.size_mb, "v1-requests")
    here, py = str(Path(__file__)), sys.executable
    contenders = [
        ("DuckDB one-liner", [py, here, "--inner", "duckdb", "--path", str(path)]),
        ("Polars floor, eager chunks", [py, here, "--inner", "floor", "--path", str(path)]),
        ("Polars floor, lazy streaming", [py, here, "--inner", "lazy", "--path", str(path)]),
        ("preemptscope parse --json", _cli(None, "parse", str(path), "--json", "--quiet")),
        ("preemptscope report --json", _cli(None, "report", str(path), "--json")),
    ]
    runs: list[Run] = [measure(name, argv, args.repeat) for name, argv in contenders]
    size_mb = path.stat().st_size / 1e6
    duck = runs[0]
    print(f"file: {path.name}, {size_mb:.0f} MB")
    print("| contender | wall s | MB/s | CPU s | peak RSS MB | x DuckDB |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run.name} | {run.wall_s:.2f} | {size_mb / run.wall_s:.0f} | {run.cpu_s:.2f} |"
            f" {run.peak_rss_mb:.0f} | {run.wall_s / duck.wall_s:.2f} |"
        )
    print("floor:", runs[1].output[:300])
    print("lazy floor:", runs[2].output[:300])
    print("DuckDB:", duck.output[:300])


if __name__ == "__main__":
    main()
