"""Benchmark `preemptscope parse` against `rg -c`, `grep -c` and a plain Python `re` loop.

All contenders read the same generated file (bench/gen_logs.py) in one run; each runs in its
own process, measured with wait4(): wall time, CPU time (user + sys) and peak RSS. Timings on
a shared machine are noisy, so read the ratios and the CPU-time columns; nothing here is a
test. Usage:

    python bench/bench_parse.py --size-mb 1024 [--rss-sizes 256,1024,4096] [--repeat 3]

Generated files go to bench/data/ (gitignored) and are deleted afterwards unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
PHRASE = "is preempted by"

# The same extraction as `parse --json`, written the obvious way: one `re` pass per line.
RE_STATS = re.compile(
    r"(?:Engine (?P<eng>\d+): )?Avg prompt throughput: (?P<pt>[\d.]+) tokens/s, Avg generation "
    r"throughput: (?P<gt>[\d.]+) tokens/s, Running: (?P<run>\d+) reqs, (?:Swapped: (?P<sw>\d+) "
    r"reqs, Pending: (?P<pend>\d+) reqs|Waiting: (?P<wait>\d+) reqs)[^\n]*?(?P<dev>[A-Z]+) KV "
    r"cache usage: (?P<kv>[\d.]+)%"
)
RE_PREEMPT = re.compile(
    r"Sequence group (?P<rid>\S+) is preempted by PreemptionMode\.(?P<mode>RECOMPUTE|SWAP) mode"
    r".*?total_num_cumulative_preemption=(?P<n>\d+)"
)
RE_HEADER = re.compile(
    r"(?P<lvl>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<mon>\d\d)-(?P<day>\d\d) "
    r"(?P<t>\d\d:\d\d:\d\d) \[?(?P<file>[^\]\s:]+):(?P<line>\d+)\] (?P<msg>.*)"
)
RE_ACCESS = re.compile(
    r"INFO:\s+(?P<client>\S+) - \"(?P<method>\S+) (?P<path>\S+) HTTP/(?P<ver>[\d.]+)\" "
    r"(?P<status>\d{3})"
)
RE_REQUEST = re.compile(r"(?:Received|Added|Finished|Aborted) request (?P<rid>[^\s:]+)")


def re_loop(path: str) -> dict[str, object]:
    """Classify every line and extract its fields with the standard library."""
    counts = {"stats": 0, "preempt": 0, "access": 0, "request": 0, "other": 0, "unrec": 0}
    last_stats: tuple[str | None, ...] | None = None
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            header = RE_HEADER.search(line)
            message = header.group("msg") if header else line
            stats = RE_STATS.search(message)
            if stats:
                counts["stats"] += 1
                last_stats = stats.groups()
                continue
            preempt = RE_PREEMPT.search(message)
            if preempt:
                counts["preempt"] += 1
                preempt.groups()
                continue
            access = RE_ACCESS.search(line)
            if access:
                counts["access"] += 1
                access.groups()
                continue
            request = RE_REQUEST.search(message)
            if request:
                counts["request"] += 1
                request.groups()
                continue
            counts["other" if header else "unrec"] += 1
    return {"counts": counts, "last_stats": last_stats}


def frames_full(path: str) -> dict[str, int]:
    """Every frame materialised (what `parse --out` and the analyzer use)."""
    from preemptscope.ingest.logs import iter_parse_path

    rows: dict[str, int] = {}
    for frames in iter_parse_path(path):
        for kind, count in frames.record_counts().items():
            rows[kind] = rows.get(kind, 0) + count
    return rows


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


def _file(size_mb: int) -> Path:
    DATA.mkdir(exist_ok=True)
    path = DATA / f"bench-{size_mb}mb.log"
    if not path.exists():
        subprocess.run(
            [sys.executable, str(HERE / "gen_logs.py"), str(path), str(size_mb)], check=True
        )
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description="preemptscope parse benchmark")
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--rss-sizes", default="", help="comma list of sizes for the RSS check")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-re", action="store_true", help="skip the (slow) re loop")
    parser.add_argument("--keep", action="store_true", help="keep generated files")
    parser.add_argument("--inner", choices=["re", "full"], help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        if args.inner == "re":
            print(json.dumps(re_loop(args.path)))
        else:
            print(json.dumps(frames_full(args.path)))
        return

    path = _file(args.size_mb)
    size_mb = path.stat().st_size / 1e6
    py = sys.executable
    runs = []
    rg = shutil.which("rg")
    if rg:
        runs.append(measure("rg -c", [rg, "-c", PHRASE, str(path)], args.repeat))
    runs.append(measure("grep -c", ["grep", "-c", PHRASE, str(path)], args.repeat))
    parse_argv = [py, "-m", "preemptscope", "parse", str(path), "--json", "--quiet"]
    runs.append(measure("preemptscope parse --json", parse_argv, args.repeat))
    one_thread = {**os.environ, "POLARS_MAX_THREADS": "1"}
    start = time.perf_counter()
    single = subprocess.run(parse_argv, capture_output=True, env=one_thread, check=True)
    single_wall = time.perf_counter() - start
    del single
    full_argv = [py, str(Path(__file__)), "--inner", "full", "--path", str(path)]
    runs.append(measure("all frames materialised", full_argv, 1))
    if not args.skip_re:
        re_argv = [py, str(Path(__file__)), "--inner", "re", "--path", str(path)]
        runs.append(measure("python re loop", re_argv, 1))

    summary = json.loads(runs[[r.name for r in runs].index("preemptscope parse --json")].output)
    base = runs[0]
    print(f"file: {path.name}, {size_mb:.0f} MB, {summary['lines']} lines, cpus={os.cpu_count()}")
    print("| contender | wall s | MB/s | CPU s | peak RSS MB | x rg/grep wall |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run.name} | {run.wall_s:.2f} | {size_mb / run.wall_s:.0f} | {run.cpu_s:.2f} | "
            f"{run.peak_rss_mb:.0f} | {run.wall_s / base.wall_s:.1f} |"
        )
    print(f"(parse --json with POLARS_MAX_THREADS=1: {single_wall:.2f} s)")
    if not args.skip_re:
        ours = runs[[r.name for r in runs].index("preemptscope parse --json")]
        reloop = runs[-1]
        print(f"re loop / parse --json wall: {reloop.wall_s / ours.wall_s:.1f}x")
    print(
        "preemption lines: rg/grep", base.output, "parse", summary["records"]["preemption_warning"]
    )

    for size in [int(s) for s in args.rss_sizes.split(",") if s]:
        sized = _file(size)
        run = measure(
            f"parse --json {size} MB",
            [py, "-m", "preemptscope", "parse", str(sized), "--json", "--quiet"],
        )
        print(f"| {size} MB | wall {run.wall_s:.2f} s | peak RSS {run.peak_rss_mb:.0f} MB |")
        if not args.keep and sized != path:
            sized.unlink()
    print(json.dumps([asdict(r) | {"output": r.output[:200]} for r in runs]))
    if not args.keep:
        path.unlink()


if __name__ == "__main__":
    main()
