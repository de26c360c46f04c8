"""Benchmark the streaming request join (ingest/lifecycle.py `RequestJoin`) alone, in process.

The log is parsed once, as `report` reads it (REDUCED kinds, one chunk at a time); its
request frames are kept and fed to a fresh RequestJoin per run, serially (one Polars thread
unless POLARS_MAX_THREADS is set). With `--baseline DIR` (another version's ingest/, e.g.
`git worktree add /tmp/base REV` then `--baseline /tmp/base/ingest`; its lifecycle*.py are
loaded in place of ours while it is imported) both run in the same process, interleaved, best
of `--repeat`, and their ARRIVALS/JOINED rows must be equal. Timings on a shared machine are
noisy: read the ratio. Nothing here is a test. Usage:

    python bench/bench_join.py LOG [--baseline DIR ...] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.util
import os
import sys
import time
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

os.environ.setdefault("POLARS_MAX_THREADS", "1")

import polars as pl
from preemptscope.ingest import lifecycle
from preemptscope.ingest.logs import REDUCED, iter_parse_path


class _From(importlib.abc.MetaPathFinder):
    """Finds preemptscope.ingest.lifecycle* in another version's ingest/ directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def find_spec(self, name: str, path: object, target: object = None) -> ModuleSpec | None:
        stem = name.rpartition(".")[2]
        file = self.directory / f"{stem}.py"
        if not name.startswith(f"{_FAMILY}.lifecycle") or not file.is_file():
            return None
        return importlib.util.spec_from_file_location(name, file)


_FAMILY = "preemptscope.ingest"


def _load(directory: str) -> ModuleType:
    """Another version's lifecycle (and the lifecycle_* modules it imports), ours restored."""
    ours = {k: v for k, v in sys.modules.items() if k.startswith(f"{_FAMILY}.lifecycle")}
    finder = _From(Path(directory))
    if not (finder.directory / "lifecycle.py").is_file():
        raise SystemExit(f"{directory}: no lifecycle.py (give another version's ingest/)")
    for name in ours:
        del sys.modules[name]
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(f"{_FAMILY}.lifecycle")
    finally:
        sys.meta_path.remove(finder)
        for name in [k for k in sys.modules if k.startswith(f"{_FAMILY}.lifecycle")]:
            del sys.modules[name]
        sys.modules.update(ours)
        package = sys.modules[_FAMILY]
        for name, module in ours.items():  # the import bound the baseline's to the package
            setattr(package, name.rpartition(".")[2], module)


def _run(
    module: ModuleType, chunks: list[pl.DataFrame]
) -> tuple[float, float, pl.DataFrame, pl.DataFrame]:
    """Wall and CPU seconds (the process's: on a busy machine, what the join itself used)."""
    join = module.RequestJoin()
    arrivals, joined = [], []
    cpu = time.process_time()
    started = time.perf_counter()
    for chunk in chunks:
        a, j = join.add(chunk)
        arrivals.append(a)
        joined.append(j)
    a, j = join.close()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu
    arrivals.append(a)
    joined.append(j)
    return seconds, cpu, pl.concat(arrivals), pl.concat(joined)


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.sort(frame.columns, nulls_last=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log")
    parser.add_argument(
        "--baseline",
        action="append",
        default=[],
        help="another version's ingest/ (repeatable)",
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    chunks = [
        part["requests"]
        for part in iter_parse_path(args.log, deployment="bench", keep=REDUCED)
        if part["requests"].height
    ]
    rows = sum(chunk.height for chunk in chunks)
    size = os.path.getsize(args.log) / 1e6
    print(f"{args.log}: {size:.0f} MB, {len(chunks)} chunks, {rows:,} request rows")
    print(f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}, cpus={os.cpu_count()}")
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    modules = {f"baseline{i or ''}": _load(path) for i, path in enumerate(args.baseline)}
    modules["current"] = lifecycle
    best = {name: float("inf") for name in modules}
    best_cpu = dict(best)
    outputs: dict[str, tuple[pl.DataFrame, pl.DataFrame]] = {}
    for _ in range(args.repeat):
        for name, module in modules.items():
            seconds, cpu, arrivals, joined = _run(module, chunks)
            best[name] = min(best[name], seconds)
            best_cpu[name] = min(best_cpu[name], cpu)
            outputs[name] = (arrivals, joined)
    for name, seconds in best.items():
        arrivals, joined = outputs[name]
        print(
            f"{name:9s} {seconds:6.3f} s wall, {best_cpu[name]:6.3f} s CPU  "
            f"{seconds / rows * 1e9:6.0f} ns/request row  "
            f"{arrivals.height:,} arrivals, {joined.height:,} joined"
        )
    if args.baseline:
        same = all(
            _canonical(a).equals(_canonical(b))
            for name in modules
            for a, b in zip(outputs["baseline"], outputs[name], strict=True)
        )
        ratios = ", ".join(
            f"{name}/baseline {best[name] / best['baseline']:.2f} wall, "
            f"{best_cpu[name] / best_cpu['baseline']:.2f} CPU"
            for name in list(modules)[1:]
        )
        print(f"{ratios}; same rows: {same}")
        if not same:
            raise SystemExit(1)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
