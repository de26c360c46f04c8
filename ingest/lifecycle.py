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
from datetime import datetime, timedelta

import polars as pl
from preemptscope.ingest import schema
from preemptscope.ingest.prompts import PROMPTS
from preemptscope.ingest.schema import PROMPT_COLUMNS, REQUEST_LATENCIES, TIMESTAMP, LogFrames

__all__ = [
    "ARRIVALS",
    "JOINED",
    "RequestJoin",
    "latencies_from_requests",
    "log_arrivals",
    "log_latencies",
]

_STARTS = ["received", "added"]
_DONE = ["finished", "generated"]  # either ends a request (the first of them)
_GROUP = ["deployment", "key", "session"]
# What names a request and a session of it in the streaming join (see `_identified`).
_REQUEST = ["deployment", "_id"]
_SESSION = ["deployment", "_id", "session"]

# A request with no line for this long (log time) is settled: its end, if any, came.
HORIZON = timedelta(hours=1)
# Open requests kept at most (starts-only logs open one per request and never close it).
MAX_OPEN = 100_000

# What the join emits: ARRIVALS and JOINED rows (ingest/schema.py) with the `source` they
# are in (one join reads all the files of a deployment).
ARRIVALS = pl.Schema({"source": pl.String(), **schema.ARRIVALS})
JOINED = pl.Schema({"source": pl.String(), **schema.JOINED})
_EVENT_COLUMNS = ["source", "line", "pid", "deployment", "timestamp", "event", "request_id"]
_PROMPT = list(PROMPT_COLUMNS)
_RECENT = pl.Schema({"request_id": pl.String(), "timestamp": TIMESTAMP, "_h": pl.UInt64()})


def _events(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per (event, id): `Aborted request(s) a,b.` stands for each id."""
    # Series operations and masks throughout the join's hot path: on a batch's 60,000 rows an
    # eager expression (Polars' in-memory engine) costs about 1 ms, the Series operation a
    # tenth of that.
    rows = requests[_EVENT_COLUMNS]
    # Only an abort lists ids (`Aborted request(s) %s.`, comma-joined); another line's id is
    # one id, commas and all (a client's `X-Request-Id`).
    listed = rows["request_id"].str.contains(",", literal=True) & (rows["event"] == "aborted")
    if listed.any():
        # Only the rows that list ids are split (exploding every row copies every row).
        lists = (
            rows.filter(listed)
            .with_columns(pl.col("request_id").str.split(","))
            .explode("request_id")
        )
        rows = pl.concat([rows.filter(~listed), lists])
    # One filter, after the ids are cleaned (a row without a time or an id has none either).
    # A trailing dot is the id's own: the rows leave the sentence's out (`Added request %s.`).
    rid = rows["request_id"].str.strip_chars()
    keep = rows["timestamp"].is_not_null() & rid.is_not_null() & (rid != "")
    return rows.with_columns(rid).filter(keep)


def _fold_ids(
    events: pl.DataFrame,
    received: bool | None = None,
    known_before: pl.DataFrame | None = None,
    hashes: pl.Series | None = None,
) -> pl.DataFrame:
    """Add `key`: the id as the frontend logged it (see module doc).

    `received`: whether the stream has `Received` lines at all (default: whether `events` has);
    `known_before`: ids of earlier batches that count as known, with their `_h` hashes
    (RequestJoin's recent ids); `hashes`: the ids' hashes, when no two ids of `events` share
    one (RequestJoin checks): ids are then matched by them, and `_id` (see `_identified`) is
    added when every key is one of the ids.
    """
    has_received = bool((events["event"] == "received").any()) if received is None else received
    ids = events["request_id"]
    is_reference = _is_reference(events, has_received)
    reference = ids.filter(is_reference).implode()
    # Reference ids are known by definition: only the others are looked up, first among
    # this batch's own (a small set: most lines name a request received in the same batch).
    others = (~is_reference).arg_true()
    if hashes is None:
        unknown = others.filter(~ids.gather(others).is_in(reference))
    else:
        own = hashes.filter(is_reference).implode()
        unknown = others.filter(~hashes.gather(others).is_in(own))
    if unknown.len() == 0:
        if hashes is not None:
            return events.with_columns(ids.alias("key"), hashes.alias("_id"))
        return events.with_columns(ids.alias("key"))
    before = known_before if known_before is not None and known_before.height else None
    # An id known as it is keeps its spelling: among these, only an earlier batch's can be.
    spelt = ids.gather(unknown)
    # The shortened spellings (the regex is what costs: only for the ids not known as they
    # are); the twice-shortened one only for the ids the first one does not fold.
    one = spelt.str.replace(r"-[^-]+$", "")
    n = spelt.len()
    earlier = _known_before(pl.concat([spelt, one]), before)  # one lookup for both
    exact = earlier.head(n)
    by_one = ~exact & (one.is_in(reference) | earlier.tail(n))
    folded = one.zip_with(by_one, spelt)
    # Whether a key may be none of the ids (an earlier batch's spelling).
    outside = bool(earlier.tail(n).any())
    rest = (~exact & ~by_one).arg_true()
    if rest.len():
        two = one.gather(rest).str.replace(r"-[^-]+$", "")
        before_two = _known_before(two, before)
        outside = outside or bool(before_two.any())
        by_two = two.is_in(reference) | before_two
        folded = folded.scatter(rest.filter(by_two), two.filter(by_two))
    keys = ids.scatter(unknown, folded).alias("key")
    if hashes is None or outside:
        return events.with_columns(keys)
    return events.with_columns(keys, hashes.scatter(unknown, folded.hash()).alias("_id"))


def _known_before(spellings: pl.Series, known: pl.DataFrame | None) -> pl.Series:
    """Whether each spelling is one of the `known` ids (a frame of request_id and its `_h`).

    The lookup is by hash (a set of integers, cheap to build at every batch, where a set of
    the strings costs 5x); a hash that matches is checked against the strings it stands for,
    so ids that share a hash are never taken for one another.
    """
    if known is None:
        return pl.repeat(False, spellings.len(), eager=True)
    hashes = spellings.hash()
    maybe = hashes.is_in(known["_h"].implode())
    if not maybe.any():
        return maybe
    where = maybe.arg_true()
    candidates = known["request_id"].filter(known["_h"].is_in(hashes.gather(where).implode()))
    sure = spellings.gather(where).is_in(candidates.implode())
    return maybe.scatter(where, sure)


def _is_reference(events: pl.DataFrame, received: bool) -> pl.Series:
    """The lines whose id is the frontend's: `Received` lines, or when a stream has none, every
    line but `Added` (whose id may carry the engine's suffixes)."""
    event = events["event"]
    return event == "received" if received else event != "added"


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
    join put them on have them: `RequestJoin._with_prompts`). A batch without any is given
    nulls after the grouping (an aggregation per group costs, whatever it finds)."""
    if (
        "prompt_tokens" not in events.columns
        or events["prompt_tokens"].null_count() == events.height
    ):
        return {}
    return {name: pl.col(name).drop_nulls().first() for name in _PROMPT}


def _with_prompt_nulls(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [name for name in _PROMPT if name not in frame.columns]
    return frame.with_columns(pl.lit(None, PROMPT_COLUMNS[name]).alias(name) for name in missing)


def _identified(events: pl.DataFrame) -> pl.DataFrame:
    """Keyed events with `_id`, a number that names their key: grouping by it costs half what
    grouping by the string does. It is the key's hash when no two keys of `events` share one
    (checked: a collision can never merge two requests), else the key's rank."""
    keys = events["key"]
    hashes = keys.hash()
    if hashes.n_unique() != keys.n_unique():
        hashes = keys.rank("dense").cast(pl.UInt64)
    return events.with_columns(hashes.alias("_id"))


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
    # constants (a sort writes every column out: 200 MB more on 4 M requests); one part (the
    # usual report: one file) is then sorted already.
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
    # too encodes it for every row (12 s and 100 MB more on 4 M requests out of order).
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


class RequestJoin:
    """Join one deployment's request lines as they stream in (see the module doc).

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
