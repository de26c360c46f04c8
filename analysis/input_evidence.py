"""What the inputs say about themselves: client runs' whole-run figures, sources apart in time.

Owns `client_run`, `run_evidence` and the evidence that inputs do not overlap in time. It
reads the inputs' frames and judges no window.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import polars as pl
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import (
    ClientRun,
    Evidence,
    LatencyStats,
)
from preemptscope.ingest.bench import BenchRun
from preemptscope.ingest.gathered import DeploymentInputs


def run_times(runs: Sequence[tuple[str, BenchRun]]) -> pl.DataFrame:
    """Start and end of the client runs that say when they ran, as one `start` column."""
    times = [t for _, run in runs for t in (run.start, run.end) if t is not None]
    return pl.DataFrame({"start": times}, schema={"start": pl.Datetime("us", "UTC")})


def client_run(path: str, run: BenchRun) -> ClientRun:
    """A client run's whole-run figures in the report's units and names."""
    latency: dict[str, LatencyStats] = {}
    for name, figures in run.stats.items():
        if name not in ("e2e", "ttft", "tpot", "itl"):
            continue
        ratio = (
            figures.p99 / figures.mean
            if figures.p99 is not None and figures.mean not in (None, 0)
            else None
        )
        latency[name] = LatencyStats(
            metric=name,  # type: ignore[arg-type]
            source="run",
            count=figures.count,
            mean=figures.mean,
            p50=figures.p50,
            p90=figures.p90,
            p99=figures.p99,
            p99_over_mean=ratio,
        )
    tokens = None
    if run.input_tokens is not None and run.output_tokens is not None and run.requests:
        tokens = (run.input_tokens + run.output_tokens) / run.requests
    return ClientRun(
        source=path,
        label=run.label,
        start=run.start,
        end=run.end,
        duration_s=run.duration_s,
        requests=run.requests,
        failed=run.failed,
        request_throughput=run.request_throughput,
        goodput=run.goodput,
        mean_tokens_per_request=tokens,
        request_rate=run.request_rate
        if run.request_rate is not None and math.isfinite(run.request_rate)
        else None,
        max_concurrency=run.max_concurrency,
        latency=latency,
    )


def run_evidence(
    index: int, run: ClientRun, metric: str | None, params: AnalysisParams
) -> Evidence:
    """One sentence per client run, from its own whole-run figures."""
    chosen = metric if metric in run.latency else None
    chosen = chosen or next((m for m in params.latency_preference if m in run.latency), None)
    path = f"client_runs.{index}"
    quotes: dict[str, float | int | str | None] = {f"{path}.label": run.label}
    parts = []
    if run.requests is not None:
        quotes[f"{path}.requests"] = run.requests
        parts.append(f"{run.requests} requests")
    if run.duration_s is not None:
        quotes[f"{path}.duration_s"] = run.duration_s
        parts.append(f"in {run.duration_s:.1f} s")
    if run.request_throughput is not None:
        quotes[f"{path}.request_throughput"] = run.request_throughput
        parts.append(f"({run.request_throughput:.2f} req/s)")
    if run.goodput is not None:
        quotes[f"{path}.goodput"] = run.goodput
        parts.append(f"goodput {run.goodput:.2f} req/s")
    when = (
        f" from {run.start:%Y-%m-%d %H:%M:%S} UTC"
        if run.start is not None
        else " (the file does not say when it ran: not placed in time)"
    )
    figures = ""
    value = None
    if chosen is not None:
        stats = run.latency[chosen]
        lat = f"{path}.latency.{chosen}"
        shown = []
        if stats.p99 is not None:
            quotes[f"{lat}.p99"] = stats.p99
            shown.append(f"p99 {stats.p99:.3f} s")
        if stats.mean is not None:
            quotes[f"{lat}.mean"] = stats.mean
            shown.append(f"mean {stats.mean:.3f} s")
        if stats.p99_over_mean is not None:
            quotes[f"{lat}.p99_over_mean"] = stats.p99_over_mean
            shown.append(f"p99/mean {stats.p99_over_mean:.2f}")
            value = stats.p99_over_mean
        figures = f"; whole-run {chosen} " + ", ".join(shown) if shown else ""
    # vllm bench labels an unlabelled run by its request rate: say so rather than "run 4.0".
    rate = run.request_rate
    named = (
        f"at {rate:g} req/s offered"
        if rate is not None and run.label in (str(rate), f"{rate:g}")
        else run.label
    )
    return Evidence(
        "client_run",
        f"client run {named}{when}: " + " ".join(parts) + figures,
        value,
        quotes,
    )


Span = tuple[str, datetime, datetime]


def source_spans(
    sources: dict[str, list[tuple[pl.DataFrame | None, str]]],
) -> list[Span]:
    """(source, first, last) time of each input kind that has timestamps."""
    spans: list[Span] = []
    for name, parts in sources.items():
        lows, highs = [], []
        for frame, column in parts:
            if frame is None or frame.is_empty():
                continue
            times = frame[column].drop_nulls()
            low, high = times.min(), times.max()
            if isinstance(low, datetime) and isinstance(high, datetime):
                lows.append(low)
                highs.append(high)
        if lows:
            spans.append((name, min(lows), max(highs)))
    return spans


def _clusters(spans: Sequence[Span]) -> list[tuple[list[str], datetime, datetime]]:
    """Sources that overlap in time, merged; disjoint groups stay apart, in time order."""
    out: list[tuple[list[str], datetime, datetime]] = []
    for name, low, high in sorted(spans, key=lambda s: s[1]):
        if out and low <= out[-1][2]:
            names, first, last = out[-1]
            out[-1] = ([*names, name], first, max(last, high))
        else:
            out.append(([name], low, high))
    return out


def span_end(spans: Sequence[Span], moment: datetime | None) -> datetime | None:
    """The end of the data for recency: the end of the overlapping sources holding `moment`.

    A source that does not overlap the others (a /metrics snapshot copied today beside an
    old log) must not make the others' evidence old: each group is judged on its own span.
    """
    groups = _clusters(spans)
    if not groups:
        return None
    if moment is not None:
        before = [g for g in groups if g[1] <= moment]
        if before:
            return before[-1][2]
    return groups[-1][2]


def disjoint_evidence(spans: Sequence[Span], *, judged: bool) -> Evidence | None:
    """Sources of one deployment that never overlap in time: usually a wrong --tz or --year."""
    groups = _clusters(spans)
    if len(groups) < 2:
        return None
    (a_names, a0, a1), (b_names, b0, b1) = groups[0], groups[1]
    gap = (b0 - a1).total_seconds()
    a, b = " + ".join(a_names), " + ".join(b_names)
    how = "recency is judged on each one's own span; " if judged else ""
    return Evidence(
        "sources_disjoint",
        f"the sources are disjoint: the {a} ({a0:%Y-%m-%d %H:%M} to {a1:%Y-%m-%d %H:%M} UTC) "
        f"and the {b} ({b0:%Y-%m-%d %H:%M} to {b1:%Y-%m-%d %H:%M} UTC) never overlap "
        f"({gap / 3600:.1f} h apart): {how}check --tz / --year for the log and "
        "--bench-start for client results",
        gap,
    )


def source_paths(inputs: DeploymentInputs) -> list[str]:
    paths = [s.path for s in inputs.sources] or [lf.source for lf in inputs.logs]
    return list(dict.fromkeys(paths))
