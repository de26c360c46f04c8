"""The line split of the reader (ingest/_reader.py), this tree beside a git ref, in one run.

Reads a log in the reader's chunks (iter_blocks) and splits each chunk into its lines with
this tree's `split_lines` and with the ref's (its ingest/_reader.py and what it imports,
unpacked by `git archive` as bench_parse.py does), interleaved, best of --repeat; checks that
both give the same Series (text, CRLF, U+FFFD for invalid UTF-8) on every chunk. Inputs: a
generated log (bench/gen_logs.py) and the same with CRLF line ends and an invalid UTF-8 byte
every 64 lines. Usage:

    python bench/bench_split.py [--size-mb 64] [--repeat 5] [--compare REF]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import polars as pl

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_parse import checkout  # type: ignore[import-not-found]  # noqa: E402
from preemptscope.ingest import _reader  # noqa: E402

Split = Callable[[memoryview], pl.Series]


def _ref_reader(ref: str) -> ModuleType:
    """The ref's ingest/_reader.py as a module of its own (its imports from this tree)."""
    root = checkout(ref)
    spec = importlib.util.spec_from_file_location("ref_reader", root / "ingest" / "_reader.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ref_reader"] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _hostile_copy(src: Path, dst: Path) -> None:
    """`src` with CRLF line ends and an invalid UTF-8 byte on every 64th line."""
    with open(src, "rb") as inp, open(dst, "wb") as out:
        for number, line in enumerate(inp):
            body = line.rstrip(b"\n")
            if number % 64 == 0:
                body += b" \xff\xfe"
            out.write(body + b"\r\n")


def _time(split: Split, blocks: list[memoryview], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for block in blocks:
            split(block)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=float, default=64)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--compare", default="main", help="git ref to time beside")
    args = parser.parse_args()
    ref = _ref_reader(args.compare)
    print(f"cpus={os.cpu_count()}, load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"\n| input | {args.compare} ms | this tree ms | this / {args.compare} | MB/s (this) |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="split-") as tmp:
        normal = Path(tmp) / "normal.log"
        subprocess.run(
            [sys.executable, str(HERE / "gen_logs.py"), str(normal), str(args.size_mb)],
            check=True,
            capture_output=True,
        )
        hostile = Path(tmp) / "crlf-invalid.log"
        _hostile_copy(normal, hostile)
        for name, path in (("normal", normal), ("CRLF + invalid UTF-8", hostile)):
            blocks = [block.view for block in _reader.iter_blocks(str(path))]
            for block in blocks:
                new, old = _reader.split_lines(block), ref.split_lines(block)
                if not new.equals(old, check_names=True):
                    raise SystemExit(f"{name}: the two splits differ")
            times = {"old": 0.0, "new": 0.0}
            for _ in range(2):  # interleaved: each side twice, best kept
                for side, split in (("old", ref.split_lines), ("new", _reader.split_lines)):
                    took = _time(split, blocks, args.repeat)
                    times[side] = took if not times[side] else min(times[side], took)
            mb = path.stat().st_size / 1e6
            old_ms, new_ms = times["old"] * 1000, times["new"] * 1000
            print(
                f"| {name} ({mb:.0f} MB, {len(blocks)} chunks) | {old_ms:.1f} | {new_ms:.1f}"
                f" | {new_ms / old_ms:.2f} | {mb / times['new']:.0f} |"
            )
    print(f"load after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
