"""The streaming request join: one deployment's request lines as they come, chunk by chunk.

Owns what the join holds between batches (the open requests' events, the recent ids, the
details lines waiting for their `Received`) and when a request settles (see lifecycle.py's
module doc). Never reads a file: `report` and `serve` hand it frames.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
from preemptscope.ingest import schema
from preemptscope.ingest.lifecycle_ids import (
    _EVENT_COLUMNS,
    _events,
    _fold_ids,
    _identified,
    _is_reference,
)
from preemptscope.ingest.lifecycle_sessions import (
    _PROMPT,
    _REQUEST,
    ARRIVALS,
    JOINED,
    _numbered,
    _quick_sessions,
    _sessions,
    _single,
    _split,
    _with_prompt_nulls,
)
from preemptscope.ingest.prompts import PROMPTS
from preemptscope.ingest.schema import PROMPT_COLUMNS, TIMESTAMP

__all__ = ["HORIZON", "MAX_OPEN", "RequestJoin"]

# What names a session of a request in the streaming join (see `_identified`).
_SESSION = ["deployment", "_id", "session"]

# A request with no line for this long (log time) is settled: its end, if any, came.
HORIZON = timedelta(hours=1)
# Open requests kept at most (starts-only logs open one per request and never close it).
MAX_OPEN = 100_000

_RECENT = pl.Schema({"request_id": pl.String(), "timestamp": TIMESTAMP, "_h": pl.UInt64()})


class RequestJoin:
    """Join one deployment's request lines as they stream in (see lifecycle.py's module doc).

    `add(requests)` takes the next rows (REQUESTS, in line order within a file; files in time
    order) and returns (ARRIVALS, JOINED) rows settled by them; `close()` settles the rest.
    """

    def __init__(self, *, horizon: timedelta = HORIZON, max_open: int = MAX_OPEN) -> None:
        self._horizon = horizon
        self._max_open = max_open
        self._open = pl.DataFrame(schema={**_event_schema(), "key": pl.String()})
        # Whether a prompt was seen: only then do the events carry the prompt columns (a log
        # that shows no ids pays nothing for them; the rows get nulls when they settle).
        self._prompted = False
        # Details lines (`Request %s details:`) of the last batch whose request was not found
        # yet: its `Received` line may open the next batch.
        self._details = pl.DataFrame(schema=PROMPTS)
        # Ids seen lately (the last HORIZON, at most MAX_OPEN): a suffixed spelling of an id
        # folds onto it even when its request settled in an earlier batch.
        self._recent = pl.DataFrame(schema=_RECENT)
        self._received = False
        self.evicted = 0  # requests settled early because MAX_OPEN were open
        self._still = pl.DataFrame()  # the open requests' sessions (_sessions rows)

    @property
    def open_requests(self) -> int:
        return self._still.height

    def oldest_open_start(self) -> datetime | None:
        """The earliest start of the requests still open (None when none has one yet)."""
        if self._still.is_empty() or "start" not in self._still.columns:
            return None
        value = self._still["start"].min()
        return value if isinstance(value, datetime) else None

    def provisional(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """ARRIVALS and JOINED rows (with `source`) of the open requests: what close() would
        give them now (JOINED for those with an end so far: a `delta` line, an abort). The
        live service shows them; the batch path closes the join instead."""
        if self._still.is_empty():
            return _empty_out()
        return _split(self._still)

    def add(
        self, requests: pl.DataFrame, prompts: pl.DataFrame | None = None
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """`prompts`: PROMPTS rows (ingest/prompts.py) of the same lines, if any."""
        fresh = _events(requests)
        if fresh.is_empty():
            return _empty_out()
        newest = fresh["timestamp"].max()
        self._received = self._received or bool((fresh["event"] == "received").any())
        # The batch's ids and the open requests' keys by hash when no two of them share one
        # (checked): then the lookups and the grouping compare numbers, not strings.
        hashes = fresh["request_id"].hash()
        earlier = self._remember(fresh, hashes, newest)
        open_keys = self._open["key"]
        open_ids = open_keys.hash().alias("_id")
        names = pl.concat([fresh["request_id"], open_keys])
        exact = pl.concat([hashes, open_ids]).n_unique() == names.n_unique()
        keyed = _fold_ids(fresh, self._received, earlier, hashes if exact else None)
        opened = self._open.hstack([open_ids]) if "_id" in keyed.columns else self._open
        self._prompted = self._prompted or (prompts is not None and prompts.height > 0)
        if not self._prompted:
            return self._settle(pl.concat([opened, keyed]), newest)
        opened = _with_prompt_nulls(opened)
        keyed = _by_line(keyed, prompts).select(opened.columns)
        return self._settle(self._with_details(pl.concat([opened, keyed]), prompts), newest)

    def close(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Settle every open request (the end of the input)."""
        if self._open.is_empty():
            return _empty_out()
        events, self._open = self._open, self._open.clear()
        return self._settle(events, None)

    def _with_details(self, events: pl.DataFrame, prompts: pl.DataFrame | None) -> pl.DataFrame:
        """Events with the prompt of each `Request %s details:` line (of this batch, or left
        from the last one) on the `Received` line of its request that has none yet: the
        nearest such line of the id before the details line, else the first after it. The
        details lines of this batch no request takes wait one batch (their `Received` may
        open the next); older ones are dropped."""
        fresh = None if prompts is None else prompts.filter(pl.col("request_id").is_not_null())
        details = self._details if fresh is None else pl.concat([self._details, fresh])
        self._details = details.clear()
        if details.height == 0:
            return events
        wanting = (events["event"] == "received") & events["prompt_tokens"].is_null()
        wanting = wanting & events["request_id"].is_in(details["request_id"].implode())
        candidates = events.select("line", "request_id").with_row_index("_row").filter(wanting)
        matched = (
            candidates.join(details.rename({"line": "_dline"}), on="request_id", how="inner")
            .with_columns(
                _after=pl.col("line") > pl.col("_dline"),
                _gap=(pl.col("line") - pl.col("_dline")).abs(),
            )
            # A details line takes one Received line (the nearest before it, else the first
            # after), and a Received line one details line.
            .sort("_after", "_gap", "_dline")
            .unique("_dline", keep="first", maintain_order=True)
            .unique("_row", keep="first", maintain_order=True)
        )
        if fresh is not None and fresh.height:
            self._details = fresh.filter(~fresh["line"].is_in(matched["_dline"].implode()))
        if matched.height == 0:
            return events
        # (A list column has no scatter: the matched rows are joined back by their index.)
        found = matched.select("_row", *(pl.col(name).alias(f"_{name}") for name in _PROMPT))
        return (
            events.with_row_index("_row")
            .join(found, on="_row", how="left", maintain_order="left")
            .with_columns(pl.coalesce(name, f"_{name}").alias(name) for name in _PROMPT)
            .drop("_row", *(f"_{name}" for name in _PROMPT))
        )

    def _remember(self, fresh: pl.DataFrame, hashes: pl.Series, newest: object) -> pl.DataFrame:
        """Add the batch's reference ids (`hashes`: of its ids) to the recent ones; the recent
        ones of earlier batches (the batch's own are looked up as they are)."""
        seen = fresh["request_id", "timestamp"].hstack([hashes.alias("_h")])
        seen = seen.filter(_is_reference(fresh, self._received))
        cutoff = newest - self._horizon  # type: ignore[operator]
        old = self._recent.filter(self._recent["timestamp"] >= cutoff)
        seen = seen.filter(seen["timestamp"] >= cutoff)
        # The last MAX_OPEN of them are kept: the oldest of the earlier ones go first.
        drop = max(0, old.height + seen.height - self._max_open)
        self._recent = pl.concat([old, seen]).tail(self._max_open)
        return old.slice(drop)

    def _settle(self, events: pl.DataFrame, newest: object) -> tuple[pl.DataFrame, pl.DataFrame]:
        if "_id" not in events.columns:
            events = _identified(events)
        simple, tangled = _quick_sessions(events)
        # Most batches have no reused id and few open requests: the slow path and each join
        # below are skipped when there is nothing for them.
        numbered = _semi(events, tangled, _REQUEST)
        if numbered.height:
            numbered = _numbered(numbered, "_id")
        sessions = simple
        if numbered.height:
            sessions = pl.concat([sessions, _sessions(numbered, "_id")], how="diagonal_relaxed")
        if newest is None:
            done = pl.repeat(True, sessions.height, eager=True)
        else:
            cutoff = newest - self._horizon  # type: ignore[operator]
            done = (
                sessions["done"].is_not_null()
                | sessions["later"].fill_null(False)
                | (sessions["last"] < cutoff).fill_null(False)
            )
        still = sessions.filter(~done)
        if still.height > self._max_open:
            # The oldest open requests settle first: memory stays bounded on starts-only logs.
            oldest = still.sort("last").head(still.height - self._max_open)
            self.evicted += oldest.height
            marks = oldest.select(*_SESSION, _evict=pl.lit(True))
            evict = sessions.join(marks, on=_SESSION, how="left", maintain_order="left")
            done = done | evict["_evict"].fill_null(False)
            still = sessions.filter(~done)
        # A request is emitted once, when it settles: in JOINED with both ends, else in
        # ARRIVALS (keeping one row a request, not two).
        arrivals, joined = _split(sessions.filter(done))
        self._still = still
        keep = [name for name in (*_EVENT_COLUMNS, "key", *_PROMPT) if name in events.columns]
        # The open requests' events stay: those of the one-request ids by id (their sessions
        # and the others' are apart), those of the others by session.
        open_simple = still.filter(still["_simple"].fill_null(False))[_REQUEST]
        parts = [_semi(events, open_simple, _REQUEST)[keep]]
        if numbered.height:
            parts.append(_semi(numbered, still[_SESSION], _SESSION)[keep])
        self._open = pl.concat(parts)
        return arrivals, joined


def _by_line(events: pl.DataFrame, prompts: pl.DataFrame | None) -> pl.DataFrame:
    """Events with the prompt columns of their own line (a `Received request` line showing
    ids: PROMPTS rows without a request id), null on the others."""
    own = None if prompts is None else prompts.filter(pl.col("request_id").is_null())
    if own is None or own.height == 0:
        return _with_prompt_nulls(events)
    own = own.unique("line", keep="first").drop("request_id")
    joined = events.join(own, on="line", how="left", maintain_order="left")
    received = joined["event"] == "received"
    return joined.with_columns(
        pl.when(received).then(pl.col(name)).otherwise(pl.lit(None, PROMPT_COLUMNS[name]))
        for name in _PROMPT
    )


def _semi(frame: pl.DataFrame, keys: pl.DataFrame, on: list[str]) -> pl.DataFrame:
    """The rows of `frame` whose `on` columns are a row of `keys`."""
    if keys.height == 0 or frame.height == 0:
        return frame.clear()
    if on == _REQUEST and _single(keys["deployment"]):
        # One deployment (a join's): a lookup of the ids, cheaper than a join.
        deployment = keys["deployment"][0]
        deployments = frame["deployment"]
        same = deployments.is_null() if deployment is None else deployments == deployment
        return frame.filter(same & frame["_id"].is_in(keys["_id"].implode()))
    return frame.join(keys, on=on, how="semi")


def _event_schema() -> dict[str, pl.DataType]:
    return {name: schema.REQUESTS[name] for name in _EVENT_COLUMNS}


def _empty_out() -> tuple[pl.DataFrame, pl.DataFrame]:
    return pl.DataFrame(schema=ARRIVALS), pl.DataFrame(schema=JOINED)
