"""Adversarial log text, for bench_hostile.py (cost per MB) and tests/ingest (results).

Each input is what a user of the LLM service can put into a log through a prompt (vLLM logs
prompts with repr in `Received request ...: prompt: '...'`) or a request's query string
(uvicorn logs it raw in the access line), or what a damaged or hostile file holds.
`lines(name, size)` gives about `size` bytes of physical lines of one class. What each class
costs, before and after the work it prompted, is in docs/benchmarks.md (adversarial inputs
per MB); the docstrings say what makes a class hard, not what it costs.
"""

from __future__ import annotations

from collections.abc import Callable

HEADER = "(APIServer pid=1) INFO 01-15 13:59:55 [logger.py:43] "
STATS_HEAD = "INFO 01-15 14:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: "


def received(prompt: str, rid: int = 1) -> str:
    """A V1 `Received request` line holding `prompt` (as vLLM writes it, with repr)."""
    return (
        f"{HEADER}Received request chatcmpl-{rid:032x}: prompt: {prompt!r}, params:"
        " SamplingParams(n=1, temperature=0.7), prompt_token_ids: [1, 2, 3], lora_request: None."
    )


def _repeat(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


def dash_runs(size: int) -> list[str]:
    """`01-01-01-...`: every position starts a timestamp candidate (100 KB per line)."""
    per = min(size, 100_000)
    return [_repeat("01-", per) for _ in range(max(1, size // per))]


def dash_runs_prompt(size: int) -> list[str]:
    per = min(size, 100_000)
    return [received(_repeat("01-", per), i) for i in range(max(1, size // per))]


def config_prompt(size: int) -> list[str]:
    """A 256 KB prompt that reads like an engine config (`key=value, ` after `with config:`)."""
    per = min(size, 256_000)
    lead = "Initializing a V1 LLM engine with config: "
    body = lead + _repeat("model='m', max_num_seqs=8, ", per)
    return [received(body, i) for i in range(max(1, size // per))]


def config_line(size: int) -> list[str]:
    """The same text as a line of its own (no request around it)."""
    per = min(size, 256_000)
    body = _repeat("model='m', max_num_seqs=8, (x=[1, 'a'], ", per)
    line = f"INFO 01-15 14:00:00 [core.py:61] Initializing a V1 LLM engine with config: {body}"
    return [line] * max(1, size // per)


def non_default_args(size: int) -> list[str]:
    """64 KB `non-default args: {...}` dict literals (a parser of the whole literal pays for
    every byte of it)."""
    per = min(size, 64_000)
    body = "{'model': 'm', " + _repeat("'k': [1, 'a', (2, 3)], 'max_num_seqs': 8, ", per) + "}"
    line = f"INFO 01-15 14:00:00 [cli_args.py:325] non-default args: {body}"
    return [line] * max(1, size // per)


def ansi_brackets(size: int) -> list[str]:
    """100 KB of `[` runs with one colour code at the end (every bracket starts a try of an
    ANSI pattern with an optional prefix)."""
    per = min(size, 100_000)
    line = _repeat("[", per) + "\x1b[0m"
    return [line] * max(1, size // per)


def bare_literal(size: int) -> list[str]:
    """4 KB lines without an envelope made of a catalogue literal and symbols (found by
    bench/hostile_search.py): each may be a hard-wrap's first half, so the next is joined."""
    unit = "1.{non-default args: '"
    line = _repeat(unit, 4_096)
    return [line] * max(1, size // len(line))


def bare_name(size: int) -> list[str]:
    """The same lines opening with a name (`x non-default args: '`): each may also be the start
    of a process prefix that a next line ` pid=1) INFO ... ` would complete."""
    unit = "x non-default args: '"
    line = _repeat(unit, 4_096)
    return [line] * max(1, size // len(line))


def stats_digits(size: int) -> list[str]:
    """128 KB of digits after a stats prefix (`[\\d.]+` runs and the fields after them)."""
    per = min(size, 128_000)
    return [STATS_HEAD + _repeat("1", per) for _ in range(max(1, size // per))]


def stats_digits_prompt(size: int) -> list[str]:
    per = min(size, 128_000)
    return [received(STATS_HEAD + _repeat("1", per), i) for i in range(max(1, size // per))]


def headers_prompt(size: int) -> list[str]:
    """A prompt of back-to-back fake headers and records (the splitter's worst case)."""
    per = min(size, 100_000)
    unit = "01-15 14:00:00 [scheduler.py:1491] Sequence group e is preempted by SWAP "
    return [received(_repeat(unit, per), i) for i in range(max(1, size // per))]


def process_prefixes(size: int) -> list[str]:
    """`(a (b (c ...` and ` pid=` runs: the process-prefix pattern's nested groups."""
    per = min(size, 100_000)
    line = _repeat("(x pid=1 (y", per) + " INFO 01-15 14:00:00 [a.py:1] hi"
    return [line] * max(1, size // per)


def json_deep(size: int) -> list[str]:
    """`{"log": [[[[...` 5,000 deep (a RecursionError for a recursive decoder)."""
    per = 5_008
    return ['{"log": ' + "[" * 5_000 for _ in range(max(1, size // per))]


def access_query(size: int) -> list[str]:
    """Access lines whose query string holds `LEVEL:name:msg` (the client writes the query;
    uvicorn logs it raw): a `LEVEL:` in the path looks like a foreign envelope."""
    unit = '(APIServer pid=1) INFO:     10.0.1.2:3333 - "GET /v1/models?INFO:a:b HTTP/1.1" 200 OK'
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


def access_client(size: int) -> list[str]:
    """Access lines whose client (the last X-Forwarded-For entry, behind a proxy uvicorn
    trusts) holds spaces and level words, which look like another envelope."""
    unit = '(APIServer pid=1) INFO:     x WARNING:vllm:y z:0 - "GET /v1/models HTTP/1.1" 200 OK'
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


def junk(size: int) -> list[str]:
    """Lines nobody recognises (printable noise of ordinary length)."""
    unit = "lorem ipsum 01-15 [x] dolor: sit=amet, (consectetur) 12.5% adipiscing elit sed do"
    return [f"{unit} {i}" for i in range(max(1, size // (len(unit) + 8)))]


def carriage(size: int) -> list[str]:
    """`a\rb`: lines with a carriage return inside (tqdm-like output without a record), read
    as their text after the last `\r`."""
    unit = "a\rb"
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


def short_lines(size: int) -> list[str]:
    """`a_b`: carriage's lines without the `\r`, the cost of a line that short whatever it
    holds (a normal log's lines are ~50x longer)."""
    unit = "a_b"
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


def progress_bars(size: int) -> list[str]:
    """tqdm bars a line each (offline inference writing its progress to the log): plain
    output, an `other` row each, that may also be a record's tail."""
    unit = "Processed prompts:  90%|#########| 90/100 [00:09<00:10, 9.9it/s]"
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


def progress_varied(size: int) -> list[str]:
    """vLLM's `Processed prompts` bars as a run writes them, a line each: percent, counts, times
    and rates differ from line to line (no text repeats, so no cache of texts helps)."""
    out: list[str] = []
    total, i = 0, 0
    while total < size:
        done = i % 100_001
        pct = done // 1_000
        bar = ("█" * (pct // 10) + ("▍" if pct % 10 >= 5 else "")).ljust(10)
        rate = (i * 7_919) % 100_000 / 100
        line = (
            f"Processed prompts: {pct:3d}%|{bar}| {done}/100000"
            f" [{i // 3_600 % 60:02d}:{i // 60 % 60:02d}<{i % 60:02d}:{i * 7 % 60:02d},"
            f" {rate:.2f}it/s, est. speed input: {rate * 31:.2f} toks/s,"
            f" output: {rate * 17:.2f} toks/s]"
        )
        out.append(line)
        total += len(line.encode()) + 1
        i += 1
    return out


def redraws(size: int) -> list[str]:
    """tqdm progress bars redrawn on one physical line, behind a docker time (no header)."""
    bar = "Processed prompts:  {:3d}%|{:<10}| {}/100 [00:{:02d}<00:10, 9.9it/s]"
    unit = "2025-01-15T14:00:00.123Z " + "\r".join(
        bar.format(i * 10, "#" * i, i * 10, i) for i in range(10)
    )
    return [unit for _ in range(max(1, size // (len(unit) + 1)))]


CLASSES: dict[str, Callable[[int], list[str]]] = {
    "dash_runs": dash_runs,
    "dash_runs_prompt": dash_runs_prompt,
    "config_prompt": config_prompt,
    "config_line": config_line,
    "non_default_args": non_default_args,
    "ansi_brackets": ansi_brackets,
    "bare_literal": bare_literal,
    "bare_name": bare_name,
    "stats_digits": stats_digits,
    "stats_digits_prompt": stats_digits_prompt,
    "headers_prompt": headers_prompt,
    "process_prefixes": process_prefixes,
    "json_deep": json_deep,
    "access_query": access_query,
    "access_client": access_client,
    "junk": junk,
    "carriage": carriage,
    "short_lines": short_lines,
    "progress_bars": progress_bars,
    "progress_varied": progress_varied,
    "redraws": redraws,
}


def lines(name: str, size: int) -> list[str]:
    return CLASSES[name](size)
