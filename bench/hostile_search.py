"""Let hypothesis look for slow line shapes: a bounded search, not a timing test.

Each example is about --mb MB of one line shape: a prefix (nothing, a vLLM header, a stats
record's start, a config line's start, a request line whose prompt holds the rest) and a
unit of pieces (catalogue literals, header parts, digits, brackets, quotes, ANSI codes,
process prefixes...) repeated to a line length of 4 KB to 256 KB. `parse --json` reads it in
this process (best of 2, after a first run) and the cost per MB is compared with a normal log's
(bench/gen_logs.py), measured the same way; hypothesis steers towards the worst ratio
(`target`). The worst shapes found are printed; a class worth keeping goes to
bench/hostile.py, where bench_hostile.py measures it properly (two sizes, a child process).

    python bench/hostile_search.py [--examples 80] [--mb 1] [--seed 1]

With --agree, it searches instead for lines the router and the per-line path read apart
(tests/ingest/test_hostile_agree.py's mixtures, --examples of them, from --seed) and prints
the first one found, shrunk:

    python bench/hostile_search.py --agree [--examples 3000] [--seed 7]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings, target
from hypothesis import strategies as st
from preemptscope.ingest import catalogue as cat

from preemptscope.cli import main as cli

HERE = Path(__file__).resolve().parent
REAL = (
    "INFO 01-15 13:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s,"
    " Avg generation throughput: 90.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs,"
    " GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
)
HEADER = "(APIServer pid=1) INFO 01-15 13:59:55 [logger.py:43] "
PREFIXES = {
    "none": "",
    "header": "INFO 01-15 14:00:00 [core.py:61] ",
    "stats": "INFO 01-15 14:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: ",
    "config": "INFO 01-15 14:00:00 [core.py:61] Initializing a V1 LLM engine with config: ",
    "args": "INFO 01-15 14:00:00 [cli_args.py:325] non-default args: {",
    "namespace": "INFO 05-01 09:40:00 api_server.py:1043] args: Namespace(",
    "json": '{"log": "',
    "prompt": f"{HEADER}Received request chatcmpl-1: prompt: '",
}
PIECES = sorted(
    {row.literal for row in cat.ALL_ROWS if row.literal}
    | {
        "01-",
        "01-15 14:00:00 ",
        "[a.py:1] ",
        "INFO ",
        "1",
        "1.",
        " ",
        ", ",
        "=",
        "x=",
        "'",
        '"',
        "\\",
        "[",
        "]",
        "(",
        ")",
        "{",
        "}",
        ":",
        ": ",
        "[0m",
        "\x1b[",
        "#033[",
        "^[",
        "(x pid=1) ",
        " pid=",
        "\r",
        "a",
        "reqs",
        "%",
        "tokens/s",
        " [repeated 2x across cluster]",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
        "\u2588",
    }
)


def _cost_ms_per_mb(lines: list[str], where: Path) -> float:
    """`parse --json` on a file of `lines`, in this process (after a first run): ms per MB."""
    path = where / "shape.log"
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(REAL + "\n")  # a file without a record is refused before parsing
        for line in lines:
            handle.write(line + "\n")
    best = float("inf")
    for _ in range(2):
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            code = cli(["parse", str(path), "--json", "--quiet"])
        best = min(best, time.perf_counter() - start)
        assert code in (0, 1), code
    return best * 1000 / (path.stat().st_size / 1e6)


def _normal_lines(mb: float, where: Path) -> list[str]:
    path = where / "normal.log"
    subprocess.run(
        [sys.executable, str(HERE / "gen_logs.py"), str(path), str(mb)],
        check=True,
        capture_output=True,
    )
    return path.read_text(encoding="utf-8").splitlines()


def _write_one(where: Path) -> Path:
    path = where / "one-line.log"
    path.write_text(REAL + "\n", encoding="utf-8")
    return path


def _agree(examples: int, seed_value: int) -> None:
    """Look for a mixture of lines the two ways of reading give different frames."""
    sys.path.insert(0, str(HERE.parent))
    from tests.ingest.test_hostile_agree import _assert_agree, mixtures

    @seed(seed_value)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(mixtures())
    def probe(lines: list[str]) -> None:
        _assert_agree(lines)

    try:
        probe()
    except AssertionError as exc:
        print("\n".join(getattr(exc, "__notes__", [])) or repr(exc))
        sys.exit(1)
    print(f"no disagreement in {examples} mixtures (seed {seed_value})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=80)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--agree", action="store_true", help="router vs per-line path")
    args = parser.parse_args()
    if args.agree:
        _agree(args.examples, args.seed)
        return
    size = int(args.mb * 1e6)
    where = Path(tempfile.mkdtemp(prefix="hostile-search-"))
    with contextlib.redirect_stdout(io.StringIO()):
        cli(["parse", str(_write_one(where)), "--json", "--quiet"])  # start-up, imports
    normal = _cost_ms_per_mb(_normal_lines(args.mb, where), where)
    print(f"normal log: {normal:.1f} ms/MB (parse --json in this process, best of 2)")
    found: list[tuple[float, str, str, int, float]] = []

    @seed(args.seed)
    @settings(
        max_examples=args.examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        prefix=st.sampled_from(sorted(PREFIXES)),
        unit=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
        length=st.sampled_from([4_096, 16_384, 65_536, 262_144]),
    )
    def probe(prefix: str, unit: str, length: int) -> None:
        head = PREFIXES[prefix]
        body = unit * max(1, (length - len(head)) // len(unit))
        if prefix == "prompt":
            body = repr(body)[1:-1] + "', params: SamplingParams(n=1), lora_request: None."
        line = head + body
        lines = [line] * max(1, size // len(line))
        cost = _cost_ms_per_mb(lines, where)
        ratio = cost / normal
        target(ratio)
        found.append((ratio, prefix, unit, length, cost))

    try:
        probe()
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(f"\nworst of {len(found)} shapes (x normal, ms/MB, prefix, line length, unit):")
    seen: set[tuple[str, str, int]] = set()
    for ratio, prefix, unit, length, cost in sorted(found, reverse=True):
        if (prefix, unit, length) in seen:
            continue
        seen.add((prefix, unit, length))
        print(f"{ratio:6.1f}x {cost:8.1f}  {prefix:9s} {length:7d}  {unit!r}")
        if len(seen) >= args.top:
            break


if __name__ == "__main__":
    main()
