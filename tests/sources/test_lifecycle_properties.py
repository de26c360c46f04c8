"""`latencies_from_requests` equals the original window-function version on random events.

`_reference` is the implementation before the neighbour-comparison rewrite, kept verbatim as
the specification: same rows, same values, whatever the order, spelling or timing of events.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.ingest.lifecycle import RequestJoin, latencies_from_requests
from preemptscope.ingest.schema import REQUEST_LATENCIES, REQUESTS

T = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
_STARTS = ["received", "added"]
_GROUP = ["deployment", "key", "session"]
EVENTS = ["received", "added", "finished", "aborted", "generated", "delta", "failed"]
# Few base ids, so requests repeat (reused ids) and suffixed spellings fold onto them.
IDS = ["0", "1", "cmpl-a", "cmpl-b", "chatcmpl-x"]
SUFFIXES = ["", "-0", "-1a2b3c4d", "-0-1a2b3c4d", "-zz"]


def _reference_fold(events: pl.DataFrame) -> pl.DataFrame:
    received = events.filter(pl.col("event") == "received")["request_id"]
    reference = (
        received if received.len() else events.filter(pl.col("event") != "added")["request_id"]
    )
    known = reference.unique().implode()
    one = pl.col("request_id").str.replace(r"-[^-]+$", "")
    two = one.str.replace(r"-[^-]+$", "")
    key = (
        pl.when(pl.col("request_id").is_in(known))
        .then(pl.col("request_id"))
        .when(one.is_in(known))
        .then(one)
        .when(two.is_in(known))
        .then(two)
        .otherwise(pl.col("request_id"))
    )
    return events.with_columns(key=key)


def _reference(requests: pl.DataFrame) -> pl.DataFrame:
    events = (
        requests.filter(pl.col("timestamp").is_not_null() & pl.col("request_id").is_not_null())
        # Only an abort lists ids; a trailing dot is the id's (the rows leave the sentence's out).
        .with_columns(
            pl.when(pl.col("event") == "aborted")
            .then(pl.col("request_id").str.split(","))
            .otherwise(pl.concat_list("request_id"))
        )
        .explode("request_id")
        .with_columns(pl.col("request_id").str.strip_chars())
        .filter(pl.col("request_id") != "")
        .select("source", "line", "deployment", "timestamp", "event", "request_id")
    )
    if events.is_empty():
        return pl.DataFrame(schema=REQUEST_LATENCIES)
    events = _reference_fold(events).sort(["deployment", "key", "timestamp", "line"])
    is_start = pl.col("event").is_in(_STARTS)
    previous_is_start = pl.col("event").shift(1).over(["deployment", "key"]).is_in(_STARTS)
    opens = is_start & ~previous_is_start.fill_null(False)
    events = events.with_columns(session=opens.cast(pl.Int32).cum_sum().over(["deployment", "key"]))

    def first_time(kinds: list[str]) -> pl.Expr:
        return pl.col("timestamp").filter(pl.col("event").is_in(kinds)).min()

    sessions = events.group_by(_GROUP).agg(
        start=first_time(_STARTS),
        source=pl.col("source").filter(is_start).first(),
        finished=first_time(["finished"]),
        generated=first_time(["generated"]),
        delta=pl.col("timestamp").filter(pl.col("event") == "delta").max(),
        stopped=first_time(["aborted", "failed"]),
    )
    ended = pl.min_horizontal("finished", "generated")
    end = pl.coalesce(ended, "delta", "stopped")
    rows = (
        sessions.with_columns(end=end, success=ended.is_not_null() | pl.col("delta").is_not_null())
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


request_ids = st.one_of(
    st.builds(lambda base, suffix: base + suffix, st.sampled_from(IDS), st.sampled_from(SUFFIXES)),
    # `Aborted request(s) a,b.` lists, with the odd stray space, dot or empty item.
    st.lists(st.sampled_from(IDS), min_size=1, max_size=3).map(", ".join).map(lambda s: s + "."),
    st.sampled_from(["", ",", " . "]),
)
Row = tuple[int | None, str, str, str, str]  # seconds after T, event, id, deployment, source
noise_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(min_value=0, max_value=30)),  # seconds; ties are common
        st.sampled_from(EVENTS),
        request_ids,
        st.sampled_from(["a", "b"]),
        st.sampled_from(["x.log", "y.log"]),
    ),
    max_size=12,
)


@st.composite
def stories(draw: st.DrawFn) -> list[Row]:
    """One request's events: mostly a start or two, then an end, in several spellings."""
    base = draw(st.sampled_from(IDS))
    deployment = draw(st.sampled_from(["a", "b"]))
    source = draw(st.sampled_from(["x.log", "y.log"]))
    t = draw(st.integers(min_value=0, max_value=20))
    rows: list[Row] = []
    steps = draw(
        st.lists(
            st.tuples(
                st.integers(min_value=0, max_value=4),
                st.sampled_from([*_STARTS, *_STARTS, *EVENTS]),
                st.sampled_from(SUFFIXES),
            ),
            min_size=1,
            max_size=5,
        )
    )
    for dt, event, suffix in steps:
        t += dt
        rows.append((t, event, base + suffix, deployment, source))
    return rows


@st.composite
def event_rows(draw: st.DrawFn) -> list[Row]:
    """Interleaved request stories plus noise, in a random line order."""
    rows = [row for story in draw(st.lists(stories(), max_size=8)) for row in story]
    rows += draw(noise_rows)
    return (
        draw(st.permutations(rows))
        if draw(st.booleans())
        else sorted(rows, key=lambda row: -1 if row[0] is None else row[0])
    )


def _frame(rows: list[Row]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "source": [source for *_, source in rows],
            "line": list(range(1, len(rows) + 1)),
            "deployment": [deployment for _, _, _, deployment, _ in rows],
            "process": [None] * len(rows),
            "pid": [None] * len(rows),
            "level": ["INFO"] * len(rows),
            "timestamp": [None if t is None else T + timedelta(seconds=t) for t, *_ in rows],
            "event": [event for _, event, *_ in rows],
            "request_id": [rid for _, _, rid, _, _ in rows],
        },
        schema=REQUESTS,
    )


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    # Requests with the same deployment, start and id (a reused id restarted within the
    # resolution) come out in no defined order in either version: compare as sorted rows.
    return frame.sort(frame.columns, nulls_last=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_rows())
def test_matches_reference_on_random_events(
    rows: list[Row],
) -> None:
    requests = _frame(rows)
    new = latencies_from_requests(requests)
    old = _reference(requests)
    assert new.schema == old.schema == REQUEST_LATENCIES
    assert _canonical(new).equals(_canonical(old))
    # Rows are ordered by deployment, start and id, as before.
    assert new.select("deployment", "start", "request_id").equals(
        old.select("deployment", "start", "request_id")
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event_rows(), st.integers(min_value=0, max_value=2**32 - 1))
def test_row_order_of_the_input_does_not_matter(rows: list[Row], seed: int) -> None:
    shuffled = _frame(rows).sample(fraction=1.0, shuffle=True, seed=seed)
    assert _canonical(latencies_from_requests(shuffled)).equals(_canonical(_reference(shuffled)))


def _in_line_order(rows: list[Row]) -> pl.DataFrame:
    """The rows as one deployment's log holds them: in time order, lines numbered so."""
    return (
        _frame(rows)
        .with_columns(deployment=pl.lit("a"))
        .sort("timestamp", "line", nulls_last=True, maintain_order=True)
        .with_columns(line=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
    )


def _streamed(requests: pl.DataFrame, cuts: list[int]) -> tuple[pl.DataFrame, pl.DataFrame]:
    join = RequestJoin()
    arrivals, joined = [], []
    bounds = sorted({0, requests.height, *(c % (requests.height + 1) for c in cuts)})
    for low, high in itertools.pairwise(bounds):
        a, j = join.add(requests.slice(low, high - low))
        arrivals.append(a)
        joined.append(j)
    a, j = join.close()
    return pl.concat([*arrivals, a]), pl.concat([*joined, j])


@st.composite
def logged_stories(draw: st.DrawFn) -> list[Row]:
    """Request stories as vLLM logs them: each id's first line is its `Received` line, which
    carries the frontend's id (the suffixed spellings come from the engine after it)."""
    rows: list[Row] = []
    for story in draw(st.lists(stories(), max_size=8)):
        t, _, rid, deployment, source = story[0]
        base = next(i for i in sorted(IDS, key=len, reverse=True) if rid.startswith(i))
        rows.append((t, "received", base, deployment, source))
        rows += [(t, e, base if e == "received" else r, d, s) for t, e, r, d, s in story]
    return rows


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logged_stories(), st.lists(st.integers(min_value=0, max_value=64), max_size=6))
def test_streaming_join_matches_one_go(rows: list[Row], cuts: list[int]) -> None:
    # As a log is read: in time order (ties in line order), one deployment, in chunks.
    requests = _in_line_order(rows)
    arrivals, joined = _streamed(requests, cuts)
    whole = latencies_from_requests(requests)
    got = joined.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    want = whole.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    assert got.equals(want)
    # Every request with a start arrives once, whether or not it ends.
    events = _reference_fold(
        requests.filter(pl.col("timestamp").is_not_null() & pl.col("request_id").is_not_null())
        # Only an abort lists ids; a trailing dot is the id's (the rows leave the sentence's out).
        .with_columns(
            pl.when(pl.col("event") == "aborted")
            .then(pl.col("request_id").str.split(","))
            .otherwise(pl.concat_list("request_id"))
        )
        .explode("request_id")
        .with_columns(pl.col("request_id").str.strip_chars())
        .filter(pl.col("request_id") != "")
    ).sort(["key", "timestamp", "line"])
    previous_is_start = pl.col("event").shift(1).over("key").is_in(_STARTS).fill_null(False)
    opens = events.filter(pl.col("event").is_in(_STARTS) & ~previous_is_start)
    # One row a request: JOINED when both ends are known (its start is its arrival), else
    # ARRIVALS.
    starts = [*arrivals["timestamp"].to_list(), *joined["start"].to_list()]
    assert len(starts) == opens.height
    assert sorted(starts) == sorted(opens["timestamp"].to_list())


def test_streaming_join_bounds_open_requests() -> None:
    # A starts-only log (plain V1): every request stays open; at most MAX_OPEN are kept.
    n = 50
    requests = pl.DataFrame(
        {
            "source": ["x.log"] * n,
            "line": list(range(1, n + 1)),
            "deployment": ["a"] * n,
            "process": [None] * n,
            "pid": [None] * n,
            "level": ["INFO"] * n,
            "timestamp": [T + timedelta(seconds=i) for i in range(n)],
            "event": ["received"] * n,
            "request_id": [f"r{i}" for i in range(n)],
        },
        schema=REQUESTS,
    )
    join = RequestJoin(max_open=10)
    arrivals, joined = join.add(requests)
    # The evicted settle (arrived, no end); the open ones arrive when they settle.
    assert arrivals.height == n - 10 and joined.is_empty()
    assert join.open_requests == 10 and join.evicted == n - 10
    assert join.provisional()[0].height == 10
    # An hour without a line settles the rest.
    late = requests.head(1).with_columns(
        timestamp=pl.lit(T + timedelta(hours=2)), request_id=pl.lit("late")
    )
    arrivals, joined = join.add(late)
    assert arrivals.height == 10 and join.open_requests == 1
    arrivals, joined = join.close()
    assert arrivals["timestamp"].to_list() == [T + timedelta(hours=2)]


@settings(max_examples=60, deadline=None)
@given(logged_stories())
def test_streaming_join_on_spans_beyond_64_bits(rows: list[Row]) -> None:
    # The join orders a batch's events by (time, line) in 64 bits when the span fits: decades
    # of log and line numbers in the billions do not, and take the 128-bit order instead.
    requests = (
        _frame(rows)
        .with_columns(deployment=pl.lit("a"))
        .sort("timestamp", "line", nulls_last=True, maintain_order=True)
        .with_columns(
            line=pl.int_range(1, pl.len() + 1, dtype=pl.Int64) * 1_000_000_000,
            timestamp=T + (pl.col("timestamp") - T) * 50_000_000,
        )
    )
    join = RequestJoin(horizon=timedelta(days=365 * 100))
    joined = pl.concat([join.add(requests)[1], join.close()[1]])
    whole = latencies_from_requests(requests)
    got = joined.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    want = whole.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    assert got.equals(want)


def _constant_hash(self: pl.Series, *args: object, **kwargs: object) -> pl.Series:
    return pl.Series(self.name, [7] * self.len(), dtype=pl.UInt64)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logged_stories(), st.lists(st.integers(min_value=0, max_value=64), max_size=6))
def test_streaming_join_is_exact_when_every_id_shares_one_hash(
    rows: list[Row], cuts: list[int]
) -> None:
    # The join looks ids up and groups requests by hash: a collision must never fold an id
    # onto another or merge two requests. With one hash for every string, the results are
    # those of the one-go join.
    requests = _in_line_order(rows)
    whole = latencies_from_requests(requests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pl.Series, "hash", _constant_hash)
        arrivals, joined = _streamed(requests, cuts)
    got = joined.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    want = whole.select("source", "start", "e2e", "success").sort(pl.all(), nulls_last=True)
    assert got.equals(want)
    plain = _streamed(requests, cuts)[0]
    assert sorted(arrivals["timestamp"].to_list()) == sorted(plain["timestamp"].to_list())


def _expected_rows(requests: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """ARRIVALS and JOINED rows by the reference rules: a request's row names its first start
    line (in time, then line order), with that line's source and pid."""
    events = _reference_fold(
        requests.filter(pl.col("timestamp").is_not_null() & pl.col("request_id").is_not_null())
        # Only an abort lists ids; a trailing dot is the id's (the rows leave the sentence's out).
        .with_columns(
            pl.when(pl.col("event") == "aborted")
            .then(pl.col("request_id").str.split(","))
            .otherwise(pl.concat_list("request_id"))
        )
        .explode("request_id")
        .with_columns(pl.col("request_id").str.strip_chars())
        .filter(pl.col("request_id") != "")
    ).sort(["deployment", "key", "timestamp", "line"], maintain_order=True)
    is_start = pl.col("event").is_in(_STARTS)
    previous_is_start = pl.col("event").shift(1).over(["deployment", "key"]).is_in(_STARTS)
    opens = is_start & ~previous_is_start.fill_null(False)
    events = events.with_columns(session=opens.cast(pl.Int32).cum_sum().over(["deployment", "key"]))

    def first_time(kinds: list[str]) -> pl.Expr:
        return pl.col("timestamp").filter(pl.col("event").is_in(kinds)).min()

    ended = pl.min_horizontal("finished", "generated")
    sessions = (
        events.group_by(_GROUP)
        .agg(
            start=first_time(_STARTS),
            source=pl.col("source").filter(is_start).first(),
            line=pl.col("line").filter(is_start).first(),
            pid=pl.col("pid").filter(is_start).first(),
            finished=first_time(["finished"]),
            generated=first_time(["generated"]),
            delta=pl.col("timestamp").filter(pl.col("event") == "delta").max(),
            stopped=first_time(["aborted", "failed"]),
        )
        .with_columns(
            end=pl.coalesce(ended, "delta", "stopped"),
            success=ended.is_not_null() | pl.col("delta").is_not_null(),
        )
        .filter(pl.col("start").is_not_null())
    )
    joinable = (pl.col("end") >= pl.col("start")).fill_null(False)
    joined = sessions.filter(joinable).select(
        "source",
        "line",
        pl.col("pid").cast(pl.Int32),
        "start",
        e2e=(pl.col("end") - pl.col("start")).dt.total_microseconds() / 1e6,
        success="success",
    )
    arrivals = sessions.filter(~joinable).select(
        "source", "line", pl.col("pid").cast(pl.Int32), timestamp="start"
    )
    return arrivals, joined


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    logged_stories(),
    st.lists(st.integers(min_value=0, max_value=64), max_size=6),
    st.sampled_from([None, 1, 3]),
)
def test_streaming_join_rows_name_the_first_start_line(
    rows: list[Row], cuts: list[int], pids: int | None
) -> None:
    # Each row's line, source and pid are the request's first start's, whether a batch holds
    # one file and one process (taken as constants) or several; requests whose ids are reused
    # or whose lines are out of order (the slow path) too.
    requests = _in_line_order(rows).with_columns(
        pid=None if pids is None else (pl.col("line") * 7) % pids
    )
    arrivals, joined = _streamed(requests, cuts)
    want_arrivals, want_joined = _expected_rows(requests)
    assert _canonical(joined.select(want_joined.columns)).equals(_canonical(want_joined))
    assert _canonical(arrivals.select(want_arrivals.columns)).equals(_canonical(want_arrivals))
