"""Benchmark `preemptscope report --json` against `parse --json` and a DuckDB one-liner.

What users run is `report` (the verdict); `parse --json` is the floor of reading the file;
the DuckDB query is what a user could write in a minute (`regexp_extract` of the stats
fields and a count of preemption lines over `read_csv` of the lines). All three read the same
generated file (bench/gen_logs.py) in one run, each in its own process, measured with
wait4(): wall time, CPU time (user + sys) and peak RSS. Timings on a shared machine are
noisy: read the ratios. Nothing here is a test. Usage:

    python bench/bench_parse.py --size-mb 1024 [--rss-sizes 256,1024] [--repeat 1]
        [--profile mixed,v1-requests]

Generated files go to bench/data/ (gitignored) and are deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"

# The DuckDB one-liner: the stats fields of every stats line, and the preemption lines.
DUCKDB_QUERY = r"""
WITH lines AS (
  SELECT line FROM read_csv(?, columns={'line': 'VARCHAR'}, delim=chr(1), quote='',
                            escape='', header=false, auto_detect=false, strict_mode=false)
)
SELECT
  count(*) FILTER (WHERE line LIKE '%is preempted by%') AS preemptions,
  count(*) FILTER (WHERE line LIKE '%Avg prompt throughput%') AS stats,
  max(TRY_CAST(regexp_extract(line, 'Running: (\d+) reqs', 1) AS INT)) AS max_running,
  max(TRY_CAST(regexp_extract(line, '(?:Waiting|Pending): (\d+) reqs', 1) AS INT)) AS max_waiting,
  max(TRY_CAST(regexp_extract(line, 'KV cache usage: ([\d.]+)%', 1) AS DOUBLE)) AS max_kv
FROM lines WHERE line LIKE '%Avg prompt throughput%' OR line LIKE '%is preempted by%'
"""


def duckdb_query(path: str) -> dict[str, object]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    row = con.execute(DUCKDB_QUERY, [path]).fetchone()
    assert row is not None
    names = ("preemptions", "stats", "max_running", "max_waiting", "max_kv")
    return dict(zip(names, row, strict=True))


@dataclass
class Run:
    name: str
    wall_s: float
    cpu_s: float
    peak_rss_mb: float
    output: str


def measure(name: str, argv: list[str], repeat: int = 1, env: dict[str, str] | None = None) -> Run:
    """Best of `repeat` runs of argv in a child process (wall, CPU user+sys, peak RSS)."""
    best: Run | None = None
    for _ in range(repeat):
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert child.stdout is not None
        output = child.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode not in (0, 1):  # grep -c exits 1 when nothing matched
            err = child.stderr.read().decode() if child.stderr else ""
            raise SystemExit(f"{name} failed ({child.returncode}): {err}")
        run = Run(
            name,
            wall,
            usage.ru_utime + usage.ru_stime,
            usage.ru_maxrss / 1024,
            output.strip(),
        )
        if best is None or run.wall_s < best.wall_s:
            best = run
    assert best is not None
    return best


def _file(size_mb: int, profile: str) -> Path:
    DATA.mkdir(exist_ok=True)
    path = DATA / f"bench-{profile}-{size_mb}mb.log"
    if not path.exists():
        subprocess.run(
            [
                sys.executable,
                str(HERE / "gen_logs.py"),
                str(path),
                str(size_mb),
                "--profile",
                profile,
            ],
            check=True,
        )
    return path


PACKAGES = ("preemptscope", "ingest", "analysis", "exporter", "dashboards")


def checkout(ref: str) -> Path:
    """The packages of git ref `ref`, unpacked once in the temp directory (outside the
    repository: scripts/check reads bench/). bench_hostile.py and bench_parse_small.py use it
    too: one directory per ref holds every package any of them needs."""
    name = ref.replace("/", "_").replace("~", "-")
    target = Path(tempfile.gettempdir()) / f"preemptscope-ref-{name}"
    if not target.exists():
        target.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "archive", ref, *PACKAGES], check=True, capture_output=True, cwd=HERE.parent
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def _cli(root: Path | None, *args: str) -> list[str]:
    """argv running the CLI of this tree, or of a checkout at `root` (its packages shadow the
    installed ones, as bench_parse_small.py does)."""
    if root is None:
        return [sys.executable, "-m", "preemptscope", *args]
    code = (
        "import sys, pathlib, importlib, preemptscope;"
        f"root = pathlib.Path({str(root)!r});"
        "preemptscope.__path__[:] = [str(root / 'preemptscope')];"
        "[setattr(importlib.import_module('preemptscope.' + p), '__path__', [str(root / p)])"
        " for p in ('ingest', 'analysis', 'exporter', 'dashboards')];"
        "from preemptscope import cli;"
        f"assert cli.__file__.startswith({str(root)!r}), cli.__file__;"
        f"sys.exit(cli.main({list(args)!r}))"
    )
    return [sys.executable, "-c", code]


def _contenders(path: Path, before: Path | None) -> list[tuple[str, list[str]]]:
    py = sys.executable
    here = str(Path(__file__))
    runs = [
        ("preemptscope report --json", _cli(None, "report", str(path), "--json")),
        ("preemptscope parse --json", _cli(None, "parse", str(path), "--json", "--quiet")),
        ("DuckDB regexp_extract", [py, here, "--inner", "duckdb", "--path", str(path)]),
    ]
    if before is not None:
        runs.append(("report --json before", _cli(before, "report", str(path), "--json")))
    return runs


def _table(path: Path, repeat: int, before: Path | None = None) -> list[Run]:
    size_mb = path.stat().st_size / 1e6
    runs = [measure(name, argv, repeat) for name, argv in _contenders(path, before)]
    parse = runs[1]
    print(f"\nfile: {path.name}, {size_mb:.0f} MB, cpus={os.cpu_count()}")
    print("| contender | wall s | MB/s | CPU s | peak RSS MB | x parse --json |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run.name} | {run.wall_s:.2f} | {size_mb / run.wall_s:.0f} | {run.cpu_s:.2f} | "
            f"{run.peak_rss_mb:.0f} | {run.wall_s / parse.wall_s:.2f} |"
        )
    report, duck = runs[0], runs[2]
    print(f"report / DuckDB wall: {report.wall_s / duck.wall_s:.2f}x")
    print("DuckDB:", duck.output[:300])
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description="preemptscope report/parse benchmark")
    parser.add_argument("--size-mb", default="100,1024", help="comma list of file sizes (MB)")
    parser.add_argument("--rss-sizes", default="", help="comma list of sizes for the RSS check")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--profile",
        default="mixed",
        help="comma list of gen_logs.py profiles: mixed (three eras), v1-requests",
    )
    parser.add_argument("--keep", action="store_true", help="keep generated files")
    parser.add_argument("--compare", help="git ref whose report --json runs beside this one")
    parser.add_argument("--inner", choices=["duckdb"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        print(json.dumps(duckdb_query(args.path)))
        return
    made: list[Path] = []
    results: list[dict[str, object]] = []
    profiles = [p for p in args.profile.split(",") if p]
    before = checkout(args.compare) if args.compare else None
    for profile in profiles:
        for size in [int(s) for s in args.size_mb.split(",") if s]:
            path = _file(size, profile)
            made.append(path)
            runs = _table(path, args.repeat, before)
            results.extend(asdict(r) | {"output": r.output[:200], "profile": profile} for r in runs)
    rss_sizes = [int(s) for s in args.rss_sizes.split(",") if s]
    if rss_sizes:
        print(
            "\n| log size | report wall s | report peak RSS MB | parse wall s | parse peak RSS MB |"
        )
        print("|---|---|---|---|---|")
    for size in rss_sizes:
        sized = _file(size, profiles[0])
        made.append(sized)
        report = measure("report", _cli(None, "report", str(sized), "--json"))
        parse = measure("parse", _cli(None, "parse", str(sized), "--json", "--quiet"))
        print(
            f"| {size} MB | {report.wall_s:.2f} | {report.peak_rss_mb:.0f} | {parse.wall_s:.2f}"
            f" | {parse.peak_rss_mb:.0f} |"
        )
    print(json.dumps(results))
    if not args.keep:
        for path in set(made):
            path.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
