"""Preemption vs tail latency across windows, and over-capacity episodes."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Literal

from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Correlation, Episode, LatencyMetric, Window


def ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks, ties sharing their average rank (as Spearman's rho requires)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        average = (i + j) / 2 + 1
        for k in range(i, j + 1):
            result[order[k]] = average
        i = j + 1
    return result


def pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r, or None when undefined (fewer than 3 points or a constant series)."""
    if len(x) != len(y):
        raise ValueError("series of different lengths")
    n = len(x)
    if n < 3:
        return None
    mx, my = sum(x) / n, sum(y) / n
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation: Pearson's r of the (tie-averaged) ranks."""
    return pearson(ranks(x), ranks(y))


def rho_test(rho: float, n: int) -> tuple[float, float, float] | None:
    """(two-sided p-value, 95 % low, 95 % high) of a Spearman rho from n pairs; None if n < 4.

    Fisher's z with the Fieller-Hartley-Pearson variance 1.06 / (n - 3), accurate for
    rho below ~0.9 and n >= 10; no SciPy needed.
    """
    if n < 4:
        return None
    clipped = max(-0.999999, min(0.999999, rho))
    z = math.atanh(clipped)
    se = math.sqrt(1.06 / (n - 3))
    p = math.erfc(abs(z) / se / math.sqrt(2))
    return p, math.tanh(z - 1.96 * se), math.tanh(z + 1.96 * se)


def preemption_signal(window: Window) -> float | None:
    """Preemptions per window as a number; an inferred window counts 1, no evidence None."""
    if window.forced_preemptions:
        return 0.0  # a cache reset says nothing about capacity
    if window.preemptions is not None:
        return float(window.preemptions)
    if window.likely_preempting:
        return 1.0
    return None


def pick_latency_metric(windows: Sequence[Window], params: AnalysisParams) -> LatencyMetric | None:
    """The preferred latency metric with a p99/mean in the most windows."""
    best: tuple[int, int, str] | None = None
    for rank, name in enumerate(params.latency_preference):
        n = sum(1 for w in windows if _tail(w, name) is not None)
        if n and (best is None or (n, -rank) > (best[0], -best[1])):
            best = (n, rank, name)
    if best is None:
        return None
    metric: LatencyMetric = best[2]  # type: ignore[assignment]
    return metric


def _tail(window: Window, metric: str) -> float | None:
    stats = window.latency.get(metric)
    return stats.p99_over_mean if stats is not None else None


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def correlate(windows: Sequence[Window], params: AnalysisParams) -> Correlation:
    """p99/mean (and p99) in windows with vs without preemption, rank correlation, best lag."""
    metric = pick_latency_metric(windows, params)
    active = [w for w in windows if not w.idle and w.samples > 0]
    with_p = [w for w in active if (preemption_signal(w) or 0) > 0]
    without = [w for w in active if preemption_signal(w) == 0]
    if metric is None:
        return Correlation(
            None, len(with_p), len(without), None, None, None, None, None, None, None
        )

    def collect(group: list[Window], field: str) -> list[float]:
        out = []
        for w in group:
            stats = w.latency.get(metric)
            value = getattr(stats, field) if stats is not None else None
            if value is not None and math.isfinite(value):
                out.append(float(value))
        return out

    rho_by_lag: dict[int, float] = {}
    n_by_lag: dict[int, int] = {}
    signal = [preemption_signal(w) for w in windows]
    tail = [_tail(w, metric) for w in windows]
    lags = range(0, min(params.max_lag_windows, len(windows) - 1) + 1)
    for lag in lags:
        pairs = [
            (s, t)
            for s, t in zip(signal[: len(signal) - lag], tail[lag:], strict=True)
            if s is not None and t is not None
        ]
        n_by_lag[lag] = len(pairs)
        rho = spearman([a for a, _ in pairs], [b for _, b in pairs])
        if rho is not None:
            rho_by_lag[lag] = rho
    best_lag = max(rho_by_lag, key=lambda k: (abs(rho_by_lag[k]), -k)) if rho_by_lag else None
    p99_pairs = [
        (s, stats.p99)
        for s, w in zip(signal, windows, strict=True)
        if s is not None and (stats := w.latency.get(metric)) is not None and stats.p99 is not None
    ]
    rho0, n0 = rho_by_lag.get(0), n_by_lag.get(0, 0)
    test0 = rho_test(rho0, n0) if rho0 is not None else None
    lag_p = None
    if best_lag is not None and (t := rho_test(rho_by_lag[best_lag], n_by_lag[best_lag])):
        lag_p = min(1.0, t[0] * len(lags))  # Bonferroni: the best of len(lags) tries
    rho_p99 = spearman([a for a, _ in p99_pairs], [b for _, b in p99_pairs])
    test_p99 = rho_test(rho_p99, len(p99_pairs)) if rho_p99 is not None else None
    return Correlation(
        metric=metric,
        windows_with_preemption=len(with_p),
        windows_without_preemption=len(without),
        p99_over_mean_with=_median(collect(with_p, "p99_over_mean")),
        p99_over_mean_without=_median(collect(without, "p99_over_mean")),
        p99_with=_median(collect(with_p, "p99")),
        p99_without=_median(collect(without, "p99")),
        spearman_rho=rho_by_lag.get(0),
        best_lag_windows=best_lag,
        best_lag_rho=rho_by_lag[best_lag] if best_lag is not None else None,
        spearman_rho_p99=rho_p99,
        pairs=n0,
        p_value=test0[0] if test0 else None,
        rho_low=test0[1] if test0 else None,
        rho_high=test0[2] if test0 else None,
        best_lag_pairs=n_by_lag.get(best_lag, 0) if best_lag is not None else 0,
        best_lag_p_value=lag_p,
        pairs_p99=len(p99_pairs),
        p_value_p99=test_p99[0] if test_p99 else None,
        conclusion=_conclusion(rho0, n0, test0, params),
    )


def _conclusion(
    rho: float | None,
    n: int,
    test: tuple[float, float, float] | None,
    params: AnalysisParams,
) -> Literal["supports", "against", "too_few", "none"]:
    if n < params.min_correlation_windows:
        return "too_few" if n else "none"
    if rho is None or test is None:
        return "none"  # a constant series: no ranking to correlate
    return "supports" if rho > 0 and test[0] < params.correlation_alpha else "against"


def runs(
    windows: Sequence[Window], flagged: Callable[[Window], bool], params: AnalysisParams
) -> list[list[Window]]:
    """Maximal runs of flagged windows, bridging gaps of up to episode_gap_windows.

    Only a window with data of its own (a stats record or a scrape) is bridged: an empty window
    says nothing, so it ends the run. Runs start and end on flagged windows.
    """
    found: list[list[Window]] = []
    current: list[Window] = []
    gap: list[Window] = []
    for w in windows:
        if flagged(w):
            current += [*gap, w]
            gap = []
        elif current:
            gap.append(w)
            if w.samples == 0 or len(gap) > params.episode_gap_windows:
                found.append(current)
                current, gap = [], []
    if current:
        found.append(current)
    return found


def episodes(
    windows: Sequence[Window],
    params: AnalysisParams,
    metric: LatencyMetric | None = None,
    interval_s: float = 0.0,
) -> list[Episode]:
    """Runs of over-capacity windows (see `runs`); `metric` is the deployment's latency metric.

    `interval_s` is the data's sampling interval: a record that shows the overload speaks for
    the interval before it, so an episode lasts from its first such record minus one interval
    to its last.
    """
    return [
        _episode(run, params, metric, interval_s)
        for run in runs(windows, lambda w: w.over_capacity, params)
    ]


def run_duration_s(run: Sequence[Window]) -> float:
    return (run[-1].end - run[0].start).total_seconds()


def _episode(
    run: list[Window], params: AnalysisParams, metric: LatencyMetric | None, interval_s: float
) -> Episode:
    counts = [w.preemptions for w in run if w.preemptions is not None]
    kv = [w.kv_usage_max for w in run if w.kv_usage_max is not None]
    waiting = [w.waiting_max for w in run if w.waiting_max is not None]
    tails = [t for w in run if metric is not None and (t := _tail(w, metric)) is not None]
    flagged = [w for w in run if w.over_capacity]
    # Evidence times where the records give them, else the window's own edges.
    firsts = [w.evidence_first or w.start for w in flagged]
    lasts = [w.evidence_last or w.end for w in flagged]
    first: datetime = min(firsts)
    last: datetime = max(lasts)
    step = timedelta(seconds=min(interval_s, params.window_s))
    begin = first - step if flagged[0].evidence_first else first
    duration = (last - begin).total_seconds()
    return Episode(
        start=run[0].start,
        end=run[-1].end,
        windows=len(run),
        preemptions=sum(counts) if counts else None,
        peak_kv_usage=max(kv) if kv else None,
        peak_waiting=max(waiting) if waiting else None,
        peak_p99_over_mean=max(tails) if tails else None,
        evidence_start=begin,
        evidence_end=last,
        duration_s=duration,
    )


def episode_duration_s(episode: Episode) -> float:
    """How long the overload lasted by its evidence (window edges when that is unknown)."""
    if episode.duration_s is not None:
        return episode.duration_s
    return (episode.end - episode.start).total_seconds()
