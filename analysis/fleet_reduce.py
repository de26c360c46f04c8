"""A fleet's /metrics windows reduced by Prometheus, with the raw samples only where they matter.

For every server at once, per analysis window [s, e) (range queries, step = the window):

- counters and histogram series: their value at e (the last sample of the window), so a
  window's increase is the difference of two consecutive window values: exactly the sum of
  its scrape-pair increases when nothing restarted (integers stay integers; no extrapolation);
- gauges (KV usage, running, waiting, waiting by reason): max_over_time, sum_over_time and
  count_over_time over [s, e);
- restarts: resets() of the restart counters over two windows (so the pair across a window
  edge is seen too).

Windows where a difference of window values could differ from the scrape pairs are read raw
(`/api/v1/query` of range selectors): each server's first and last window (the range's
edges), windows with a restart or a counter that went down, the window after a gap, and a
window where a series has no value while the server has samples. Busy windows (preemptions,
or a full KV cache with a queue) are read raw for the preemption counter, KV, waiting,
running, prompt tokens and ITL, so the evidence times are the scrapes' own. Everything else
of the analysis reads those raw samples (restarts, capacity from cache_config_info, the
counter since start). docs/fleet.md ("How samples are read") says what is exact and what not.

It owns the analysis' /metrics windows as a Prometheus computes them (`MetricWindows`, the
same columns `metric_windows` gives from snapshots). It is the one analysis module that asks
a server anything, and only through the `PromClient` it is handed: it opens no socket, reads
no file and judges nothing.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.analyze import HISTOGRAM_KINDS
from preemptscope.analysis.events import RESTART_COUNTERS
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import LatencyMetric, LatencyStats
from preemptscope.analysis.windows import (
    M_GENERATION_TOKENS,
    M_KV,
    M_PREEMPTIONS,
    M_PROMPT_TOKENS,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
    METRIC_WINDOW_COLUMNS,
    MetricWindows,
    gauge_columns,
    metric_evidence_times,
    whole,
)
from preemptscope.ingest import promapi
from preemptscope.ingest.promfleet import (
    AUTO_WINDOWS,
    SERIES_COLUMNS,
    auto_window,
    base_name,
)
from preemptscope.ingest.schema import METRIC_SAMPLES

__all__ = [
    "AUTO_WINDOWS",
    "SERIES_COLUMNS",
    "Batch",
    "FleetReducer",
    "Reduced",
    "ServerWindows",
    "auto_window",
    "base_name",
    "group_windows",
    "server_windows",
]

GAUGES = (M_KV, M_RUNNING, M_WAITING, M_WAITING_BY_REASON)
# Read raw in busy windows: the evidence (counter, KV, waiting) and the advice's calibration.
BUSY = (M_PREEMPTIONS, M_KV, M_WAITING, M_RUNNING, M_PROMPT_TOKENS,
        "inter_token_latency_seconds", "time_per_output_token_seconds")  # fmt: skip
# Points per answer: about 30 bytes each in JSON, so answers stay near 50 MB.
POINTS_PER_ANSWER = 1_500_000
STEPS_PER_QUERY = 10_000  # Prometheus refuses more than 11,000 points per series
PARALLEL_QUERIES = 2  # Prometheus evaluates a query on one core
# Servers per batch of range queries: about this many window values (series x windows, some
# 18 MB of JSON); the first batches are smaller, so the analysis starts early.
BATCH_POINTS = 600_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Reduced:
    """One server's answers to the range queries (window values at the window's end)."""

    lasts: list[promapi.RawSamples] = field(default_factory=list)
    maxima: list[promapi.RawSamples] = field(default_factory=list)
    sums: list[promapi.RawSamples] = field(default_factory=list)
    counts: list[promapi.RawSamples] = field(default_factory=list)
    restarts: set[int] = field(default_factory=set)  # windows with a restart in or before


@dataclass(frozen=True)
class ServerWindows:
    """One server, reduced: what group_windows combines and the samples read raw."""

    table: pl.DataFrame  # per window with data: gauges, scrapes, evidence times (m_* columns)
    counters: pl.DataFrame  # METRIC_SAMPLES: window values, raw samples in raw windows
    samples: pl.DataFrame  # METRIC_SAMPLES: the samples read raw, and only those
    raw: set[int]  # windows read raw (every series)
    busy: set[int]  # windows read raw for the evidence and calibration series
    series: int = 0  # distinct SERIES_COLUMNS keys in `counters`


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


# --- One server: windows from the reduced answers and the raw reads ---------------------------


def server_windows(
    client: promapi.PromClient,
    reduced: Reduced,
    *,
    selector: Callable[[Sequence[str] | None], str],
    names: Sequence[str],
    source: str,
    deployment: str,
    drop: set[str],
    start: datetime,
    end: datetime,
    params: AnalysisParams,
) -> ServerWindows:
    """One server's windows from its reduced answers, reading raw what they cannot give."""
    w_us = params.window_us

    def frame(chunks: list[promapi.RawSamples], ids: bool = False) -> pl.DataFrame:
        rows = promapi.series_frame(
            chunks, source=source, deployment=deployment, drop=drop, series_ids=ids
        )
        return rows.with_columns(
            win=(pl.col("timestamp").dt.epoch("us") - 1) // w_us  # t = e or e - 1 ms: (s, e]
        )

    lasts = frame(reduced.lasts, ids=True)
    maxima, sums, counts = frame(reduced.maxima), frame(reduced.sums), frame(reduced.counts)
    lo_s, hi_s = start.timestamp(), end.timestamp()
    w_s = w_us / 1e6

    scrapes_q = dict(counts.group_by("win").agg(pl.col("value").max()).iter_rows())
    nonempty = sorted(
        {int(k) for k, v in scrapes_q.items() if v and v > 0} | set(lasts["win"].unique())
    )
    if not nonempty:
        none = lasts.clear().drop("win", "series_id")
        return ServerWindows(pl.DataFrame(), none, none, set(), set())
    present = set(nonempty)
    first, last = nonempty[0], nonempty[-1]
    suspect: set[int] = {first, last}
    # A series missing from a window that has samples (a target that stopped mid-window, a
    # staleness marker, a series that appeared late).
    per_win = dict(lasts.group_by("win").len().iter_rows())
    width = max(per_win.values(), default=0)
    suspect |= {k for k in nonempty if per_win.get(k, 0) < width}
    # A value that went down or a `_created` that changed between two window values: a restart.
    keyed = lasts.sort("series_id", "timestamp").with_columns(
        prev=pl.col("value").shift(1).over("series_id")
    )
    moved = (pl.col("value") < pl.col("prev")) | (
        (pl.col("sample") == "created") & (pl.col("value") != pl.col("prev"))
    )
    suspect |= set(keyed.filter(moved.fill_null(False))["win"].to_list())
    suspect |= {k for k in reduced.restarts if k in present}
    suspect |= {k + 1 for k in reduced.restarts if k + 1 in present}
    suspect |= {k for k in nonempty[1:] if k - 1 not in present}  # after a gap
    previous = {b: a for a, b in itertools.pairwise(nonempty)}
    # Each run read raw from its previous window on, so a restart's previous scrape is real.
    raw = set(suspect)
    raw |= {previous[k] for k in suspect if k in previous and k - 1 not in suspect}

    def runs(wins: set[int]) -> list[tuple[int, int]]:
        ordered = sorted(wins)
        out: list[tuple[int, int]] = []
        for k in ordered:
            if out and k == out[-1][1] + 1:
                out[-1] = (out[-1][0], k)
            else:
                out.append((k, k))
        return out

    def read(wins: set[int], metric_names: Sequence[str] | None) -> list[pl.DataFrame]:
        frames = []
        for a, b in runs(wins):
            lo = max(lo_s, a * w_s - 0.001)  # a gauge sample at exactly s belongs to window a
            hi = min(hi_s, (b + 1) * w_s)
            if hi <= lo:
                continue
            chunks = list(client.raw(selector(metric_names), _at(lo), _at(hi)))
            frames.append(
                promapi.series_frame(chunks, source=source, deployment=deployment, drop=drop)
            )
        return frames

    raw_frames = read(raw, None)
    sampled = _concat(raw_frames)
    # Counters and histograms: the raw samples of raw windows, the window values elsewhere.
    counter_win = (pl.col("timestamp").dt.epoch("us") - 1) // w_us
    raw_counters = sampled.filter(
        counter_win.is_in(sorted(raw)) & (pl.col("type") != "gauge") & (pl.col("type") != "info")
    )
    kept = lasts.filter(~pl.col("win").is_in(sorted(raw)))
    mixed = pl.concat([raw_counters, kept.drop("win", "series_id")], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    # The series of `mixed`: those of its raw rows and one row per window-value series.
    series = pl.concat(
        [raw_counters.select(SERIES_COLUMNS),
         kept.unique("series_id", maintain_order=True).select(SERIES_COLUMNS)]
    ).n_unique()  # fmt: skip
    # Windows with data as the raw samples would have them: raw windows by their samples.
    floor_win = pl.col("timestamp").dt.epoch("us") // w_us
    # (a gauge's window by floor, a counter's by the pair convention: a scrape at exactly e
    # ends the pair of the window before)
    held = sampled.select(pl.concat([floor_win, counter_win]).alias("w"))["w"].unique()
    raw_data = set(held.to_list()) & raw
    data = sorted((present - raw) | raw_data)
    gauges = _gauges(maxima, sums, counts, sampled, data, raw, params)
    bounds = [(_at(k * w_s), _at((k + 1) * w_s)) for k in data]
    counter = mixed.filter(pl.col("metric") == M_PREEMPTIONS)
    preempted = latency.counter_increases(counter, M_PREEMPTIONS, bounds)
    hot = {
        k
        for k, p, kv, wait in zip(
            data, preempted, gauges["m_kv_max"], gauges["m_waiting_max"], strict=True
        )
        if (p or 0) > 0 or ((kv or 0) >= params.kv_saturated and (wait or 0) > 0)
    } - raw
    busy = _names_of(names, BUSY)
    busy_frames = read(hot, busy) if busy else []
    samples = _concat([*raw_frames, *busy_frames]).unique(maintain_order=True)
    samples = samples.sort("timestamp", maintain_order=True)
    # Evidence: a counter step needs the scrape before each run; a run's first sample is
    # compared with the previous window's value (exact; its time is not used).
    starts = [previous[a] for a, _ in runs(raw | hot) if a in previous and previous[a] not in raw]
    before = lasts.filter(pl.col("win").is_in(starts) & (pl.col("metric") == M_PREEMPTIONS))
    ev_frame = pl.concat([samples, before.drop("win", "series_id")], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    evidence = metric_evidence_times(ev_frame, params)
    read_wins = raw | hot
    gauges["m_ev_first"] = [evidence[k][0] if k in evidence and k in read_wins else None
                            for k in data]  # fmt: skip
    gauges["m_ev_last"] = [evidence[k][1] if k in evidence and k in read_wins else None
                           for k in data]  # fmt: skip
    table = pl.DataFrame({"win": data, **gauges})
    return ServerWindows(table, mixed, samples, raw, hot, series)


def _names_of(exposed: Sequence[str], canonical: Sequence[str]) -> list[str]:
    return [n for n in exposed if base_name(n) in canonical]


def _at(seconds: float) -> datetime:
    return EPOCH + timedelta(microseconds=round(seconds * 1e6))


def _concat(frames: Sequence[pl.DataFrame]) -> pl.DataFrame:
    if not frames:
        return pl.DataFrame(schema=METRIC_SAMPLES)
    return pl.concat(frames, how="vertical")


def _gauges(
    maxima: pl.DataFrame,
    sums: pl.DataFrame,
    counts: pl.DataFrame,
    sampled: pl.DataFrame,
    data: Sequence[int],
    raw: set[int],
    params: AnalysisParams,
) -> dict[str, list[Any]]:
    """Per window with data: gauge max/mean and scrapes, from raw samples or the reductions."""
    w_us = params.window_us
    raw_wins = [k for k in data if k in raw]
    bounds = [(_at(k * w_us / 1e6), _at((k + 1) * w_us / 1e6)) for k in raw_wins]

    def reduced(metric: str, labels: dict[str, str] | None) -> dict[int, tuple[float, float]]:
        def pick(rows: pl.DataFrame) -> pl.DataFrame:
            rows = rows.filter((pl.col("metric") == metric) & (pl.col("sample") == "value"))
            for key, value in (labels or {}).items():
                rows = rows.filter(pl.col("labels").str.json_path_match(f"$.{key}") == value)
            return rows.select("win", *latency.SERIES_KEYS, "value")

        keys = ["win", *latency.SERIES_KEYS]
        both = (
            pick(maxima)
            .rename({"value": "max"})
            .join(pick(sums).rename({"value": "sum"}), on=keys, nulls_equal=True)
            .join(pick(counts).rename({"value": "n"}), on=keys, nulls_equal=True)
        )
        # Series of one server are combined as the scrapes are: the fullest for a fraction,
        # the sum for counts (of several series, the sum of each one's maximum: a bound).
        perc = metric.endswith("_perc")
        per = both.group_by("win").agg(
            mx=pl.col("max").max() if perc else pl.col("max").sum(),
            mean=(pl.col("sum") / pl.col("n")).max()
            if perc
            else (pl.col("sum") / pl.col("n")).sum(),
        )
        return {row[0]: (row[1], row[2]) for row in per.iter_rows()}

    def one(
        metric: str, labels: dict[str, str] | None = None
    ) -> list[tuple[float | None, float | None]]:
        q = reduced(metric, labels)
        exact = (
            dict(
                zip(
                    raw_wins,
                    latency.gauge_windows(sampled, metric, bounds, labels=labels),
                    strict=True,
                )
            )
            if raw_wins
            else {}
        )
        return [exact.get(k, (None, None)) if k in raw else q.get(k, (None, None)) for k in data]

    kv, running, waiting = one(M_KV), one(M_RUNNING), one(M_WAITING)
    capacity = one(M_WAITING_BY_REASON, {"reason": "capacity"})
    floor_win = pl.col("timestamp").dt.epoch("us") // w_us
    raw_scrapes = dict(
        sampled.with_columns(w=floor_win)
        .group_by("w")
        .agg(pl.col("timestamp").n_unique())
        .iter_rows()
    )
    q_scrapes = dict(counts.group_by("win").agg(pl.col("value").max()).iter_rows())
    return {
        **gauge_columns(kv, running, waiting, capacity),
        "m_scrapes": [raw_scrapes.get(k) if k in raw else whole(q_scrapes.get(k)) for k in data],
    }


def group_windows(
    members: Sequence[ServerWindows],
    data: Sequence[int],
    params: AnalysisParams,
) -> MetricWindows:
    """One deployment's MetricWindows from its servers' (gauge table, counters frame)."""
    tables = [m.table for m in members if m.table.height]
    mixed = pl.concat([m.counters for m in members], how="vertical").sort(
        "timestamp", maintain_order=True
    )
    w_s = params.window_us / 1e6
    bounds = [(_at(k * w_s), _at((k + 1) * w_s)) for k in data]
    # Each metric's rows apart once: the latency functions then filter small frames.
    by_metric = {
        str(key[0]): part for key, part in mixed.partition_by("metric", as_dict=True).items()
    }
    empty = mixed.clear()

    def of(metric: str) -> pl.DataFrame:
        return by_metric.get(metric, empty)

    def rate(value: float | None) -> float | None:
        return value / params.window_s if value is not None else None

    counters = pl.DataFrame(
        {
            "win": list(data),
            "m_preemptions": [
                whole(x)
                for x in latency.counter_increases(of(M_PREEMPTIONS), M_PREEMPTIONS, bounds)
            ],
            "m_prompt_tp": [
                rate(x)
                for x in latency.counter_increases(of(M_PROMPT_TOKENS), M_PROMPT_TOKENS, bounds)
            ],
            "m_gen_tp": [
                rate(x)
                for x in latency.counter_increases(
                    of(M_GENERATION_TOKENS), M_GENERATION_TOKENS, bounds
                )
            ],
        },
        schema={
            "win": pl.Int64(),
            "m_preemptions": pl.Int64(),
            "m_prompt_tp": pl.Float64(),
            "m_gen_tp": pl.Float64(),
        },
    )
    if tables:
        typed = [pl.col(c).cast(METRIC_WINDOW_COLUMNS[c]) for c in tables[0].columns]
        gauges = pl.concat([t.select(typed) for t in tables], how="vertical")
        gauges = gauges.group_by("win").agg(
            pl.col("m_kv_max").max(),
            pl.col("m_kv_mean").max(),
            *(pl.when(pl.col(c).count() > 0).then(pl.col(c).sum()).alias(c)
              for c in ("m_running_mean", "m_running_max", "m_waiting_mean", "m_waiting_max",
                        "m_wfc_max", "m_scrapes")),
            pl.col("m_ev_first").min(),
            pl.col("m_ev_last").max(),
        )  # fmt: skip
        table = counters.join(gauges, on="win", how="left")
    else:
        table = counters
    table = table.select(
        [
            (pl.col(c) if c in table.columns else pl.lit(None)).cast(dtype).alias(c)
            for c, dtype in METRIC_WINDOW_COLUMNS.items()
        ]
    )
    with_buckets = {m for m, part in by_metric.items() if (part["sample"] == "bucket").any()}
    # Each kind's first histogram present, as latency.histogram_metric picks it.
    names: dict[LatencyMetric, str] = {}
    for kind in (cast(LatencyMetric, k) for k in HISTOGRAM_KINDS):
        name = next((n for n in latency.HISTOGRAM_METRICS[kind] if n in with_buckets), None)
        if name is not None:
            names[kind] = name
    histograms = (
        pl.concat([of(n) for n in sorted(set(names.values()))], how="vertical") if names else empty
    )
    found = latency.histograms_windows_stats(histograms, names, bounds)
    by_win: dict[int, dict[str, LatencyStats]] = {k: {} for k in data}
    for kind, stats_list in found.items():
        for k, stats in zip(data, stats_list, strict=True):
            if stats is not None:
                by_win[k][kind] = stats
    return MetricWindows(params.window_us, table, {k: v for k, v in by_win.items() if v})
