"""Fixed cost of `parse_lines` on small batches (what the live service parses every tick).

Lines come from bench/gen_logs.py (all three eras, in a small generated file); each batch size
is parsed `--calls` times in a row with one ParseState, as exporter/service.py does, after a
warm-up. Reported per call: wall ms and CPU ms (user + sys of this process, so Polars' own
threads count). Nothing here is a test. Usage:

    python bench/bench_parse_small.py [--sizes 10,100,1000,10000] [--calls 40] [--compare REF]

`--compare REF` also runs the same batches through `parse_lines` of REF (its ingest/ and
preemptscope/ unpacked with `git archive` into the temp directory) in a child process,
interleaved size by size, so both versions see the same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
sys.path.insert(0, str(HERE))

# A sibling in bench/ (not a package): mypy cannot follow it.
from bench_parse import checkout  # type: ignore[import-not-found]  # noqa: E402


def _lines(count: int) -> list[str]:
    """At least `count` generated log lines (the generator writes whole eras)."""
    DATA.mkdir(exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=DATA, suffix=".log", delete=False) as handle:
        path = Path(handle.name)
    try:
        subprocess.run(
            [sys.executable, str(HERE / "gen_logs.py"), str(path), "8"],
            check=True,
            capture_output=True,
        )
        lines = path.read_text(encoding="utf-8").splitlines()
    finally:
        path.unlink(missing_ok=True)
    while len(lines) < count:
        lines = lines + lines
    return lines


def time_batches(lines: list[str], size: int, calls: int) -> tuple[float, float, int]:
    """Median wall ms, mean CPU ms per call, and rows produced, for batches of `size` lines."""
    from preemptscope.ingest.logs import ParseOptions, ParseState, parse_lines

    options = ParseOptions(year=2026)
    state = ParseState()
    walls: list[float] = []
    rows = 0
    # A tail of the file, so every batch sees the same mix; one warm-up call first.
    start_line = 1
    for k in range(calls + 1):
        offset = (k * size) % max(1, len(lines) - size)
        batch = lines[offset : offset + size]
        wall0 = time.perf_counter()
        cpu0 = time.process_time() if k == 1 else None
        frames = parse_lines(
            batch,
            source="bench",
            deployment="bench",
            first_line=start_line,
            options=options,
            state=state,
            final=False,
        )
        start_line += len(batch)
        if k == 1:
            cpu_start = cpu0
        if k >= 1:
            walls.append(time.perf_counter() - wall0)
            rows += sum(frames.record_counts().values())
    assert cpu_start is not None
    cpu = time.process_time() - cpu_start
    walls.sort()
    return walls[len(walls) // 2] * 1e3, cpu / calls * 1e3, rows


def _child(args: argparse.Namespace) -> None:
    lines = Path(args.lines_file).read_text(encoding="utf-8").split("\n")
    print(json.dumps(time_batches(lines, args.size, args.calls)))


def _run_child(root: Path, lines_file: Path, size: int, calls: int) -> tuple[float, float, int]:
    """Run time_batches for the checkout at `root` (its packages shadow the installed ones)."""
    code = (
        "import sys, importlib, json;"
        "import preemptscope, pathlib;"
        f"root = pathlib.Path({str(root)!r});"
        "preemptscope.__path__[:] = [str(root / 'preemptscope')];"
        "import preemptscope.ingest as _i;"
        "_i.__path__[:] = [str(root / 'ingest')];"
        f"sys.argv = ['x', '--child', '--size', '{size}', '--calls', '{calls}',"
        f" '--lines-file', {str(lines_file)!r}];"
        f"sys.path.insert(0, {str(HERE)!r});"
        "import bench_parse_small as b;"
        "import preemptscope.ingest.logs as logs;"
        f"assert logs.__file__.startswith({str(root)!r}), logs.__file__;"
        "b.main()"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    wall, cpu, rows = json.loads(out.strip().splitlines()[-1])
    return float(wall), float(cpu), int(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description="parse_lines fixed cost on small batches")
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--compare", help="git ref to compare against (e.g. HEAD~1)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--lines-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s]
    lines = _lines(max(sizes) * 2)
    DATA.mkdir(exist_ok=True)
    lines_file = DATA / "bench-small-lines.txt"
    lines_file.write_text("\n".join(lines), encoding="utf-8")
    here_root = HERE.parent
    other = checkout(args.compare) if args.compare else None
    print(f"{len(lines)} lines available, cpus={os.cpu_count()}, {args.calls} calls per size")
    if other is None:
        print("| lines per call | wall ms (median) | CPU ms per call | rows per call |")
        print("|---|---|---|---|")
    else:
        print(
            f"| lines per call | {args.compare} wall ms | {args.compare} CPU ms | "
            "now wall ms | now CPU ms | CPU ratio |"
        )
        print("|---|---|---|---|---|---|")
    try:
        for size in sizes:
            now = _run_child(here_root, lines_file, size, args.calls)
            if other is None:
                print(f"| {size} | {now[0]:.1f} | {now[1]:.1f} | {now[2] / args.calls:.0f} |")
                continue
            before = _run_child(other, lines_file, size, args.calls)
            if before[2] != now[2]:
                print(f"  rows differ at {size}: before {before[2]}, now {now[2]}")
            print(
                f"| {size} | {before[0]:.1f} | {before[1]:.1f} | {now[0]:.1f} | {now[1]:.1f} | "
                f"{before[1] / now[1]:.1f}x |"
            )
    finally:
        lines_file.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
