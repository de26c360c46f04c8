"""A routed batch put together: its frames, its prompt rows and accounting that adds up.

`_assemble` takes what the cascade (ingest/_route.py) claimed and the lines it left to the
per-line path: it extracts the claimed parts (ingest/_extract.py) or counts them in summary
mode, parses the odd lines in line order (ingest/_lines.py) and counts every line once:
parsed, blank or unrecognised. It routes nothing: which line is which kind is decided before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import polars as pl
from preemptscope.ingest import _lines, prompts
from preemptscope.ingest._extract import (
    _UNRECOGNIZED_ROWS,
    _access_frame,
    _kind_columns,
    _other_frame,
    _requests_frame,
    _stats_frames,
)
from preemptscope.ingest.schema import FRAME_SCHEMAS, LineAccounting


@dataclass
class _Batch:
    """One batch's frames by kind, its accounting, and what summary mode only counted."""

    frames: dict[str, list[pl.DataFrame]]
    accounting: LineAccounting
    summarized: dict[str, int]  # rows recognised but not extracted (summary mode)
    # PROMPTS rows (ingest/prompts.py) of the request lines showing ids, when requests are kept.
    prompts: list[pl.DataFrame] = field(default_factory=list)


def _assemble(
    routed: dict[str, list[pl.DataFrame]],
    odd_parts: list[pl.DataFrame],
    settled: dict[str, int],
    n: int,
    before: Callable[[pl.DataFrame], pl.Series],
    keep: frozenset[str],
    physical: Callable[[pl.Series], pl.Series],
) -> _Batch:
    """Extract the claimed parts (or count them, in summary mode) and parse the odd lines.

    `settled` counts lines whose kind is known but whose text was not kept (summary mode);
    `before(odd)` gives the physical line before each line of `odd` (sorted by line), for
    hard-wrap continuations; `physical(lines)` the text of those lines in the file (without
    their newline), for the stats lines the checks reject (routed unwrapped).
    """
    frames: dict[str, list[pl.DataFrame]] = {kind: [] for kind in FRAME_SCHEMAS}
    accounting = LineAccounting(lines=n)
    counts = {name: sum(part.height for part in parts) for name, parts in routed.items()}
    for name, count in settled.items():
        counts[name] = counts.get(name, 0) + count
    accounting.blank_lines = counts.get("blank", 0)
    summarized: dict[str, int] = {}
    rejected = pl.DataFrame(schema=_UNRECOGNIZED_ROWS)
    if "stats" in routed:
        stats, rejected = _stats_frames(pl.concat(routed["stats"], how="diagonal"))
        if rejected.height:
            rejected = rejected.with_columns(physical(rejected["line"]).alias("text"))
        frames["scheduler_stats"].append(stats)
        counts["stats"] -= rejected.height
    builders = {
        "requests": ("requests", _requests_frame),
        "access": ("access", _access_frame),
        "other": ("other", lambda sub: _other_frame(sub, uvicorn=False)),
        "other_uvi": ("other", lambda sub: _other_frame(sub, uvicorn=True)),
        "plain": ("other", _plain_frame),
    }
    for name, (kind, builder) in builders.items():
        if name not in counts:
            continue
        if kind in keep:
            frames[kind].append(builder(pl.concat(routed[name], how="diagonal")))
        else:
            summarized[kind] = summarized.get(kind, 0) + counts[name]

    messages = _prompt_messages(routed) if "requests" in keep else []

    odd_parts = [part for part in odd_parts if part.height]
    parsed = 0
    if odd_parts:
        no_flag = pl.lit(False).alias("settled")
        odd = pl.concat(
            [
                part.select("line", "raw", "settled" if "settled" in part.columns else no_flag)
                for part in odd_parts
            ]
        ).sort("line")
        odd = odd.with_columns(before(odd).rename("prev"))
        no_record = frozenset(odd.filter("settled")["line"].to_list())
        result = _lines.parse_odd_lines(
            [(int(a), str(b), c) for a, b, c in odd.select("line", "raw", "prev").iter_rows()],
            no_record,
        )
        parsed = result.parsed_lines
        accounting.blank_lines += result.blank_lines
        for kind, rows in result.rows.items():
            frames[kind].append(_rows_frame(kind, rows))
        if result.unrecognized:
            frames["unrecognized"].append(
                pl.DataFrame(
                    result.unrecognized,
                    schema=_UNRECOGNIZED_ROWS,
                    orient="row",
                )
            )
        accounting.unrecognized_lines += len(result.unrecognized)
        if result.prompts and "requests" in keep:
            messages.append(pl.DataFrame(result.prompts, schema=_MESSAGES, orient="row"))
    if rejected.height:
        frames["unrecognized"].append(rejected)
        accounting.unrecognized_lines += rejected.height
    if "cut" in routed:
        frames["unrecognized"].extend(routed["cut"])
        accounting.unrecognized_lines += sum(part.height for part in routed["cut"])
    if "unrec" in routed:
        noise = pl.concat(routed["unrec"])
        frames["unrecognized"].append(
            noise.select(
                pl.col("line"),
                pl.col("raw").str.strip_chars_end("\r\n").alias("text"),
                pl.lit(_lines.NO_FORMAT).alias("reason"),
            )
        )
        accounting.unrecognized_lines += noise.height
    # Rows already (_noise._short_noise), mostly after the others in line order.
    if "noise" in routed:
        frames["unrecognized"].extend(routed["noise"])
        accounting.unrecognized_lines += counts["noise"]
    fast_parsed = sum(v for k, v in counts.items() if k not in ("blank", "unrec", "cut", "noise"))
    accounting.parsed_lines = fast_parsed + parsed
    found = [prompts.prompt_rows(pl.concat(messages))] if messages else []
    return _Batch(frames, accounting, summarized, found)


_MESSAGES = pl.Schema({"line": pl.Int64(), "message": pl.String()})


def _prompt_messages(routed: dict[str, list[pl.DataFrame]]) -> list[pl.DataFrame]:
    """(line, message) of the claimed lines that may show prompt ids: `Received request`
    lines and `Request %s details:` lines (`other`), found by their literals."""
    out = []
    # A claimed line has one vLLM header, its message right after it, and no request literal
    # in front of it (the router sends those per line): its first `] Received request ` or
    # `] Request ` is where its message starts.
    for name, literal, lead in (
        ("requests", prompts.PROMPT_LITERAL, "] Received request "),
        ("other", prompts.DETAILS_LITERAL, "] Request "),
    ):
        if name not in routed:
            continue
        part = pl.concat(routed[name], how="diagonal").select("line", "raw")
        text = part["raw"]
        part = part.filter(text.str.contains(literal, literal=True))
        if name == "other" and part.height:
            part = part.filter(part["raw"].str.contains(prompts.PROMPT_LITERAL, literal=True))
        if part.height:
            raw = pl.col("raw")
            at = raw.str.find(lead, literal=True).cast(pl.Int64) + 2
            message = raw.cast(pl.Binary).bin.slice(at).cast(pl.String)
            out.append(
                part.filter(at.is_not_null()).select(
                    "line", message.str.strip_chars_end("\r\n").alias("message")
                )
            )
    return out


def _plain_frame(sub: pl.DataFrame) -> pl.DataFrame:
    """`other` rows of plain output (no envelope): the line's text, every other column null,
    as the per-line path's rows (_lines._emit)."""
    columns = _kind_columns("other")
    known = {"line", "message", "_bulk"}
    return sub.select(
        pl.col("line"),
        *[
            pl.lit(None, dtype=dtype).alias(name)
            for name, dtype in columns.items()
            if name not in known
        ],
        pl.lit(False).alias("_bulk"),
        pl.col("raw").str.strip_chars_end("\r\n").alias("message"),
    ).select(list(columns))


def _rows_frame(kind: str, rows: list[dict[str, object]]) -> pl.DataFrame:
    columns = _kind_columns(kind)
    data = {name: [row.get(name) for row in rows] for name in columns}
    return pl.DataFrame(data, schema=columns)
