"""Adversarial inputs per MB, side by side with a normal log of the same size, in one run.

Every class of bench/hostile.py is written to a file of --size-mb, next to a normal log of the
same size (bench/gen_logs.py); `parse --json` and `report --json` read each in their own
process (wall, CPU, peak RSS via wait4()). Then the inputs that must end with an error or a
cut: one line of --long-mb without a newline (cut and counted), a gzip of 1 GB of zeros (a
bomb), /dev/zero (endless). Read the ratios: the machine is shared. Usage:

    python bench/bench_hostile.py [--size-mb 16] [--long-mb 300]
"""

from __future__ import annotations

import argparse
import gzip
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
from bench_parse import Run, measure  # type: ignore[import-not-found]  # noqa: E402

# One real record first: a file with none is refused as "not a vLLM log" before anything
# else is reported (preemptscope/sniff.py).
REAL = (
    "INFO 01-15 13:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s,"
    " Avg generation throughput: 90.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs,"
    " GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
)


def _write(path: Path, name: str, size: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(REAL + "\n")
        written = 0
        while written < size:
            for line in hostile.lines(name, min(size, 4 << 20)):
                handle.write(line + "\n")
                written += len(line) + 1


def _commands(path: Path) -> dict[str, list[str]]:
    py = sys.executable
    return {
        "parse": [py, "-m", "preemptscope", "parse", str(path), "--json", "--quiet"],
        "report": [py, "-m", "preemptscope", "report", str(path), "--json"],
    }


def _error_run(name: str, argv: list[str]) -> tuple[Run, int, str]:
    """Run argv expecting a failure: (wall and peak RSS, exit code, last line of stderr)."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert child.stderr is not None
    err = child.stderr.read().decode("utf-8", "replace").strip()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    run = Run(name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, "")
    return run, os.waitstatus_to_exitcode(status), err.splitlines()[-1][:300] if err else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=float, default=16.0)
    parser.add_argument("--long-mb", type=int, default=300)
    parser.add_argument("--classes", default=",".join(hostile.CLASSES))
    args = parser.parse_args()
    size = int(args.size_mb * 1e6)
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        base = Path(tmp)
        normal = base / "normal.log"
        subprocess.run(
            [sys.executable, str(HERE / "gen_logs.py"), str(normal), str(args.size_mb)],
            check=True,
            capture_output=True,
        )
        # The fixed cost of a command (start-up, imports: a one-line log) is taken off.
        empty = base / "one-line.log"
        empty.write_text(REAL + "\n", encoding="utf-8")
        floor = {k: measure(k, argv, 3).wall_s for k, argv in _commands(empty).items()}
        rows: list[tuple[str, float, dict[str, Run]]] = []
        reference = {k: measure(k, argv) for k, argv in _commands(normal).items()}
        rows.append(("normal log (gen_logs.py)", normal.stat().st_size / 1e6, reference))
        for name in args.classes.split(","):
            path = base / f"{name}.log"
            _write(path, name, size)
            runs = {k: measure(k, argv) for k, argv in _commands(path).items()}
            rows.append((name, path.stat().st_size / 1e6, runs))
            path.unlink()
        print(f"cpus={os.cpu_count()}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print(
            "| input | MB | parse s/MB | x normal | parse peak RSS MB"
            " | report s/MB | x normal | report peak RSS MB |"
        )
        print("|---|---|---|---|---|---|---|---|")
        print(
            f"start-up floor (a one-line log): parse {floor['parse']:.2f} s,"
            f" report {floor['report']:.2f} s, taken off below"
        )

        def per_mb(run: Run, kind: str, mb: float) -> float:
            return float(max(0.0, run.wall_s - floor[kind]) / mb)

        normal_mb = rows[0][1]
        for name, mb, runs in rows:
            p, r = runs["parse"], runs["report"]
            px = per_mb(p, "parse", mb) / max(1e-9, per_mb(reference["parse"], "parse", normal_mb))
            rx = per_mb(r, "report", mb) / max(
                1e-9, per_mb(reference["report"], "report", normal_mb)
            )
            print(
                f"| {name} | {mb:.1f} | {per_mb(p, 'parse', mb):.4f} | {px:.1f}"
                f" | {p.peak_rss_mb:.0f} | {per_mb(r, 'report', mb):.4f} | {rx:.1f}"
                f" | {r.peak_rss_mb:.0f} |"
            )

        # One line of --long-mb bytes without a newline, between two ordinary lines.
        long = base / "long.log"
        with open(long, "wb") as handle:
            handle.write(hostile.received("x").encode() + b"\n")
            block = b"01-" * (1 << 20)
            for _ in range(args.long_mb * 1_000_000 // len(block)):
                handle.write(block)
            handle.write(b"\n" + hostile.received("y").encode() + b"\n")
        run = measure("long line", _commands(long)["parse"])
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
            run, code, err = _error_run(label, _commands(target)["parse"])
            print(
                f"{label}: exit {code} after {run.wall_s:.2f} s,"
                f" peak RSS {run.peak_rss_mb:.0f} MB: {err}"
            )


if __name__ == "__main__":
    main()
