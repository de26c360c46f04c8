"""Adversarial inputs per MB, side by side with a normal log of the same size, in one run.

Every class of bench/hostile.py is written to a file of each --size-mb, next to a normal log
of the same size (bench/gen_logs.py). Each file is read by `parse --json` (and with
--report, `report --json`) in a child process of its own that imports the CLI, runs it once
on a one-line log (start-up, lazy imports), then times the command on the file (best of
--repeat): what is left is the cost per MB after start-up, without the start-up's noise.
Peak RSS of the child comes from wait4(). Two sizes show whether the cost per MB stays flat
(linear time). Then the inputs that must end with an error or a cut: one line of --long-mb
without a newline (cut and counted), a gzip of 1 GB of zeros (a bomb), /dev/zero (endless).
Read the ratios: the machine is shared. Usage:

    python bench/bench_hostile.py [--size-mb 8,32] [--long-mb 300] [--report] [--compare REF]
    python bench/bench_hostile.py --child FILE ONE_LINE_LOG parse 3 [ROOT]   (one measurement)

`--compare REF` also times `parse --json` of REF (its preemptscope/ and ingest/ unpacked with
`git archive`, as bench_parse_small.py does) on the same files, interleaved: before and after
side by side in one run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# Siblings in bench/ (not a package): mypy cannot follow them.
import hostile  # type: ignore[import-not-found]  # noqa: E402
from bench_parse import Run, checkout, measure  # type: ignore[import-not-found]  # noqa: E402

# One real record first: a file with none is refused as "not a vLLM log" before anything
# else is reported (ingest/sniff.py).
REAL = (
    "INFO 01-15 13:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s,"
    " Avg generation throughput: 90.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs,"
    " GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
)


def _argv(command: str, path: Path | str) -> list[str]:
    if command == "parse":
        return ["parse", str(path), "--json", "--quiet"]
    return ["report", str(path), "--json"]


def child(path: str, one_line: str, command: str, repeat: int, root: str | None) -> None:
    """In this process: the CLI once on `one_line` (start-up), then best of `repeat` on
    `path`; prints {"wall_s", "cpu_s"} (CPU of every thread, Polars' pool included).
    With `root`, the packages of that checkout shadow the installed ones."""
    if root is not None:
        import preemptscope.ingest

        import preemptscope

        preemptscope.__path__[:] = [str(Path(root) / "preemptscope")]
        preemptscope.ingest.__path__[:] = [str(Path(root) / "ingest")]
    from preemptscope.ingest import logs

    from preemptscope.cli import main as cli

    assert root is None or logs.__file__.startswith(root), logs.__file__

    with contextlib.redirect_stdout(io.StringIO()):
        cli(_argv(command, one_line))
    best = (float("inf"), 0.0)
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(_argv(command, path))
        if code not in (0, 1):
            raise SystemExit(f"{command} {path}: exit {code}")
        best = min(best, (time.perf_counter() - wall, time.process_time() - cpu))
    print(json.dumps({"wall_s": best[0], "cpu_s": best[1]}))


def _timed(
    path: Path, one_line: Path, command: str, repeat: int, root: Path | None = None
) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of `command` on `path` after start-up, in a child."""
    argv = [sys.executable, __file__, "--child", str(path), str(one_line), command, str(repeat)]
    argv += [str(root)] if root is not None else []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read().decode()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"{command} {path} failed: {err.read().decode()[-500:]}")
    timing = json.loads(out.strip().splitlines()[-1])
    return float(timing["wall_s"]), float(timing["cpu_s"]), usage.ru_maxrss / 1024


def _write(path: Path, name: str, size: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(REAL + "\n")
        written = 0
        while written < size:
            for line in hostile.lines(name, min(size, 4 << 20)):
                handle.write(line + "\n")
                written += len(line) + 1


def _error_run(name: str, argv: list[str]) -> tuple[Run, int, str]:
    """Run argv expecting a failure: (wall and peak RSS, exit code, last line of stderr)."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read().decode("utf-8", "replace").strip()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    run = Run(name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, "")
    return run, os.waitstatus_to_exitcode(status), err.splitlines()[-1][:300] if err else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", default="8,32", help="comma-separated sizes")
    parser.add_argument("--long-mb", type=int, default=300)
    parser.add_argument("--classes", default=",".join(hostile.CLASSES))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--report", action="store_true", help="also time report --json")
    parser.add_argument("--compare", help="git ref whose parse --json to time beside")
    parser.add_argument("--child", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        root = args.child[4] if len(args.child) > 4 else None
        child(args.child[0], args.child[1], args.child[2], int(args.child[3]), root)
        return
    commands = ["parse", "report"] if args.report else ["parse"]
    other = checkout(args.compare) if args.compare else None
    if other is not None:
        commands.append("before")
    sizes = [float(x) for x in args.size_mb.split(",")]
    names = args.classes.split(",")
    print(f"cpus={os.cpu_count()}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        base = Path(tmp)
        one_line = base / "one-line.log"
        one_line.write_text(REAL + "\n", encoding="utf-8")
        floor = measure(
            "start-up", [sys.executable, "-m", "preemptscope", *_argv("parse", one_line)], 3
        )
        print(
            f"start-up of parse --json (a one-line log, best of 3): {floor.wall_s:.2f} s,"
            " not counted"
        )
        # name -> size -> command -> (ms per MB wall, ms per MB CPU, peak RSS MB)
        table: dict[str, dict[float, dict[str, tuple[float, float, float]]]] = {}
        for size_mb in sizes:
            normal = base / f"normal-{size_mb:g}.log"
            subprocess.run(
                [sys.executable, str(HERE / "gen_logs.py"), str(normal), str(size_mb)],
                check=True,
                capture_output=True,
            )
            for name in ["normal", *names]:
                path = normal if name == "normal" else base / f"{name}.log"
                if name != "normal":
                    _write(path, name, int(size_mb * 1e6))
                mb = path.stat().st_size / 1e6
                for command in commands:
                    if command == "before":
                        wall, cpu, rss = _timed(path, one_line, "parse", args.repeat, other)
                    else:
                        wall, cpu, rss = _timed(path, one_line, command, args.repeat)
                    row = table.setdefault(name, {}).setdefault(size_mb, {})
                    row[command] = (wall * 1000 / mb, cpu * 1000 / mb, rss)
                path.unlink()
        print(f"load after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        for command in commands:
            head = " | ".join(f"{s:g} MB: ms/MB wall (CPU) / x normal / peak RSS MB" for s in sizes)
            title = f"parse --json of {args.compare}" if command == "before" else command
            print(
                f"\n`{title}` after start-up\n\n| input | {head}"
                f" | cost per MB, {sizes[-1]:g} MB / {sizes[0]:g} MB |"
            )
            print("|---|" + "---|" * (len(sizes) + 1))
            for name, by_size in table.items():
                cells = []
                for size_mb in sizes:
                    wall, cpu, rss = by_size[size_mb][command]
                    ref = table["normal"][size_mb][command][0]
                    cells.append(f"{wall:.1f} ({cpu:.1f}) / {wall / ref:.1f} / {rss:.0f}")
                growth = by_size[sizes[-1]][command][0] / by_size[sizes[0]][command][0]
                print(f"| {name} | {' | '.join(cells)} | {growth:.2f} |")

        if other is not None:
            print(f"\n`parse --json`, {args.compare} beside this tree (wall ms/MB, x normal)\n")
            print("| input | " + " | ".join(f"{s:g} MB: before / after" for s in sizes) + " |")
            print("|---|" + "---|" * len(sizes))
            for name, by_size in table.items():
                cells = []
                for size_mb in sizes:
                    old, new = by_size[size_mb]["before"][0], by_size[size_mb]["parse"][0]
                    old_x = old / table["normal"][size_mb]["before"][0]
                    new_x = new / table["normal"][size_mb]["parse"][0]
                    cells.append(f"{old:.1f} ({old_x:.1f}x) / {new:.1f} ({new_x:.1f}x)")
                print(f"| {name} | {' | '.join(cells)} |")

        # One line of --long-mb bytes without a newline, between two ordinary lines.
        long = base / "long.log"
        with open(long, "wb") as handle:
            handle.write(hostile.received("x").encode() + b"\n")
            block = b"01-" * (1 << 20)
            for _ in range(args.long_mb * 1_000_000 // len(block)):
                handle.write(block)
            handle.write(b"\n" + hostile.received("y").encode() + b"\n")
        py = [sys.executable, "-m", "preemptscope"]
        run = measure("long line", [*py, *_argv("parse", long)])
        print(
            f"\none {args.long_mb} MB line: parse --json {run.wall_s:.2f} s,"
            f" peak RSS {run.peak_rss_mb:.0f} MB; {run.output[:160]}"
        )
        long.unlink()
        bomb = base / "bomb.log.gz"
        with gzip.open(bomb, "wb", compresslevel=9) as packed:
            zeros = b"\0" * (1 << 24)
            for _ in range(64):  # 1 GiB
                packed.write(zeros)
        for label, target in (("gzip of 1 GiB zeros", bomb), ("/dev/zero", Path("/dev/zero"))):
            run, code, err = _error_run(label, [*py, *_argv("parse", target)])
            print(
                f"{label}: exit {code} after {run.wall_s:.2f} s,"
                f" peak RSS {run.peak_rss_mb:.0f} MB: {err}"
            )


if __name__ == "__main__":
    main()
