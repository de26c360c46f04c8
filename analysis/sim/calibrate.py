"""Calibration: the step cost, the settings and the workload of a deployment, from its own data.

One fit for every source. Each observation is one average step: its time `t` (a request's time
per output token, or a /metrics or stats interval's time per generated token per running
request), the requests running `n`, the prompt tokens computed per second `p` around it, and
the context the running requests held `c` (their KV, which a step's attention reads). A step
computes about `n` decode tokens and `p x t` prefill tokens, so

    t = per_step + per_decode_token x n + per_prefill_token x p x t + per_context_token x c

is linear in the four costs; a non-negative least-squares fit gives them. The context cost is
kept only where the points tell it apart from the others (its estimate at least
MIN_CONTEXT_T standard errors from 0); otherwise it is 0 and `basis` says why. Pure: frames in.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
from preemptscope.analysis.sim.config import FittedStepCost
from preemptscope.analysis.sim.workload import FloatArray

BoolArray = npt.NDArray[np.bool_]

MIN_POINTS = 5
# The context cost is identified when its estimate is this many standard errors from 0.
MIN_CONTEXT_T = 3.0
# Points set aside as preempted (_trimmed): this many robust deviations above the fit, and
# at least this share of their time; at most TRIM_ROUNDS refits.
TRIM_MADS, TRIM_FLOOR, TRIM_ROUNDS = 2.5, 0.02, 10


@dataclass(frozen=True)
class StepPoints:
    """Observed average steps: time per step, running requests, prompt tokens per second,
    and the context tokens the running requests held (None: not observed)."""

    t: FloatArray
    n: FloatArray
    p: FloatArray
    basis: str
    c: FloatArray | None = None

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


def _ramp_mean(
    first: FloatArray,
    end: FloatArray,
    base: FloatArray,
    slope: FloatArray,
    lo: FloatArray,
    hi: FloatArray,
) -> FloatArray:
    """Time-average over [lo, hi] of the sum of ramps: ramp j is base[j] + slope[j] x (x -
    first[j]) from first[j] to end[j], 0 elsewhere. O(n log n): each ramp's integral up to x
    is a quadratic in x while it runs and a constant after, so cumulative sums of the
    quadratics' coefficients (in order of start, and of end) give the sum at any x."""
    t0 = float(first.min())  # times from the first start: x^2 of epoch seconds would cancel
    f, e, lo, hi = first - t0, end - t0, lo - t0, hi - t0
    qa = slope / 2
    qb = base - slope * f
    qc = slope * f * f / 2 - base * f
    full = qa * e * e + qb * e + qc  # a finished ramp's whole integral
    by_f, by_e = np.argsort(f, kind="stable"), np.argsort(e, kind="stable")
    fs, es = f[by_f], e[by_e]

    def cum(v: FloatArray, order: np.ndarray) -> FloatArray:
        out: FloatArray = np.concatenate([[0.0], np.cumsum(v[order])])
        return out

    sa, sb, sc = cum(qa, by_f), cum(qb, by_f), cum(qc, by_f)
    ea, eb, ec, ef = cum(qa, by_e), cum(qb, by_e), cum(qc, by_e), cum(full, by_e)

    def integral(x: FloatArray) -> FloatArray:
        k = np.searchsorted(fs, x, side="right")  # ramps started by x
        m = np.searchsorted(es, x, side="right")  # ramps ended by x
        out: FloatArray = (sa[k] - ea[m]) * x * x + (sb[k] - eb[m]) * x + (sc[k] - ec[m]) + ef[m]
        return out

    out: FloatArray = (integral(hi) - integral(lo)) / np.maximum(hi - lo, 1e-9)
    return out


def points_from_latencies(frame: pl.DataFrame | None) -> StepPoints | None:
    """One point per request with a TPOT: its decode stretch, who ran beside it, prompts then,
    and the context they held (each running request's prompt plus its output so far)."""
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
    # Context: from its first token to its end a request holds its prompt and the output so
    # far, which grows at an even pace (its output over its decode stretch).
    keep = ok & (n >= 1)
    if keep.sum() < MIN_POINTS:
        return None
    valid = end > first  # every kept point's request among them
    slope = np.where(valid, (out_tokens - 1) / np.where(valid, end - first, 1.0), 0.0)
    c = _ramp_mean(first[valid], end[valid], prompts[valid], slope[valid], first[keep], end[keep])
    return StepPoints(tpot[keep], n[keep], p[keep], f"{int(keep.sum())} requests' TPOT", c)


def _series(metrics: pl.DataFrame, name: str, sample: str | None = None) -> pl.DataFrame:
    rows = metrics.filter(pl.col("metric") == name)
    if sample is not None and "sample" in rows.columns:
        rows = rows.filter(pl.col("sample") == sample)
    return rows.group_by("timestamp").agg(pl.col("value").sum()).sort("timestamp")


def points_from_metrics(
    metrics: pl.DataFrame | None, kv_tokens: float | None = None
) -> StepPoints | None:
    """One point per scrape interval: ITL histogram delta, running gauge, prompt counter, and
    the context held: the KV usage gauge x `kv_tokens` (blocks x block size; None: no
    context)."""
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
    usage = _series(metrics, "kv_cache_usage_perc")
    prompt = _series(metrics, "prompt_tokens")
    if prompt.is_empty():
        prompt = _series(metrics, "prompt_tokens_total")
    frame = (
        s.rename({"value": "s"})
        .join(c.rename({"value": "c"}), on="timestamp")
        .join(running.rename({"value": "r"}), on="timestamp", how="left")
        .join(prompt.rename({"value": "p"}), on="timestamp", how="left")
        .join(usage.rename({"value": "u"}), on="timestamp", how="left")
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
    held: FloatArray | None = None
    if kv_tokens and frame["u"].null_count() == 0:
        u = frame["u"].to_numpy()
        held = ((u[1:] + u[:-1]) / 2 * kv_tokens)[ok]
    return StepPoints(
        (ds / np.where(dc > 0, dc, 1))[ok],
        n[ok],
        (dp / np.where(dt > 0, dt, 1))[ok],
        f"{int(ok.sum())} /metrics intervals' ITL",
        held,
    )


def points_from_stats(
    stats: pl.DataFrame | None, kv_tokens: float | None = None
) -> StepPoints | None:
    """One point per busy stats interval: running / generation throughput is a step's time;
    the context held is the line's KV cache usage x `kv_tokens` (None: no context)."""
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
    c = None
    usage = rows.get_column("gpu_kv_cache_usage", default=None)
    if kv_tokens and usage is not None and usage.null_count() == 0:
        c = usage.cast(pl.Float64).to_numpy() * kv_tokens
    return StepPoints(running / gen, running, prompt, f"{rows.height} stats lines' throughput", c)


def _nnls(a_w: np.ndarray, b_w: FloatArray) -> FloatArray | None:
    """Non-negative least squares by every subset of the columns (few columns: exact)."""
    k = a_w.shape[1]
    best: tuple[float, FloatArray] | None = None
    for size in range(k, 0, -1):
        for cols in itertools.combinations(range(k), size):
            sol, *_ = np.linalg.lstsq(a_w[:, cols], b_w, rcond=None)
            if np.any(sol < 0):
                continue
            coef: FloatArray = np.zeros(k)
            coef[list(cols)] = sol
            resid = float(np.sum((a_w @ coef - b_w) ** 2))
            if best is None or resid < best[0] - 1e-12:
                best = (resid, coef)
    return None if best is None else best[1]


def _t_value(a_w: np.ndarray, b_w: FloatArray, col: int) -> float:
    """Column col's least-squares estimate over its standard error, every column in the model
    and no sign constraint: a column that another could stand in for (a context held always
    the same, which the per-step cost can take) has a large error, so a small value."""
    k = a_w.shape[1]
    if len(b_w) <= k:
        return 0.0
    sol, *_ = np.linalg.lstsq(a_w, b_w, rcond=None)
    sigma2 = float(np.sum((a_w @ sol - b_w) ** 2)) / (len(b_w) - k)
    try:
        var = float(sigma2 * np.linalg.inv(a_w.T @ a_w)[col, col])
    except np.linalg.LinAlgError:
        return 0.0
    if not np.isfinite(var) or var <= 0:
        return 0.0
    return float(sol[col]) / float(np.sqrt(var))


def _trimmed(a_w: np.ndarray, b_w: FloatArray) -> tuple[FloatArray | None, BoolArray]:
    """_nnls without the points far above the fit, and which points were kept.

    A request preempted in its decode stretch has its time evicted and recomputed in its
    TPOT (an interval's ITL, the same): a point far above every step the others show. Those
    are steps of a full KV, so left in they would load the per-step and context costs with
    preemption's stalls. One-sided: a point more than TRIM_MADS robust deviations (at least
    TRIM_FLOOR of its time) above the fit is set aside, and the fit repeated until the kept
    set holds; never fewer than half of the points are kept.
    """
    keep: BoolArray = np.ones(len(b_w), dtype=bool)
    coef = _nnls(a_w, b_w)
    for _ in range(TRIM_ROUNDS):
        if coef is None:
            break
        resid = b_w - a_w @ coef  # relative: the weights are 1 / each point's time
        mid = float(np.median(resid[keep]))
        spread = 1.4826 * float(np.median(np.abs(resid[keep] - mid)))
        new = resid <= mid + max(TRIM_MADS * spread, TRIM_FLOOR)
        if new.sum() < max(MIN_POINTS, len(b_w) / 2) or np.array_equal(new, keep):
            break
        keep = new
        coef = _nnls(a_w[keep], b_w[keep])
    return coef, keep


def fit(points: StepPoints) -> FittedStepCost | None:
    """Non-negative least squares over the costs (points far above the fit set aside), the
    context cost where the points identify it."""
    columns = [np.ones(len(points)), points.n, points.p * points.t]
    if points.c is not None:
        columns.append(points.c)
    design = np.column_stack(columns)
    target = points.t
    # Relative error is what matters: weight each point by 1 / its time.
    w = 1.0 / np.maximum(target, 1e-6)
    a_w, b_w = design * w[:, None], target * w
    coef, keep = _trimmed(a_w, b_w)
    context = ""
    if points.c is not None:
        t_value = _t_value(a_w[keep], b_w[keep], 3)
        mean = float(np.mean(points.c))
        spread = float(np.std(points.c)) / max(mean, 1e-9)
        held = f"the context held (mean {mean:,.0f} tokens, spread {spread:.0%})"
        if coef is not None and coef[3] > 0 and t_value >= MIN_CONTEXT_T:
            context = f"; per-context-token cost from {held}, {t_value:.0f} standard errors from 0"
        else:
            coef, keep = _trimmed(a_w[:, :3], b_w)
            context = (
                f"; no per-context-token cost: {held} does not tell it from the others "
                f"(within {MIN_CONTEXT_T:g} standard errors of 0)"
            )
            coef = None if coef is None else np.append(coef, 0.0)
    else:
        context = "; no per-context-token cost: no context held observed"
        coef = None if coef is None else np.append(coef, 0.0)
    if coef is None or coef[0] + coef[1] <= 0:
        return None
    kept = int(keep.sum())
    basis = points.basis
    if kept < len(points):
        basis += f" ({len(points) - kept} far above the fit set aside)"
    # The model's own step time per point: t = (a + b_d n + c ctx) / (1 - b_p p), b_p p < 1.
    held_c = points.c if points.c is not None else np.zeros(len(points))
    denom = 1.0 - coef[2] * points.p
    pred = np.where(
        denom > 0.05,
        (coef[0] + coef[1] * points.n + coef[3] * held_c) / np.maximum(denom, 0.05),
        np.nan,
    )
    err = (np.abs(pred - target) / target)[keep]
    return FittedStepCost(
        per_step_s=float(coef[0]),
        per_decode_token_s=float(coef[1]),
        per_prefill_token_s=float(coef[2]),
        per_context_token_s=float(coef[3]),
        basis=basis + context,
        points=kept,
        rel_error=float(np.nanmedian(err)) if np.isfinite(err).any() else None,
    )


def fit_step_cost(
    latencies: pl.DataFrame | None,
    metrics: pl.DataFrame | None,
    stats: pl.DataFrame | None,
    *,
    prefix_hit_rate: float | None = None,
    kv_tokens: float | None = None,
) -> FittedStepCost | None:
    """The step cost from the best source there is: client TPOT, then /metrics, then stats.

    Prompt tokens found in the prefix cache are not computed: with a hit rate h, a step
    computes (1 - h) of the prompt tokens the data counts (every source counts them all).
    They are still read as context. kv_tokens (observed blocks x block size) turns the KV
    usage of /metrics and stats into context held; None: those sources fit no context cost.
    """
    computed = 1.0 - min(max(prefix_hit_rate or 0.0, 0.0), 0.99)
    makers: tuple[Callable[[], StepPoints | None], ...] = (
        lambda: points_from_latencies(latencies),
        lambda: points_from_metrics(metrics, kv_tokens),
        lambda: points_from_stats(stats, kv_tokens),
    )
    for make in makers:  # lazily: the first source that fits is the one used
        points = make()
        if points is not None:
            if computed < 1.0:
                points = dataclasses.replace(points, p=points.p * computed)
            fitted = fit(points)
            if fitted is not None:
                return fitted
    return None
