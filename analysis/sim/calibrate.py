"""Calibration: the step cost, the settings and the workload of a deployment, from its own data.

One fit for every source. Each observation is one average step: its time `t` (a request's time
per output token, or a /metrics or stats interval's time per generated token per running
request), the requests running `n`, and the prompt tokens computed per second `p` around it.
A step computes about `n` decode tokens and `p x t` prefill tokens, so

    t = per_step + per_decode_token x n + per_prefill_token x p x t

is linear in the three costs; a non-negative least-squares fit gives them. Pure: frames in.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import polars as pl
from preemptscope.analysis.sim.config import FittedStepCost
from preemptscope.analysis.sim.workload import FloatArray

MIN_POINTS = 5


@dataclass(frozen=True)
class StepPoints:
    """Observed average steps: time per step, running requests, prompt tokens per second."""

    t: FloatArray
    n: FloatArray
    p: FloatArray
    basis: str

    def __len__(self) -> int:
        return len(self.t)


def _seconds(col: pl.Series) -> FloatArray:
    out: FloatArray = col.dt.epoch("us").cast(pl.Float64).to_numpy() / 1e6
    return out


def _mean_over(times: FloatArray, values: FloatArray, lo: FloatArray, hi: FloatArray) -> FloatArray:
    """Time-average over [lo, hi] of the step function that is values[k] from times[k] on."""
    order = np.argsort(times, kind="stable")
    t, v = times[order], np.cumsum(values[order])
    # Integral of the step function from t[0] to x: sum over pieces, via the cumulative value.
    seg = np.diff(t, append=t[-1]) * v
    area = np.concatenate([[0.0], np.cumsum(seg)])

    def integral(x: FloatArray) -> FloatArray:
        k = np.clip(np.searchsorted(t, x, side="right") - 1, -1, len(t) - 1)
        base = area[np.maximum(k, 0)]
        level = np.where(k >= 0, v[np.maximum(k, 0)], 0.0)
        start = np.where(k >= 0, t[np.maximum(k, 0)], x)
        result: FloatArray = np.where(k >= 0, base + level * (x - start), 0.0)
        return result

    span = np.maximum(hi - lo, 1e-9)
    out: FloatArray = (integral(hi) - integral(lo)) / span
    return out


def points_from_latencies(frame: pl.DataFrame | None) -> StepPoints | None:
    """One point per request with a TPOT: its decode stretch, who ran beside it, prompts then."""
    if frame is None or frame.is_empty():
        return None
    rows = frame.filter(
        pl.col("start").is_not_null()
        & pl.col("e2e").is_not_null()
        & pl.col("ttft").is_not_null()
        & (pl.col("output_tokens") > 1)
        & pl.col("prompt_tokens").is_not_null()
    )
    if rows.height < MIN_POINTS:
        return None
    start = _seconds(rows["start"])
    first = start + rows["ttft"].to_numpy()
    end = start + rows["e2e"].to_numpy()
    out_tokens = rows["output_tokens"].to_numpy().astype(np.float64)
    tpot = rows["tpot"].to_numpy() if "tpot" in rows.columns else np.full(rows.height, np.nan)
    tpot = np.where(np.isfinite(tpot), tpot, (end - first) / np.maximum(out_tokens - 1, 1))
    ok = (end > first) & (tpot > 0)
    # Running: a request runs from its admission (~ first token minus its prefill) to its end;
    # its first token stands in for the admission, its prompt is computed just before.
    times = np.concatenate([first, end])
    steps = np.concatenate([np.ones(len(first)), -np.ones(len(end))])
    n = _mean_over(times, steps, first, end)
    prompts = rows["prompt_tokens"].to_numpy().astype(np.float64)
    cum_t = np.sort(first)
    cum_p = np.concatenate([[0.0], np.cumsum(prompts[np.argsort(first)])])
    lo = np.searchsorted(cum_t, first, side="right")  # its own prompt came before
    hi = np.searchsorted(cum_t, end, side="right")
    p = (cum_p[hi] - cum_p[lo]) / np.maximum(end - first, 1e-9)
    keep = ok & (n >= 1)
    if keep.sum() < MIN_POINTS:
        return None
    return StepPoints(tpot[keep], n[keep], p[keep], f"{int(keep.sum())} requests' TPOT")


def _series(metrics: pl.DataFrame, name: str, sample: str | None = None) -> pl.DataFrame:
    rows = metrics.filter(pl.col("metric") == name)
    if sample is not None and "sample" in rows.columns:
        rows = rows.filter(pl.col("sample") == sample)
    return rows.group_by("timestamp").agg(pl.col("value").sum()).sort("timestamp")


def points_from_metrics(metrics: pl.DataFrame | None) -> StepPoints | None:
    """One point per scrape interval: ITL histogram delta, running gauge, prompt counter."""
    if metrics is None or metrics.is_empty():
        return None
    names = ("inter_token_latency_seconds", "time_per_output_token_seconds")
    for name in names:
        s = _series(metrics, name, "sum")
        c = _series(metrics, name, "count")
        if s.height >= 2:
            break
    else:
        return None
    running = _series(metrics, "num_requests_running")
    prompt = _series(metrics, "prompt_tokens")
    if prompt.is_empty():
        prompt = _series(metrics, "prompt_tokens_total")
    frame = (
        s.rename({"value": "s"})
        .join(c.rename({"value": "c"}), on="timestamp")
        .join(running.rename({"value": "r"}), on="timestamp", how="left")
        .join(prompt.rename({"value": "p"}), on="timestamp", how="left")
        .sort("timestamp")
    )
    if frame.height < 2:
        return None
    ts = _seconds(frame["timestamp"])
    ds, dc = np.diff(frame["s"].to_numpy()), np.diff(frame["c"].to_numpy())
    r = frame["r"].fill_null(0).to_numpy()
    dp = np.diff(frame["p"].fill_null(0).to_numpy())
    dt = np.diff(ts)
    n = (r[1:] + r[:-1]) / 2
    ok = (dc > 0) & (ds > 0) & (dt > 0) & (n >= 1) & (dp >= 0)  # counter resets drop out
    if ok.sum() < MIN_POINTS:
        return None
    return StepPoints(
        (ds / np.where(dc > 0, dc, 1))[ok],
        n[ok],
        (dp / np.where(dt > 0, dt, 1))[ok],
        f"{int(ok.sum())} /metrics intervals' ITL",
    )


def points_from_stats(stats: pl.DataFrame | None) -> StepPoints | None:
    """One point per busy stats interval: running / generation throughput is a step's time."""
    if stats is None or stats.is_empty():
        return None
    rows = stats.filter(
        pl.col("timestamp").is_not_null()
        & (pl.col("generation_throughput") > 0)
        & (pl.col("running") > 0)
    )
    if rows.height < MIN_POINTS:
        return None
    running = rows["running"].cast(pl.Float64).to_numpy()
    gen = rows["generation_throughput"].to_numpy()
    prompt = rows["prompt_throughput"].fill_null(0).to_numpy()
    return StepPoints(running / gen, running, prompt, f"{rows.height} stats lines' throughput")


def fit(points: StepPoints) -> FittedStepCost | None:
    """Non-negative least squares over the three costs (all subsets of 3 columns: exact)."""
    design = np.column_stack([np.ones(len(points)), points.n, points.p * points.t])
    target = points.t
    # Relative error is what matters: weight each point by 1 / its time.
    w = 1.0 / np.maximum(target, 1e-6)
    a_w, b_w = design * w[:, None], target * w
    best: tuple[float, np.ndarray] | None = None
    for k in (3, 2, 1):
        for cols in itertools.combinations(range(3), k):
            sol, *_ = np.linalg.lstsq(a_w[:, cols], b_w, rcond=None)
            if np.any(sol < 0):
                continue
            coef = np.zeros(3)
            coef[list(cols)] = sol
            resid = float(np.sum((a_w @ coef - b_w) ** 2))
            if best is None or resid < best[0] - 1e-12:
                best = (resid, coef)
    if best is None or best[1][0] + best[1][1] <= 0:
        return None
    coef = best[1]
    # The model's own step time per point: t = (a + b_d n) / (1 - b_p p), where b_p p < 1.
    denom = 1.0 - coef[2] * points.p
    pred = np.where(denom > 0.05, (coef[0] + coef[1] * points.n) / np.maximum(denom, 0.05), np.nan)
    err = np.abs(pred - target) / target
    return FittedStepCost(
        per_step_s=float(coef[0]),
        per_decode_token_s=float(coef[1]),
        per_prefill_token_s=float(coef[2]),
        basis=points.basis,
        points=len(points),
        rel_error=float(np.nanmedian(err)) if np.isfinite(err).any() else None,
    )


def fit_step_cost(
    latencies: pl.DataFrame | None,
    metrics: pl.DataFrame | None,
    stats: pl.DataFrame | None,
    *,
    prefix_hit_rate: float | None = None,
) -> FittedStepCost | None:
    """The step cost from the best source there is: client TPOT, then /metrics, then stats.

    Prompt tokens found in the prefix cache are not computed: with a hit rate h, a step
    computes (1 - h) of the prompt tokens the data counts (every source counts them all).
    """
    computed = 1.0 - min(max(prefix_hit_rate or 0.0, 0.0), 0.99)
    for make, source in (
        (points_from_latencies, latencies),
        (points_from_metrics, metrics),
        (points_from_stats, stats),
    ):
        points = make(source)
        if points is not None:
            if computed < 1.0:
                points = StepPoints(points.t, points.n, points.p * computed, points.basis)
            fitted = fit(points)
            if fitted is not None:
                return fitted
    return None
