"""Keyed request events grouped into requests (sessions), with their ends.

Owns a request's start, end, success and e2e by the rules of lifecycle.py's module doc,
sorted (`_numbered`, `_sessions`) or, for ids that are one request, without sorting
(`_quick_sessions`), and the settled rows' shapes (ARRIVALS, JOINED). Never folds ids
(`lifecycle_ids.py`) and keeps no state between batches.
"""

from __future__ import annotations

import polars as pl
from preemptscope.ingest import schema
from preemptscope.ingest.schema import PROMPT_COLUMNS

__all__ = ["ARRIVALS", "JOINED"]

_STARTS = ["received", "added"]
_DONE = ["finished", "generated"]  # either ends a request (the first of them)
# What names a request in the streaming join (see `_identified`).
_REQUEST = ["deployment", "_id"]

# What the join emits: ARRIVALS and JOINED rows (ingest/schema.py) with the `source` they
# are in (one join reads all the files of a deployment).
ARRIVALS = pl.Schema({"source": pl.String(), **schema.ARRIVALS})
JOINED = pl.Schema({"source": pl.String(), **schema.JOINED})
_PROMPT = list(PROMPT_COLUMNS)


def _numbered(events: pl.DataFrame, key: str = "key") -> pl.DataFrame:
    """Keyed events (_fold_ids) sorted by request, with `session` numbering its requests.

    `key`: the column naming the request (`key`, or a number standing for it: `_identified`).
    """
    events = events.sort(["deployment", key, "timestamp", "line"])
    is_start = pl.col("event").is_in(_STARTS)
    # Sorted by request: the previous row is the same request's previous event unless the
    # (deployment, key) changes there. Comparing neighbours instead of two window functions
    # over every request is what makes this fast on busy logs.
    same_request = pl.col("deployment").eq_missing(pl.col("deployment").shift(1)) & pl.col(
        key
    ).eq_missing(pl.col(key).shift(1))
    previous_is_start = pl.col("event").shift(1).is_in(_STARTS).fill_null(False) & same_request
    opens = is_start & ~previous_is_start.fill_null(False)
    # A running count of opens numbers the sessions; it only needs to tell the sessions of one
    # request apart, since (deployment, key) is part of the group.
    return events.with_columns(session=opens.cast(pl.Int64).cum_sum())


def _sessions(events: pl.DataFrame, key: str = "key") -> pl.DataFrame:
    """Per request (deployment, key, session) of _numbered events: first start, ends, last.

    `later` says another request with the same key opens after this one in `events` (so this
    one's end, if any, is in `events`).
    """
    is_start = pl.col("event").is_in(_STARTS)

    def first_time(kinds: list[str]) -> pl.Expr:
        return pl.col("timestamp").filter(pl.col("event").is_in(kinds)).min()

    # The first start line in time order (rows are sorted by time within a request).
    sessions = events.group_by(["deployment", key, "session"]).agg(
        start=first_time(_STARTS),
        source=pl.col("source").filter(is_start).first(),
        line=pl.col("line").filter(is_start).first(),
        pid=pl.col("pid").filter(is_start).first(),
        done=first_time(_DONE),
        delta=pl.col("timestamp").filter(pl.col("event") == "delta").max(),
        stopped=first_time(["aborted", "failed"]),
        last=pl.col("timestamp").max(),
        **_prompt_of(events),
    )
    later = pl.col("session").max().over(["deployment", key]) > pl.col("session")
    return sessions.with_columns(later=later)


def _quick_sessions(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Sessions of the ids that are one request (every start before every other line), without
    sorting the events, and the (deployment, _id) of the others, for `_numbered`: events are
    `_identified`.

    Most ids are one request: this is the fast path of the streaming join.
    """
    is_start = pl.col("event").is_in(_STARTS)
    ts = pl.col("timestamp")

    def when(condition: pl.Expr) -> pl.Expr:
        return pl.when(condition).then(ts)

    # Per-row columns first, plain aggregations after: filters inside an aggregation are
    # evaluated group by group, which is what costs on millions of requests.
    rank, span = _rank(events)
    first = pl.col("_sr").arg_min()  # the earliest start in (time, line) order
    # A join reads one deployment (then the key alone names a request), mostly one file of
    # one process: a column that holds one value is not gathered group by group.
    single = {name: _single(events[name]) for name in ("deployment", "source", "pid")}
    by = ["_id"] if single["deployment"] else ["deployment", "_id"]
    taken = {name: pl.col(name).get(first) for name in ("source", "pid") if not single[name]}
    if span is None:
        taken |= {"start": when(is_start).min(), "line": pl.col("line").get(first)}
    else:
        # The earliest start's (time, line) is its rank's.
        taken["_first_start"] = pl.col("_sr").min()
    constants = [
        pl.lit(events[name][0], events.schema[name]).alias(name)
        for name in ("deployment", "source", "pid")
        if single[name] and name not in by
    ]
    if span is not None:
        low, width = span
        first_start = pl.col("_first_start")
        constants += [
            (first_start // width + low).cast(events.schema["timestamp"]).alias("start"),
            (first_start % width).alias("line"),
        ]
    tangled = pl.col("start").is_not_null() & (pl.col("_last_start") >= pl.col("_first_other"))
    # One query, run by the in-memory engine: for a group-by it costs less CPU than the
    # streaming one (elementwise work is the other way round: Series operations, see _events).
    groups = (
        events.hstack([rank.alias("_rank")])
        .lazy()
        .with_columns(
            _sr=pl.when(is_start).then("_rank"),
            _or=pl.when(~is_start).then("_rank"),
            _done=when(pl.col("event").is_in(_DONE)),
            _d=when(pl.col("event") == "delta"),
            _x=when(pl.col("event").is_in(["aborted", "failed"])),
        )
        .group_by(by)
        .agg(
            **taken,
            done=pl.col("_done").min(),
            delta=pl.col("_d").max(),
            stopped=pl.col("_x").min(),
            last=ts.max(),
            _last_start=pl.col("_sr").max(),
            _first_other=pl.col("_or").min(),
            **_prompt_of(events),
        )
        .with_columns(constants)
        .with_columns(
            _tangled=tangled.fill_null(False),
            session=pl.lit(0, pl.Int64),
            later=pl.lit(False),
            _simple=pl.lit(True),
        )
        .collect(engine="in-memory")
    )
    groups = _with_prompt_nulls(groups)
    mixed = groups["_tangled"]
    simple = groups.filter(~mixed).drop(
        "_tangled", "_last_start", "_first_other", "_first_start", strict=False
    )
    return simple, groups.filter(mixed)[_REQUEST]


def _prompt_of(events: pl.DataFrame) -> dict[str, pl.Expr]:
    """A request's prompt columns: those of its first line that shows them (only rows the
    join put them on have them: `RequestJoin._with_details`, `_by_line`). A batch without any
    is given nulls after the grouping (an aggregation per group costs, whatever it finds)."""
    if (
        "prompt_tokens" not in events.columns
        or events["prompt_tokens"].null_count() == events.height
    ):
        return {}
    return {name: pl.col(name).drop_nulls().first() for name in _PROMPT}


def _with_prompt_nulls(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [name for name in _PROMPT if name not in frame.columns]
    return frame.with_columns(pl.lit(None, PROMPT_COLUMNS[name]).alias(name) for name in missing)


def _single(column: pl.Series) -> bool:
    """Whether every value of a column is its first one (null included)."""
    head = column[0]
    if head is None:
        return column.null_count() == column.len()
    return column.null_count() == 0 and bool((column == head).all())


def _rank(events: pl.DataFrame) -> tuple[pl.Series, tuple[int, int] | None]:
    """(time, line) as one number, the order `_numbered` sorts by: 64 bits when the batch's
    span of times and lines fits (the usual case: then also `(low, width)`, rank being
    `(micros - low) * width + line`), else 128."""
    micros = events["timestamp"].dt.epoch("us")
    lines = events["line"]
    low, high, bottom, top = micros.min(), micros.max(), lines.min(), lines.max()
    if (
        isinstance(low, int)
        and isinstance(high, int)
        and isinstance(bottom, int)
        and isinstance(top, int)
        and bottom >= 0
        and (high - low + 1) * (top + 1) < 1 << 62
    ):
        return (micros - low) * (top + 1) + lines, (low, top + 1)
    wide = pl.col("timestamp").dt.epoch("us").cast(pl.Int128) * (1 << 40) + pl.col("line")
    return events.select(wide).to_series(), None  # rare: the Series ops refuse an Int128 scalar


def _ends(sessions: pl.LazyFrame) -> pl.LazyFrame:
    """Sessions with end, success and e2e (the rules of the module doc), and `_joinable`:
    both ends are known, the end not before the start."""
    done = pl.col("done")
    end = pl.coalesce(done, "delta", "stopped")
    return sessions.with_columns(
        end=end, success=done.is_not_null() | pl.col("delta").is_not_null()
    ).with_columns(
        e2e=(pl.col("end") - pl.col("start")).dt.total_microseconds() / 1e6,
        _joinable=(pl.col("end") >= pl.col("start")).fill_null(False),
    )


def _joined(sessions: pl.DataFrame) -> pl.DataFrame:
    """Sessions with both ends: start, e2e and success."""
    return _ends(sessions.lazy()).filter(pl.col("_joinable")).collect()


def _split(sessions: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Settled sessions as (ARRIVALS, JOINED) rows: each request with a start is in one of
    them, JOINED when both ends are known (its start is its arrival), else ARRIVALS."""
    ends = _ends(_with_prompt_nulls(sessions).lazy())
    arrivals = ends.filter(pl.col("start").is_not_null() & ~pl.col("_joinable")).select(
        "source", "line", "pid", pl.col("start").alias("timestamp"), *_PROMPT
    )
    joined = ends.filter(pl.col("_joinable")).select(list(JOINED))
    out = pl.collect_all([arrivals.cast(ARRIVALS), joined.cast(JOINED)], engine="in-memory")
    return out[0], out[1]
