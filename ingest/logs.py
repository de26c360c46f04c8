"""Read vLLM logs of any version into typed Polars frames (see docs/frames.md).

One path, along four seams: reading (ingest/_reader.py: bytes to a Series of lines, under
ReadLimits), routing (ingest/_route.py: every line to its kind, column-wise), extraction
(ingest/_extract.py: the common kinds' columns; ingest/_lines.py: preemption, KV-sizing and
config lines and every odd line, per line), and here: dating, assembling and the public
entry points (`parse_path`, `iter_parse_path`, `parse_lines`, `iter_log_paths`).
Every physical line ends up in a frame, as the continuation of a record, as blank, or in
`unrecognized`; `LogFrames.accounting` adds up. Never matches a pattern itself: what a line
is, the seams decide.
"""

from __future__ import annotations

import glob
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import polars as pl
from preemptscope.ingest import _lines
from preemptscope.ingest._extract import _KIND_SCHEMAS
from preemptscope.ingest._reader import (
    CHUNK_BYTES,
    Block,
    ReadLimits,
    display_name,
    iter_blocks,
    last_line,
    split_lines,
)
from preemptscope.ingest._route import _Batch, _route
from preemptscope.ingest._time import (
    YearState,
    anchor_first,
    bulk_years,
    constant_bulk_year,
    line_years,
    stamp,
    time_from_name,
)
from preemptscope.ingest.schema import FRAME_SCHEMAS, YEAR_RANGE, LogFrames

from preemptscope.errors import ConfigError, InputError

__all__ = [
    "ParseOptions",
    "ParseState",
    "ReadLimits",
    "iter_log_paths",
    "iter_parse_path",
    "parse_lines",
    "parse_path",
]


# The bulky kinds, extracted only when asked for (the others are always extracted).
ALL_KINDS = frozenset({"requests", "access", "other"})
SUMMARY = frozenset[str]()  # `parse --json`: counted only
REDUCED = frozenset({"requests"})  # `report`: request lines feed the join (ingest/reduce.py)


@dataclass(frozen=True)
class ParseOptions:
    """How to read timestamps that have no year and no zone."""

    year: int | None = None  # --year
    start: datetime | None = None  # --start: time of the first record, anchors year inference
    tz: str = "UTC"  # zone of the log's naive timestamps (IANA name); frames hold UTC
    reference_time: datetime | None = None  # e.g. file mtime; used when nothing better tells
    name_time: datetime | None = None  # a date in the file name; before the mtime
    # Take the year from a wrapper/JSON time anywhere in the first batch, not only on the first
    # record. Files turn it on (their first batch is the first chunk, whatever the caller);
    # `parse_lines` batches keep it off, so batches of lines date exactly as one go does.
    year_from_content: bool = False

    def __post_init__(self) -> None:
        # Outside this, --year 0 overflows and --year 20260 silently nulls every timestamp.
        low, high = YEAR_RANGE
        if self.year is not None and not low <= self.year <= high:
            raise ConfigError(f"--year {self.year}: expected a year from {low} to {high}")
        if self.start is not None and not low <= self.start.year <= high:
            raise ConfigError(
                f"--start {self.start.isoformat()}: expected a year from {low} to {high}"
            )
        try:
            ZoneInfo(self.tz)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ConfigError(f"unknown time zone {self.tz!r} (expected an IANA name)") from exc


@dataclass
class ParseState:
    """What spans batches of one source: year inference, a held-back line, the last line."""

    years: YearState = field(default_factory=YearState)
    pending: list[tuple[int, str]] = field(default_factory=list)
    last_raw: str | None = None


def _finish(
    batch: _Batch,
    *,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
    line_offset: int = 0,
) -> LogFrames:
    """Date a routed batch in order and assemble its frames.

    `line_offset` is added to every line number (chunks are routed with local numbers, since
    the line count of earlier chunks is only known once they are split).
    """
    if line_offset:
        batch.frames = {
            kind: [part.with_columns(pl.col("line") + line_offset) for part in parts]
            for kind, parts in batch.frames.items()
        }
    result = LogFrames(source=source, deployment=deployment, timezone=options.tz)
    result.accounting = batch.accounting
    result.summarized = dict(batch.summarized)
    if batch.prompts:
        prompts = pl.concat(batch.prompts)
        result.prompts = (
            prompts.with_columns(pl.col("line") + line_offset) if line_offset else prompts
        )
    # Kinds without rows keep the empty frames LogFrames starts with: dating and stamping
    # them would only cost (a dozen Polars queries per kind, whatever the batch size).
    kinds: dict[str, pl.DataFrame] = {}
    for kind, parts in batch.frames.items():
        if kind == "unrecognized" or not parts:
            continue
        target = _KIND_SCHEMAS[kind]
        # Parts already in the target schema (the usual case) need no select and cast.
        same = [p if p.schema == target else p.select(list(target)).cast(target) for p in parts]
        # Stable: the records of one line (glued ones) keep their order, which dating reads.
        # A part in line order already (the usual bulk part) is not sorted again: a sort
        # copies every column.
        frame = same[0] if len(same) == 1 else pl.concat(same)
        lines = frame["line"]
        if lines.null_count() or not lines.is_sorted():
            frame = frame.sort("line", nulls_last=True, maintain_order=True)
        kinds[kind] = frame
    if kinds:
        _date_and_stamp(
            kinds, result, source=source, deployment=deployment, options=options, state=state
        )
    unrec = batch.frames["unrecognized"]
    if unrec:
        rows = pl.concat(unrec)
        # In line order already where short lines of noise were settled in bulk after the
        # others (ingest/_noise.py _short_noise): a sort would copy millions of rows.
        if not rows["line"].is_sorted():
            rows = rows.sort("line")
        result.frames["unrecognized"] = rows.with_columns(
            pl.lit(source, dtype=pl.String).alias("source"),
            pl.lit(deployment, dtype=pl.String).alias("deployment"),
        ).select(list(FRAME_SCHEMAS["unrecognized"]))
    result.year_source = state.years.source
    result.vllm_version, result.log_era = _version_and_era(result)
    return result


def _date_and_stamp(
    kinds: dict[str, pl.DataFrame],
    result: LogFrames,
    *,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
) -> None:
    """Resolve the years of a batch's rows in order and store the stamped frames in `result`.

    Records (stats, warnings, config, ...) are dated one by one; bulk rows (requests, access,
    other: most of a batch) take the year of the record before them, which is one year for
    all of them in the usual batch: then it is found from a few minimums, not row by row.
    """
    columns = ["line", "_mon", "_day", "_hms", "_wts", "_bulk"]
    if state.years.base_year is None:
        stamped_rows = pl.concat(
            [frame.select(columns).filter(pl.col("_mon").is_not_null()) for frame in kinds.values()]
        ).sort("line")
        anchor_first(
            stamped_rows,
            state.years,
            carried=_carried_time(kinds) if options.year_from_content else None,
            name_time=options.name_time,
            tz=options.tz,
            year=options.year,
            start=options.start,
            reference=options.reference_time,
        )
    before = (
        state.years.last_year
        if state.years.last_year is not None
        else (state.years.base_year or 1970) + state.years.rollovers,
        state.years.last_month,
    )
    # Rows of the bulk path are flagged (`_bulk`); a kind is mostly one or the other.
    flags = {kind: frame["_bulk"].fill_null(False) for kind, frame in kinds.items()}
    has_bulk = {kind: bool(flag.any()) for kind, flag in flags.items()}
    stamped = pl.col("_mon").is_not_null()
    marks = (
        pl.concat(
            [
                frame.select(columns).filter(stamped & ~pl.col("_bulk").fill_null(False))
                for frame in kinds.values()
            ]
        )
        # A line's first record dates the line (glued records share it), whatever the batch.
        .sort("line", maintain_order=True)
        .unique("line", keep="first")
    )
    mark_years = line_years(
        marks.sort("line"),
        state.years,
        tz=options.tz,
        year=options.year,
        start=options.start,
        reference=options.reference_time,
    )
    bulk_mon = []
    constant = True
    for kind, frame in kinds.items():
        if not has_bulk[kind]:
            continue
        if not flags[kind].all() or frame["_wts"].null_count() != frame.height:
            constant = False  # records among them, or container times: row by row
            break
        if frame["_mon"].null_count() < frame.height:
            bulk_mon.append(frame["_mon"].drop_nulls())
    assert state.years.base_year is not None or (marks.height == 0 and not bulk_mon)
    year = constant_bulk_year(bulk_mon, mark_years, before) if constant else None
    batch_year: int | None = year if mark_years.height or bulk_mon else None
    # None: every timestamped row of the bulk kinds is `batch_year`.
    years: pl.DataFrame | None = None if batch_year is not None else mark_years
    if year is None:
        bulk = (
            pl.concat(
                [
                    frame.select(columns).filter(stamped & pl.col("_bulk").fill_null(False))
                    for kind, frame in kinds.items()
                    if has_bulk[kind]
                ]
                or [marks.clear()]
            )
            .sort("line")
            .unique("line", keep="first")
        )
        years = pl.concat([mark_years, bulk_years(bulk.sort("line"), mark_years, before)])
        one_year = years["_year"].unique()
        batch_year = (
            int(one_year[0]) if one_year.len() == 1 and one_year.null_count() == 0 else None
        )
    if state.years.source is None and any(
        frame["_ats"].null_count() < frame.height for frame in kinds.values()
    ):
        state.years.source = "json"
    names = {
        "source": pl.lit(source, dtype=pl.String).alias("source"),
        "deployment": pl.lit(deployment, dtype=pl.String).alias("deployment"),
    }
    # The kinds of records (a few rows each: stats, warnings, config, ...) are stamped in one
    # go: a stamp costs the same queries whatever its rows, and its timestamps are the rows'
    # own. They look their years up among the records' only (a bulk row is never on a
    # record's line).
    records = [kind for kind in kinds if not has_bulk[kind]]
    record_times: dict[str, pl.Series] = {}
    if len(records) > 1:
        helpers = ["line", "_mon", "_day", "_hms", "_wts", "_ats"]
        times = stamp(
            pl.concat([kinds[kind].select(helpers) for kind in records]),
            mark_years,
            options.tz,
            batch_year,
        )["timestamp"]
        offset = 0
        for kind in records:
            record_times[kind] = times.slice(offset, kinds[kind].height)
            offset += kinds[kind].height
    for kind, frame in kinds.items():
        if kind in record_times:
            kept = [name for name in frame.columns if not name.startswith("_")]
            stamped_frame = frame.select(kept).with_columns(record_times[kind])
        else:
            stamped_frame = stamp(
                frame, years if has_bulk[kind] else mark_years, options.tz, batch_year
            )
        schema = FRAME_SCHEMAS[kind]
        result.frames[kind] = stamped_frame.select(
            [names.get(name, pl.col(name)) for name in schema]
        ).cast(schema)


def _carried_time(kinds: dict[str, pl.DataFrame]) -> tuple[int, str, str] | None:
    """(line, time, source) of the first row whose data carries a year: a wrapper or JSON time."""
    found: tuple[int, str, str] | None = None
    for frame in kinds.values():
        for column, source in (("_wts", "wrapper"), ("_ats", "json")):
            rows = frame.filter(pl.col(column).is_not_null())
            if rows.height:
                line, text = rows["line"][0], rows[column][0]
                if found is None or line < found[0]:
                    found = (int(line), str(text), source)
    return found


def _version_and_era(frames: LogFrames) -> tuple[str | None, str | None]:
    config = frames["config"]
    if config.height == 0 and frames["scheduler_stats"].height == 0:
        return None, None
    versions = config.filter(pl.col("key") == "vllm_version")["value"]
    version = versions[0] if versions.len() else None
    eras = set(frames["scheduler_stats"]["era"].drop_nulls().unique().to_list())
    engines = config.filter(pl.col("key") == "engine_version")["value"].to_list()
    eras |= {e.lower() for e in engines if e in ("V0", "V1")}
    if not eras:
        era = None
    elif len(eras) == 1:
        era = eras.pop()
    else:
        era = "mixed"
    return version, era


def _held_back(raw: str) -> bool:
    """A last line that may continue in the next batch (see _lines.may_continue)."""
    return _lines.may_continue(raw)


def _parse_series(
    raw: pl.Series,
    *,
    first_line: int,
    source: str,
    deployment: str,
    options: ParseOptions,
    state: ParseState,
    final: bool,
    keep: frozenset[str],
    limits: ReadLimits,
    cut: Mapping[int, int] | None = None,
) -> LogFrames:
    if state.pending:
        first_line = state.pending[0][0]
        raw = pl.concat([pl.Series("raw", [t for _, t in state.pending], dtype=pl.String), raw])
        state.pending = []
    # A line the follower cut is no wrap half (and held back, it would lose its cut length).
    cut_last = raw.len() > 0 and first_line + raw.len() - 1 in (cut or {})
    if not final and raw.len() and not cut_last and _held_back(raw[-1]):
        state.pending = [(first_line + raw.len() - 1, raw[-1])]
        raw = raw.head(raw.len() - 1)
    previous = state.last_raw
    if raw.len():
        state.last_raw = raw[-1]
    batch = _route(raw, first_line, previous, keep, max_line=limits.max_line_bytes, cut=cut)
    return _finish(batch, source=source, deployment=deployment, options=options, state=state)


def parse_lines(
    lines: Iterable[str],
    *,
    source: str,
    deployment: str,
    first_line: int = 1,
    options: ParseOptions = ParseOptions(),
    state: ParseState | None = None,
    final: bool | None = None,
    limits: ReadLimits | None = None,
    cut_lengths: Mapping[int, int] | None = None,
) -> LogFrames:
    """Parse a batch of physical lines (no trailing newline needed).

    With a `state`, batches of one source give the same frames as one go: a last line that may
    be the first half of a hard-wrapped record is held back until the next batch, or until a
    call with `final=True` (default: final unless a state is given).
    A line longer than `limits.max_line_bytes` (default ReadLimits.from_env()) is unrecognised,
    not parsed; `cut_lengths` (line number -> real length) names lines the caller cut already
    (the follower), which are unrecognised with their real length.
    """
    own_state = state if state is not None else ParseState()
    is_final = final if final is not None else state is None
    raw = pl.Series("raw", list(lines), dtype=pl.String)
    return _parse_series(
        raw,
        first_line=first_line,
        source=source,
        deployment=deployment,
        options=options,
        state=own_state,
        final=is_final,
        keep=ALL_KINDS,
        limits=limits or ReadLimits.from_env(),
        cut=cut_lengths,
    )


def _options_for(path: str, options: ParseOptions) -> ParseOptions:
    reference = options.reference_time
    if reference is None and path != "-":
        try:
            reference = datetime.fromtimestamp(os.stat(path).st_mtime, tz=UTC)
        except OSError:
            reference = None
    return ParseOptions(
        year=options.year,
        start=options.start,
        tz=options.tz,
        reference_time=reference,
        name_time=options.name_time or (time_from_name(path) if path != "-" else None),
        year_from_content=True,
    )


def _route_chunk(block: Block, previous: str | None, keep: frozenset[str], max_line: int) -> _Batch:
    # Lines are numbered from 1 in each block; `cut` holds 0-based indexes.
    cut = {index + 1: real for index, real in block.cut.items()}
    return _route(split_lines(block.view), 1, previous, keep, max_line=max_line, cut=cut)


def iter_parse_path(
    path: str | Path,
    *,
    deployment: str | None = None,
    options: ParseOptions = ParseOptions(),
    chunk_bytes: int = CHUNK_BYTES,
    keep: frozenset[str] = ALL_KINDS,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    limits: ReadLimits | None = None,
) -> Iterator[LogFrames]:
    """Stream a file chunk by chunk: one LogFrames per chunk, memory flat in the file size.

    Chunks end only after a line that cannot continue on the next one (see
    _reader.safe_cut), so they are routed and extracted independently, `workers` at a time
    (Polars releases the GIL); timestamps are resolved in order in this thread.
    `keep` names the bulky kinds to extract (ALL_KINDS); the others of requests/access/other
    are counted (LogFrames.summarized), not extracted: SUMMARY is what `parse --json` needs,
    at a fraction of the cost, REDUCED what `report` needs.
    `progress` is called with the number of bytes of each chunk read. `limits` (default
    ReadLimits.from_env()) bound a line, an endless input and a .gz input (docs/frames.md).
    """
    name = str(path)
    dep = deployment or display_name(name)
    opts = _options_for(name, options)
    state = ParseState()
    threads = workers if workers is not None else max(1, min(2, os.cpu_count() or 1))
    previous: str | None = None
    in_flight: deque[Future[_Batch]] = deque()
    next_line = 1

    def finish(future: Future[_Batch]) -> LogFrames:
        nonlocal next_line
        batch = future.result()
        frames = _finish(
            batch,
            source=name,
            deployment=dep,
            options=opts,
            state=state,
            # Chunks are routed with local numbers (from 1): the count before them is known
            # only once the earlier ones are split.
            line_offset=next_line - 1,
        )
        next_line += batch.accounting.lines
        return frames

    with ThreadPoolExecutor(max_workers=threads) as pool:
        read_limits = limits or ReadLimits.from_env()
        max_line = read_limits.max_line_bytes
        for block in iter_blocks(name, chunk_bytes, _lines.may_continue, read_limits):
            if progress is not None:
                progress(len(block.view))
            in_flight.append(pool.submit(_route_chunk, block, previous, keep, max_line))
            previous = last_line(block.view)
            while len(in_flight) > threads:
                yield finish(in_flight.popleft())
        while in_flight:
            yield finish(in_flight.popleft())


def parse_path(
    path: str | Path,
    *,
    deployment: str | None = None,
    options: ParseOptions = ParseOptions(),
    limits: ReadLimits | None = None,
) -> LogFrames:
    """Parse one file (plain or .gz) or "-" for stdin into frames; InputError if unreadable."""
    name = str(path)
    if name != "-" and Path(name).is_dir():
        raise InputError(name, "is a directory (use iter_log_paths to expand it)")
    combined: LogFrames | None = None
    for part in iter_parse_path(name, deployment=deployment, options=options, limits=limits):
        if combined is None:
            combined = part
        else:
            combined.extend(part)
    if combined is None:
        combined = LogFrames(
            source=name, deployment=deployment or display_name(name), timezone=options.tz
        )
    return combined


# Files a directory scan skips: documentation, data and code next to the logs (`.prom`:
# /metrics snapshots, as `preemptscope scrape` and `demo` write them beside vllm.log).
_NOT_LOGS = frozenset({".md", ".json", ".parquet", ".html", ".png", ".py", ".pyc", ".csv", ".prom"})


def iter_log_paths(specs: Sequence[str]) -> Iterator[tuple[str, str | None]]:
    """Expand files, directories (recursive), globs, "-" and "PATH=NAME" into (path, name)."""
    for spec in specs:
        path, name = spec, None
        if "=" in spec and not Path(spec).exists():
            path, _, name = spec.rpartition("=")
            name = name or None
        if path == "-":
            yield path, name
            continue
        candidate = Path(path)
        if candidate.is_dir():
            found = sorted(
                p
                for p in candidate.rglob("*")
                if p.is_file() and not p.name.startswith(".") and p.suffix.lower() not in _NOT_LOGS
            )
            if not found:
                raise InputError(path, "directory contains no files")
            for item in found:
                yield str(item), name
            continue
        if candidate.exists():
            yield path, name
            continue
        matches = sorted(glob.glob(path, recursive=True))
        if not matches:
            raise InputError(path, "no such file, directory or glob match")
        for match in matches:
            if Path(match).is_dir():
                yield from iter_log_paths(
                    [str(Path(match))] if name is None else [f"{match}={name}"]
                )
            else:
                yield match, name
