"""Per-request latency from request lifecycle log lines (the `requests` frame).

Which vLLM logs give both ends (vllm-log-formats.md §6.2): V0's AsyncLLMEngine path
(`Received`/`Added request X` ... `Finished request X.`, default up to 0.6.1), and V1 with
`--enable-log-requests --enable-log-outputs` (`Received request X` ... `Generated response X`).
The default MQLLMEngine (0.6.2-0.10.2) and plain V1 log starts only: no rows come out of those.

Rules:
* start: the earliest `received`/`added` of the request; end: the first `finished` or
  `generated` (a response, or a stream's `(streaming complete)`), whichever comes first, else
  the last `delta` (a stream's progress: one that was cut off ends at its last delta), else
  the first `aborted`/`failed`, which also marks success=False.
* ids are matched across spellings: from 0.14 `Added request` logs `<id>-<8 random chars>`
  and completions add `-<index>`; such an id is folded onto the `Received` id it extends.
  `Aborted request(s) a,b.` stands for each id (only an abort lists ids: another line's id
  is one id, commas and dots and all).
* a start after the request's previous end opens a new request (the offline `LLM` class
  reuses ids "0", "1", ... in each process).
* records without a timestamp cannot be placed and are left out; the resolution is the log's
  (1 s for the classic `MM-DD HH:MM:SS` header, ms for JSON logs).

Two ways in, one set of rules: `latencies_from_requests` over a whole `requests` frame, and
`RequestJoin`, which `report` and `serve` feed chunk by chunk so that no request row is kept.
The join holds only the events of requests still open; it settles a request when it finishes
(`finished` or `generated`: nothing later changes its end), when its id starts again, or
when nothing of it was logged for `HORIZON` of log time, and keeps at most `MAX_OPEN` open
requests (the oldest settle first). It gives two compact frames, one row a request, when it
settles: JOINED (start and e2e) when both ends are known, else ARRIVALS (its start). The
difference from one go: an end logged more than an hour after the request's previous line is
not joined to it. What keeps it cheap: ids are looked up and requests grouped by hash (never
trusted alone: checked one-to-one over a batch's ids, or against the strings of the recent
ids a hash matches), and a batch's requests that are one request each (the usual case) are
summed up without sorting.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
from preemptscope.ingest.lifecycle_ids import _events, _fold_ids
from preemptscope.ingest.lifecycle_join import RequestJoin
from preemptscope.ingest.lifecycle_sessions import (
    ARRIVALS,
    JOINED,
    _joined,
    _numbered,
    _sessions,
)
from preemptscope.ingest.schema import REQUEST_LATENCIES, TIMESTAMP, LogFrames

# RequestJoin and its rows' shapes are re-exported: callers import the lifecycle from here.
__all__ = [
    "ARRIVALS",
    "JOINED",
    "RequestJoin",
    "latencies_from_requests",
    "log_arrivals",
    "log_latencies",
]


def latencies_from_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """REQUEST_LATENCIES rows (origin "log_lifecycle") for requests with both ends logged."""
    events = _events(requests)
    if events.is_empty():
        return pl.DataFrame(schema=REQUEST_LATENCIES)
    rows = _joined(_sessions(_numbered(_fold_ids(events)))).sort(["deployment", "start", "key"])
    return _as_latencies(rows, pl.col("source"), pl.col("deployment"), pl.col("key"))


def _as_latencies(
    rows: pl.DataFrame, source: pl.Expr, deployment: pl.Expr, rid: pl.Expr
) -> pl.DataFrame:
    """Joined rows (start, e2e, success) as REQUEST_LATENCIES (origin "log_lifecycle")."""
    return rows.select(
        source.alias("source"),
        deployment.alias("deployment"),
        rid.alias("request_id"),
        pl.col("start"),
        pl.col("e2e"),
        pl.lit(None, pl.Float64).alias("ttft"),
        pl.lit(None, pl.Float64).alias("tpot"),
        pl.lit(None, pl.Int64).alias("prompt_tokens"),
        pl.lit(None, pl.Int64).alias("output_tokens"),
        pl.col("success"),
        pl.lit("log_lifecycle").alias("origin"),
    ).cast(REQUEST_LATENCIES)


def log_latencies(logs: Sequence[LogFrames]) -> pl.DataFrame:
    """REQUEST_LATENCIES rows of a deployment's logs: reduced ones' JOINED rows (ids are not
    kept there), and the others' request rows joined in one go."""
    # Each file's rows are sorted before their constant columns are added, which then stay
    # constants (a sort writes every column out); one part (the usual report: one file) is
    # then sorted already.
    parts = [
        _as_latencies(
            lf.joined.select("start", "e2e", "success").sort("start", maintain_order=True),
            pl.lit(lf.source, pl.String),
            pl.lit(lf.deployment, pl.String),
            pl.lit(None, pl.String),
        )
        for lf in logs
        if lf.joined is not None and lf.joined.height
    ]
    rows = [lf["requests"] for lf in logs if not lf.reduced and lf["requests"].height]
    if rows:
        parts.append(latencies_from_requests(pl.concat(rows, how="vertical_relaxed")))
    if not parts:
        return pl.DataFrame(schema=REQUEST_LATENCIES)
    if len(parts) == 1:
        return parts[0]
    latencies = pl.concat(parts)
    # A deployment's logs (the usual call) sort by time alone: a sort on the constant name
    # too encodes it for every row.
    by = ["start"] if latencies["deployment"].n_unique() == 1 else ["deployment", "start"]
    return latencies.sort(by, maintain_order=True)


def log_arrivals(logs: Sequence[LogFrames]) -> pl.Series:
    """When each request of a deployment's logs started (sorted), by the same rules."""
    # A joined request's start is its arrival (ARRIVALS holds the others).
    parts = [
        frame[column]
        for lf in logs
        for frame, column in ((lf.arrivals, "timestamp"), (lf.joined, "start"))
        if frame is not None
    ]
    rows = [lf["requests"] for lf in logs if not lf.reduced and lf["requests"].height]
    if rows:
        join = RequestJoin()
        outs = [
            join.add(pl.concat(rows, how="vertical_relaxed").sort("timestamp", "line")),
            join.close(),
        ]
        parts += [piece for a, j in outs for piece in (a["timestamp"], j["start"])]
    if not parts:
        return pl.Series("timestamp", [], dtype=TIMESTAMP)
    return pl.concat(parts).sort()
