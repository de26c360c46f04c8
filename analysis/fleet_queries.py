"""A fleet's range queries: planned per batch of servers, run in the background, split per server.

For every server at once, per analysis window [s, e) (range queries, step = the window):

- counters and histogram series: their value at e (the last sample of the window), so a
  window's increase is the difference of two consecutive window values: exactly the sum of
  its scrape-pair increases when nothing restarted (integers stay integers; no extrapolation);
- gauges (KV usage, running, waiting, waiting by reason): max_over_time, sum_over_time and
  count_over_time over [s, e);
- restarts: resets() of the restart counters over two windows (so the pair across a window
  edge is seen too).

This module owns the queries, their sizes (points per answer, steps per query, servers per
batch) and `FleetReducer`, which runs them through the `PromClient` it is handed. It never
turns an answer into windows (`analysis/fleet_reduce.py` does), opens a socket itself or
judges anything.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl
from preemptscope.analysis.events import RESTART_COUNTERS
from preemptscope.analysis.windows import (
    M_KV,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
)
from preemptscope.ingest import promapi
from preemptscope.ingest.promfleet import base_name

GAUGES = (M_KV, M_RUNNING, M_WAITING, M_WAITING_BY_REASON)
# Points per answer: about 30 bytes each in JSON, so answers stay near 50 MB.
POINTS_PER_ANSWER = 1_500_000
STEPS_PER_QUERY = 10_000  # Prometheus refuses more than 11,000 points per series
PARALLEL_QUERIES = 2  # Prometheus evaluates a query on one core
# Servers per batch of range queries: about this many window values (series x windows, some
# 18 MB of JSON); the first batches are smaller, so the analysis starts early.
BATCH_POINTS = 600_000


@dataclass
class Reduced:
    """One server's answers to the range queries (window values at the window's end)."""

    lasts: list[promapi.RawSamples] = field(default_factory=list)
    maxima: list[promapi.RawSamples] = field(default_factory=list)
    sums: list[promapi.RawSamples] = field(default_factory=list)
    counts: list[promapi.RawSamples] = field(default_factory=list)
    restarts: set[int] = field(default_factory=set)  # windows with a restart in or before


def _regex(names: Iterable[str]) -> str:
    return "|".join(sorted(set(names)))


# A server to reduce: (name, identity matchers, exposed names).
ServerSpec = tuple[str, tuple[tuple[str, str], ...], tuple[str, ...]]
# A range query: (kind, query, first evaluation, last evaluation, the name a function drops).
_Job = tuple[str, str, float, float, str | None]


@dataclass(frozen=True)
class Batch:
    """Servers whose windows are read with one set of range queries."""

    servers: Sequence[ServerSpec]
    matchers: str  # PromQL matchers selecting these servers' series ('' for every series)
    series: int  # how many series they have (sizes the queries' time chunks)


class FleetReducer:
    """The range queries of a fleet, batch by batch, in the background.

    The caller takes the servers' answers in batch order (take()) while the next batches'
    queries run (`ahead` batches beyond the one taken from, PARALLEL_QUERIES at a time), so
    reducing and analysing one batch overlaps Prometheus evaluating the next; at most about
    `ahead` batches of answers are held. Errors of a batch's queries are raised by take().
    """

    def __init__(
        self,
        client: promapi.PromClient,
        batches: Sequence[Batch],
        *,
        start: datetime,
        end: datetime,
        window_s: float,
        selector: str,
        identify: Callable[[dict[str, str]], tuple[tuple[str, str], ...]],
        ahead: int = 2,
    ) -> None:
        self._client = client
        self._batches = list(batches)
        self._start, self._end, self._w = start, end, window_s
        self._selector = selector
        self._identify = identify
        self._ahead = ahead
        self._where = {spec[0]: i for i, b in enumerate(self._batches) for spec in b.servers}
        self._submitted = 0
        self._jobs: dict[int, list[Future[tuple[str, dict[str, promapi.RawSamples]]]]] = {}
        self._answers: dict[int, dict[str, Reduced]] = {}
        self._failed: dict[int, BaseException] = {}
        self._pool = ThreadPoolExecutor(PARALLEL_QUERIES, thread_name_prefix="prometheus")

    def take(self, name: str) -> Reduced:
        """One server's answers (waiting for its batch's queries); empty for an unknown name."""
        b = self._where.pop(name, None)
        if b is None:
            return Reduced()
        if b in self._failed:  # its queries failed: every server of it fails the same way
            raise self._failed[b]
        if b not in self._answers:
            self._submit(b + self._ahead)
            try:
                self._answers[b] = self._collect(b)
            except BaseException as exc:
                self._failed[b] = exc
                raise
        answers = self._answers[b]
        found = answers.pop(name)
        if not answers:
            del self._answers[b]
        return found

    def wait_first(self) -> None:
        """Wait for the first batch, before any is taken (a bad query fails here)."""
        if self._batches and self._submitted == 0:
            self._submit(self._ahead)
            self._answers[0] = self._collect(0)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, through: int) -> None:
        while self._submitted <= min(through, len(self._batches) - 1):
            b = self._submitted
            batch = self._batches[b]
            by_identity = {identity: name for name, identity, _ in batch.servers}
            self._jobs[b] = [
                self._pool.submit(self._run, job, by_identity) for job in self._plan(batch)
            ]
            self._submitted += 1

    def _collect(self, b: int) -> dict[str, Reduced]:
        out = {name: Reduced() for name, _, _ in self._batches[b].servers}
        for future in self._jobs.pop(b):
            kind, parts = future.result()
            for name, part in parts.items():
                if kind == "restarts":
                    wins = ((part.samples["t"] / self._w).round().cast(pl.Int64) - 1).to_list()
                    out[name].restarts.update(wins)
                else:
                    getattr(out[name], kind).append(part)
        return out

    def _plan(self, batch: Batch) -> list[_Job]:
        servers = batch.servers
        exposed = {n for _, _, names in servers for n in names}
        counters = sorted(n for n in exposed if base_name(n) not in (*GAUGES, "cache_config_info"))
        gauges = sorted(n for n in exposed if base_name(n) in GAUGES)
        restart = sorted(n for n in counters if base_name(n) in RESTART_COUNTERS and
                         not n.endswith("_created"))  # fmt: skip
        w = self._w
        first_win = math.floor(self._start.timestamp() / w)
        last_win = math.floor(self._end.timestamp() / w)
        extra = "".join(f",{m}" for m in (self._selector, batch.matchers) if m)
        w_ms = max(1, round(w * 1000))
        steps = max(1, min(STEPS_PER_QUERY, POINTS_PER_ANSWER // max(1, batch.series)))

        def select(names: Sequence[str]) -> str:
            return f"{{__name__=~{promapi.quote(_regex(names))}{extra}}}"

        # (kind, query, offset of the evaluation, the metric name a range function drops)
        queries: list[tuple[str, str, float, str | None]] = []
        if counters:
            # At a window's end: the instant selector is the last sample (cheaper than
            # last_over_time, which keeps the name too) when the 5-min lookback cannot reach
            # the previous window.
            fn = "" if w >= 300 else "last_over_time"
            lasts = select(counters) if not fn else f"{fn}({select(counters)}[{w_ms}ms])"
            queries.append(("lasts", lasts, 0.0, None))
        # Gauges evaluated 1 ms before the window's end: the range (s - 1ms, e - 1ms] is
        # [s, e). One query per name: series of several names would collide once the name is
        # dropped (label_replace to keep it costs Prometheus ten times the query).
        for kind, fn in (("maxima", "max_over_time"), ("sums", "sum_over_time"),
                         ("counts", "count_over_time")):  # fmt: skip
            for n in gauges:
                query = f"{fn}({{__name__={promapi.quote(n)}{extra}}}[{w_ms}ms])"
                queries.append((kind, query, -0.001, n))
        for n in restart:
            resets = f"resets({{__name__={promapi.quote(n)}{extra}}}[{2 * w_ms}ms]) > 0"
            query = f"count by (namespace, pod, instance, job) ({resets})"
            queries.append(("restarts", query, 0.0, None))
        return [
            (kind, query, (lo + 1) * w + offset, (min(last_win, lo + steps - 1) + 1) * w + offset,
             n)
            for lo in range(first_win, last_win + 1, steps)
            for kind, query, offset, n in queries
        ]  # fmt: skip

    def _run(
        self, job: _Job, by_identity: dict[tuple[tuple[str, str], ...], str]
    ) -> tuple[str, dict[str, promapi.RawSamples]]:
        kind, query, first, last, name = job
        answer = self._client.range_query(query, first, last, self._w)
        if name is not None:
            for item in answer.labels:
                item["__name__"] = name
        return kind, _split(answer, by_identity, self._identify)


def _split(
    answer: promapi.RawSamples,
    by_identity: dict[tuple[tuple[str, str], ...], str],
    identify: Callable[[dict[str, str]], tuple[tuple[str, str], ...]],
) -> dict[str, promapi.RawSamples]:
    """One answer's series per server (series renumbered from 0 in each)."""
    owner: list[int] = []
    local: list[int] = []
    names: list[str] = []
    labels: dict[str, list[dict[str, str]]] = {}
    index = {}
    for item in answer.labels:
        name = by_identity.get(identify(item))
        if name is None:
            owner.append(-1)
            local.append(-1)
            continue
        if name not in index:
            index[name] = len(names)
            names.append(name)
            labels[name] = []
        owner.append(index[name])
        local.append(len(labels[name]))
        labels[name].append(item)
    if not names or answer.samples.is_empty():
        return {name: promapi.RawSamples(labels[name], answer.samples.clear()) for name in names}
    ids = answer.samples["series"]
    frame = answer.samples.with_columns(
        owner=pl.Series(owner, dtype=pl.Int64).gather(ids),
        series=pl.Series(local, dtype=pl.Int64).gather(ids),
    ).filter(pl.col("owner") >= 0)
    parts = frame.partition_by("owner", as_dict=True)
    result = {}
    for position, name in enumerate(names):
        part = parts.get((position,))
        samples = part.drop("owner") if part is not None else answer.samples.clear()
        result[name] = promapi.RawSamples(labels[name], samples)
    return result
