"""Peak RSS of `preemptscope report --json` at several log sizes, this tree beside another commit.

Issue 12 asks for peak RSS flat in file size: a 4 GB log at most 1.3x a 1 GB one, and at most
600 MB. Each size's log comes from bench/gen_logs.py (bench/data/bench-PROFILE-SIZEmb.log, made
once and kept when it exists). Runs alternate (this tree, the other commit, this tree, ...) so
both see the same load on a shared machine; each is a child process measured with wait4():
peak RSS (ru_maxrss), CPU (user + sys) and wall time. The report of both is compared too
(minus `generated_at`): a memory change must not change a number. Nothing here is a test.

    python bench/bench_memory.py --sizes 256,1024,4096 [--compare f598d30] [--runs 1]
        [--profile mixed] [--data DIR]

Prints one row per size (the median of `--runs` per side), the ratio this / other, and the
flatness ratios (each size's peak over the 1 GB one, or over the smallest size).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parse import _cli, _file, checkout  # type: ignore[import-not-found]
from bench_parse import measure as _measure


@dataclass
class Sample:
    peak_mb: float
    cpu_s: float
    wall_s: float
    report: dict[str, object]


def measure(argv: list[str]) -> Sample:
    """One report in a child process (bench_parse.measure: wait4()'s peak RSS, CPU, wall)."""
    run = _measure("report", argv)
    report = json.loads(run.output)
    report.pop("generated_at", None)
    return Sample(run.peak_rss_mb, run.cpu_s, run.wall_s, report)


def main() -> None:
    parser = argparse.ArgumentParser(description="peak RSS of report --json by log size")
    parser.add_argument("--sizes", default="256,1024,4096", help="comma list of sizes (MiB)")
    parser.add_argument("--compare", default="f598d30", help="git ref measured beside this tree")
    parser.add_argument("--runs", type=int, default=1, help="runs per side and size (median)")
    parser.add_argument("--profile", default="mixed", help="gen_logs.py profile")
    parser.add_argument(
        "--data", type=Path, help="read bench-PROFILE-SIZEmb.log from here (none generated)"
    )
    args = parser.parse_args()
    other = checkout(args.compare)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rows: dict[int, tuple[list[Sample], list[Sample]]] = {}
    for size in sizes:
        if args.data is None:
            path = str(_file(size, args.profile))
        else:
            path = str(args.data / f"bench-{args.profile}-{size}mb.log")
            if not Path(path).exists():
                raise SystemExit(f"{path}: no such file")
        mine: list[Sample] = []
        theirs: list[Sample] = []
        for number in range(args.runs):
            # Alternate which side goes first: a load that comes and goes hits both.
            order = [(mine, None), (theirs, other)]
            for samples, root in order if number % 2 == 0 else order[::-1]:
                samples.append(measure(_cli(root, "report", path, "--json")))
        if any(s.report != mine[0].report for s in mine + theirs):
            raise SystemExit(f"{path}: report --json differs from {args.compare}'s")
        rows[size] = (mine, theirs)
        print(f"{size} MiB done", file=sys.stderr)

    def med(samples: list[Sample], field: str) -> float:
        return float(statistics.median(float(getattr(s, field)) for s in samples))

    print(f"\nprofile {args.profile}, {args.runs} run(s) per side, cpus={os.cpu_count()}")
    print(
        f"| log | peak RSS MB | {args.compare} MB | ratio | CPU s | {args.compare} CPU s | "
        "CPU ratio |"
    )
    print("|---|---|---|---|---|---|---|")
    for size, (mine, theirs) in rows.items():
        peak, base = med(mine, "peak_mb"), med(theirs, "peak_mb")
        cpu, base_cpu = med(mine, "cpu_s"), med(theirs, "cpu_s")
        print(
            f"| {size} MiB | {peak:.0f} | {base:.0f} | {peak / base:.2f} | {cpu:.1f} | "
            f"{base_cpu:.1f} | {cpu / base_cpu:.2f} |"
        )
    unit = 1024 if 1024 in rows else min(rows)
    for size in rows:
        if size == unit:
            continue
        mine_ratio = med(rows[size][0], "peak_mb") / med(rows[unit][0], "peak_mb")
        their_ratio = med(rows[size][1], "peak_mb") / med(rows[unit][1], "peak_mb")
        print(
            f"peak at {size} MiB / {unit} MiB: {mine_ratio:.2f}x "
            f"({args.compare}: {their_ratio:.2f}x)"
        )


if __name__ == "__main__":
    main()
