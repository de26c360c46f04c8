"""Ranked advice with numbers derived from the data, in the order vLLM's docs rank the remedies.

vLLM's optimization guide, for preemption: (1) increase gpu_memory_utilization, (2) decrease
max_num_seqs or max_num_batched_tokens, (3) increase tensor_parallel_size, then
pipeline_parallel_size. Each suggestion only ever moves a flag in that direction (never the
inverted advice some runbooks give), and is left out when the data shows it cannot help.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from preemptscope.analysis import kvmodel
from preemptscope.analysis.correlation import preemption_signal, run_duration_s, runs
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Advice, Capacity, Verdict, Window

# vLLM's default gpu_memory_utilization; the ceiling we suggest leaves room for CUDA graphs,
# NCCL buffers and anything else sharing the GPU.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
MAX_SUGGESTED_UTILIZATION = 0.95
UTILIZATION_STEP = 0.10
MIN_BATCHED_TOKENS = 2048


def onset_running(windows: Sequence[Window]) -> int | None:
    """The lowest running count seen in a window that preempted: where preemption begins."""
    values = [
        w.running_max
        for w in windows
        if (preemption_signal(w) or 0) > 0 and not w.forced_preemptions and w.running_max
    ]
    return min(values) if values else None


def advise(
    verdict: Verdict,
    capacity: Capacity,
    windows: Sequence[Window],
    params: AnalysisParams | None = None,
) -> list[Advice]:
    """Ranked remedies for a deployment that is over capacity or at risk; none otherwise."""
    if verdict.state not in ("over_capacity", "at_risk"):
        return []
    p = params if params is not None else AnalysisParams()
    items: list[Advice] = []
    if verdict.problem == "throughput":
        # KV has room: the preemption remedies (less memory per request) would only cut
        # throughput further. More requests per batch if KV allows, else more replicas.
        for advice in (_raise_max_num_seqs(capacity, windows, p), _add_replicas(windows, p)):
            if advice is not None:
                items.append(advice)
        return [dataclasses.replace(a, rank=i + 1) for i, a in enumerate(items)]
    if verdict.problem == "ordering":
        items.append(
            Advice(
                0,
                "review_request_priorities",
                None,
                "priority",
                None,
                "Preemption under the priority policy evicts low-priority requests for "
                "high-priority ones while KV is not persistently full: the tail of the victims "
                "grows more than the mean. Check which clients send which priorities before "
                "buying capacity.",
            )
        )
    for make in (_gpu_memory, _max_num_seqs, _max_num_batched_tokens):
        advice = make(capacity, windows)
        if advice is not None:
            items.append(advice)
    items += [_more_gpus(capacity, "tensor"), _more_gpus(capacity, "pipeline")]
    return [dataclasses.replace(a, rank=i + 1) for i, a in enumerate(items)]


def _bytes_per_token_gib(capacity: Capacity) -> float | None:
    if capacity.available_kv_memory_gib and capacity.kv_cache_tokens:
        return capacity.available_kv_memory_gib / capacity.kv_cache_tokens
    return None


def _demand_tokens(capacity: Capacity) -> int | None:
    """KV tokens the observed peak load needs if every running request reaches its mean length."""
    if capacity.peak_running and capacity.mean_tokens_per_request:
        return math.ceil(capacity.peak_running * capacity.mean_tokens_per_request)
    return None


def _gpu_memory(capacity: Capacity, windows: Sequence[Window]) -> Advice | None:
    logged = capacity.gpu_memory_utilization
    current = logged if logged is not None else DEFAULT_GPU_MEMORY_UTILIZATION
    if current >= MAX_SUGGESTED_UTILIZATION:
        return None
    target = min(MAX_SUGGESTED_UTILIZATION, round(current + UTILIZATION_STEP, 2))
    per_token = _bytes_per_token_gib(capacity)
    total = capacity.gpu_memory_total_gib
    estimated = ""
    if not total and capacity.available_kv_memory_gib and capacity.model_weights_gib:
        # V1 logs no GPU total: rebuild it from vLLM's budget, utilization x total = weights +
        # KV + activation peak + non-torch, with the shared KV model's activation defaults.
        total = (
            capacity.model_weights_gib
            + capacity.available_kv_memory_gib
            + kvmodel.DEFAULT_ACTIVATION_GIB
            + kvmodel.DEFAULT_NON_TORCH_GIB
        ) / current
        estimated = " (estimated from the logged weights and KV memory)"
    demand = _demand_tokens(capacity)
    detail = ""
    if total and per_token and capacity.kv_cache_tokens:
        if demand and demand > capacity.kv_cache_tokens:
            # The utilization at which the observed peak demand would fit (rounded up).
            needed = current + (demand - capacity.kv_cache_tokens) * per_token / total
            if needed <= MAX_SUGGESTED_UTILIZATION:
                target = max(math.ceil(needed * 100) / 100, round(current + 0.01, 2))
        extra_gib = (target - current) * total
        extra_tokens = int(extra_gib / per_token)
        detail = (
            f" With {total:.1f} GiB per GPU{estimated} this gives the KV cache "
            f"{extra_gib:.1f} GiB more: "
            f"about {extra_tokens:,} tokens (+{extra_tokens / capacity.kv_cache_tokens:.0%} over "
            f"{capacity.kv_cache_tokens:,})."
        )
        if demand:
            detail += f" The observed peak needs about {demand:,} tokens."
    assumed = "" if logged is not None else " (not in the log; vLLM's default 0.9 assumed)"
    return Advice(
        0,
        "raise_gpu_memory_utilization",
        "--gpu-memory-utilization",
        f"{current:.2f}{assumed}",
        f"{target:.2f}",
        "vLLM's first remedy for preemption: more memory for the KV cache." + detail,
    )


def _max_num_seqs(capacity: Capacity, windows: Sequence[Window]) -> Advice | None:
    peak = capacity.peak_running
    onset = onset_running(windows)
    fit = (
        int(capacity.kv_cache_tokens // capacity.mean_tokens_per_request)
        if capacity.kv_cache_tokens and capacity.mean_tokens_per_request
        else None
    )
    # Only a cap below the observed peak changes anything.
    suggested: int | None = None
    why = ""
    if fit is not None and fit >= 1 and (peak is None or fit < peak):
        suggested = fit
        why = (
            f"{capacity.kv_cache_tokens:,} KV tokens / {capacity.mean_tokens_per_request:,.0f} "
            f"tokens per request (mean prompt + output) = {fit} requests fit at once"
        )
    elif onset is not None and onset > 1 and (peak is None or onset - 1 < peak):
        suggested = onset - 1
        why = f"preemption began with {onset} requests running"
    if suggested is None:
        return None
    current = capacity.max_num_seqs
    if current is not None and suggested >= current:
        return None
    if peak is not None:
        why += f" (peak running {peak})"
    return Advice(
        0,
        "lower_max_num_seqs",
        "--max-num-seqs",
        str(current) if current is not None else None,
        str(suggested),
        f"Fewer requests at once so they fit in the KV cache: {why}. Requests queue a little "
        "longer (TTFT) instead of being evicted and recomputed (tail latency).",
    )


def _max_num_batched_tokens(capacity: Capacity, windows: Sequence[Window]) -> Advice | None:
    current = capacity.max_num_batched_tokens
    if current is not None and current <= MIN_BATCHED_TOKENS:
        return None
    suggested = max(MIN_BATCHED_TOKENS, current // 2) if current is not None else None
    return Advice(
        0,
        "lower_max_num_batched_tokens",
        "--max-num-batched-tokens",
        str(current) if current is not None else None,
        str(suggested) if suggested is not None else None,
        "A smaller token budget per step admits new prompts (prefill chunks) more slowly, so "
        "running requests keep their KV blocks."
        + ("" if current is not None else " Its current value is not in the log."),
    )


def _gain_with_more_gpus(capacity: Capacity, factor: int) -> str:
    """KV tokens per replica when weights and KV heads are split over `factor` x the GPUs."""
    kv = capacity.available_kv_memory_gib
    weights = capacity.model_weights_gib
    if not kv or weights is None or not capacity.kv_cache_tokens or kv <= 0:
        return ""
    # Per GPU: weights shrink by (1 - 1/factor); each token's KV is split factor ways.
    new_kv = kv + weights * (1 - 1 / factor)
    ratio = factor * new_kv / kv
    return (
        f" With {weights:.1f} GiB of weights and {kv:.1f} GiB of KV per GPU now, about "
        f"{ratio:.1f}x the KV tokens ({int(capacity.kv_cache_tokens * ratio):,})."
    )


def _more_gpus(capacity: Capacity, kind: str) -> Advice:
    """Double tensor (kind="tensor") or pipeline (kind="pipeline") parallelism."""
    logged = getattr(capacity, f"{kind}_parallel_size")
    current = logged or 1
    assumed = "" if logged is not None else " (not in the log; 1 assumed)"
    why = {
        "tensor": "Shard the model over more GPUs: each GPU holds less of the weights and of "
        "every token's KV.",
        "pipeline": "When tensor parallelism is not possible (interconnect, head count): split "
        "the layers over more GPUs, at some per-step latency.",
    }[kind]
    return Advice(
        0,
        f"raise_{kind}_parallel_size",
        f"--{kind}-parallel-size",
        f"{current}{assumed}",
        str(current * 2),
        why + _gain_with_more_gpus(capacity, 2),
    )


def _raise_max_num_seqs(
    capacity: Capacity, windows: Sequence[Window], p: AnalysisParams
) -> Advice | None:
    """Only when the batch is full (running at max_num_seqs) and KV stays well below full."""
    queued = [w for w in windows if w.queue_bound]
    kv = [w.kv_usage_max for w in queued if w.kv_usage_max is not None]
    base = capacity.max_num_seqs or capacity.peak_running
    if not kv or not base or max(kv) <= 0 or max(kv) >= p.kv_high:
        return None
    running = [w.running_max for w in queued if w.running_max is not None]
    if capacity.max_num_seqs is not None and running and max(running) < capacity.max_num_seqs:
        return None  # the batch is not full: compute or the token budget is the limit
    peak_kv = max(kv)
    by_kv = math.floor(base * p.kv_high / peak_kv)
    why = (
        f"KV peaks at {peak_kv:.0%} with {base} running: room for about {by_kv} at {p.kv_high:.0%}"
    )
    fit = (
        int(capacity.kv_cache_tokens // capacity.mean_tokens_per_request)
        if capacity.kv_cache_tokens and capacity.mean_tokens_per_request
        else None
    )
    suggested = by_kv
    if fit is not None and fit < by_kv:
        suggested = fit
        why += (
            f"; {capacity.kv_cache_tokens:,} KV tokens / {capacity.mean_tokens_per_request:,.0f}"
            f" tokens per request = {fit}"
        )
    if suggested <= base:
        return None
    return Advice(
        0,
        "raise_max_num_seqs",
        "--max-num-seqs",
        str(capacity.max_num_seqs) if capacity.max_num_seqs is not None else None,
        str(suggested),
        f"Requests queue while the KV cache has room ({why}). A bigger batch serves more at "
        "once until KV or compute saturates; watch for preemption after the change.",
    )


def _add_replicas(windows: Sequence[Window], p: AnalysisParams) -> Advice | None:
    """Replicas needed so the queue stops growing: arrival rate / service rate."""
    longest = max(runs(windows, lambda w: w.queue_bound, p), key=run_duration_s, default=None)
    if longest is None:
        return None
    seconds = run_duration_s(longest)
    # Window means sit at window centres: the growth spans first start to last start.
    between = max((longest[-1].start - longest[0].start).total_seconds(), p.window_s)
    growth = ((longest[-1].waiting_mean or 0.0) - (longest[0].waiting_mean or 0.0)) / between
    served = sum(w.latency["e2e"].count for w in longest if "e2e" in w.latency) / seconds
    suggested = None
    detail = f"the queue grew by {growth:.2f} requests/s for {seconds / 60:.0f} min"
    if growth > 0 and served > 0:
        factor = (served + growth) / served
        suggested = f"x{math.ceil(factor * 10) / 10:.1f}"
        detail += f" while about {served:.2f} requests/s were served"
    return Advice(
        0,
        "add_replicas",
        None,
        None,
        suggested,
        f"Demand is above what this deployment serves ({detail}): add replicas (or GPUs per "
        "replica) until the queue stops growing.",
    )
