"""Per-request latency from request lifecycle log lines (the `requests` frame).

Which vLLM logs give both ends (vllm-log-formats.md §6.2): V0's AsyncLLMEngine path
(`Received`/`Added request X` ... `Finished request X.`, default up to 0.6.1), and V1 with
`--enable-log-requests --enable-log-outputs` (`Received request X` ... `Generated response X`).
The default MQLLMEngine (0.6.2-0.10.2) and plain V1 log starts only: no rows come out of those.

Rules:
* start: the earliest `received`/`added` of the request; end: `finished`, else the last
  `generated` (streaming deltas come before `(streaming complete)`), else the first
  `aborted`/`failed`, which also marks success=False.
* ids are matched across spellings: from 0.14 `Added request` logs `<id>-<8 random chars>`
  and completions add `-<index>`; such an id is folded onto the `Received` id it extends.
  `Aborted request(s) a,b.` stands for each id.
* a start after the request's previous end opens a new request (the offline `LLM` class
  reuses ids "0", "1", ... in each process).
* records without a timestamp cannot be placed and are left out; the resolution is the log's
  (1 s for the classic `MM-DD HH:MM:SS` header, ms for JSON logs).
"""

from __future__ import annotations

import polars as pl
from preemptscope.ingest.schema import REQUEST_LATENCIES

__all__ = ["latencies_from_requests"]

_STARTS = ["received", "added"]
_TERMINAL = ["finished", "aborted", "failed"]
_GROUP = ["deployment", "key", "session"]


def _fold_ids(events: pl.DataFrame) -> pl.DataFrame:
    """Add `key`: the id as the frontend logged it (see module doc)."""
    received = events.filter(pl.col("event") == "received")["request_id"]
    reference = (
        received if received.len() else events.filter(pl.col("event") != "added")["request_id"]
    )
    known = reference.unique().implode()
    # Each shortened id is computed once (as a column), not once per use in the choice below.
    one = pl.col("request_id").str.replace(r"-[^-]+$", "")
    two = pl.col("_one").str.replace(r"-[^-]+$", "")
    key = (
        pl.when(pl.col("request_id").is_in(known))
        .then(pl.col("request_id"))
        .when(pl.col("_one").is_in(known))
        .then(pl.col("_one"))
        .when(pl.col("_two").is_in(known))
        .then(pl.col("_two"))
        .otherwise(pl.col("request_id"))
    )
    return (
        events.with_columns(_one=one)
        .with_columns(_two=two)
        .with_columns(key=key)
        .drop("_one", "_two")
    )


def latencies_from_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """REQUEST_LATENCIES rows (origin "log_lifecycle") for requests with both ends logged."""
    events = (
        requests.filter(pl.col("timestamp").is_not_null() & pl.col("request_id").is_not_null())
        .with_columns(pl.col("request_id").str.split(","))
        .explode("request_id")
        .with_columns(pl.col("request_id").str.strip_chars().str.strip_chars_end("."))
        .filter(pl.col("request_id") != "")
        .select("source", "line", "deployment", "timestamp", "event", "request_id")
    )
    if events.is_empty():
        return pl.DataFrame(schema=REQUEST_LATENCIES)
    events = _fold_ids(events).sort(["deployment", "key", "timestamp", "line"])
    is_start = pl.col("event").is_in(_STARTS)
    # Sorted by request: the previous row is the same request's previous event unless the
    # (deployment, key) changes there. Comparing neighbours instead of two window functions
    # over every request is what makes this fast on busy logs.
    same_request = pl.col("deployment").eq_missing(pl.col("deployment").shift(1)) & pl.col(
        "key"
    ).eq_missing(pl.col("key").shift(1))
    previous_is_start = pl.col("event").shift(1).is_in(_STARTS).fill_null(False) & same_request
    opens = is_start & ~previous_is_start.fill_null(False)
    # A running count of opens numbers the sessions; it only needs to tell the sessions of one
    # request apart, since (deployment, key) is part of the group.
    events = events.with_columns(session=opens.cast(pl.Int64).cum_sum())

    def first_time(kinds: list[str]) -> pl.Expr:
        return pl.col("timestamp").filter(pl.col("event").is_in(kinds)).min()

    sessions = events.group_by(_GROUP).agg(
        start=first_time(_STARTS),
        source=pl.col("source").filter(is_start).first(),
        finished=first_time(["finished"]),
        generated=pl.col("timestamp").filter(pl.col("event") == "generated").max(),
        stopped=first_time(["aborted", "failed"]),
    )
    end = pl.coalesce("finished", "generated", "stopped")
    rows = (
        sessions.with_columns(
            end=end, success=pl.col("finished").is_not_null() | pl.col("generated").is_not_null()
        )
        .filter(pl.col("start").is_not_null() & pl.col("end").is_not_null())
        .filter(pl.col("end") >= pl.col("start"))
        .sort(["deployment", "start", "key"])
    )
    return rows.select(
        pl.col("source"),
        pl.col("deployment"),
        pl.col("key").alias("request_id"),
        pl.col("start"),
        ((pl.col("end") - pl.col("start")).dt.total_microseconds() / 1e6).alias("e2e"),
        pl.lit(None, pl.Float64).alias("ttft"),
        pl.lit(None, pl.Float64).alias("tpot"),
        pl.lit(None, pl.Int64).alias("prompt_tokens"),
        pl.lit(None, pl.Int64).alias("output_tokens"),
        pl.col("success"),
        pl.lit("log_lifecycle").alias("origin"),
    ).cast(REQUEST_LATENCIES)
