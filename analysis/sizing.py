"""The data's own sizing of each knob: what the logs and /metrics say a new value should be.

This module owns the sizing arithmetic (KV tokens, memory, the running count where preemption
began, the queue's growth) behind each suggestion before any replay. It never replays, ranks
or decides what is shown: `analysis/advice.py` does, and marks anything shown from here alone
unverified.
"""

from __future__ import annotations

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
# Below this peak KV usage, KV headroom cannot size a bigger batch (see _raise_max_num_seqs).
KV_SIZING_FLOOR = 0.01
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


def _bytes_per_token_gib(capacity: Capacity) -> float | None:
    if capacity.available_kv_memory_gib and capacity.kv_cache_tokens:
        return capacity.available_kv_memory_gib / capacity.kv_cache_tokens
    return None


def _demand_tokens(capacity: Capacity) -> int | None:
    """KV tokens the observed peak load needs if every running request reaches its mean length."""
    if capacity.peak_running and capacity.mean_tokens_per_request:
        return math.ceil(capacity.peak_running * capacity.mean_tokens_per_request)
    return None


def _gpu_memory(
    capacity: Capacity, windows: Sequence[Window], *, target: float | None = None
) -> Advice | None:
    logged = capacity.gpu_memory_utilization
    current = logged if logged is not None else DEFAULT_GPU_MEMORY_UTILIZATION
    if current >= MAX_SUGGESTED_UTILIZATION:
        return None
    chosen = target
    target = chosen or min(MAX_SUGGESTED_UTILIZATION, round(current + UTILIZATION_STEP, 2))
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
            if needed <= MAX_SUGGESTED_UTILIZATION and chosen is None:
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
    capacity: Capacity, windows: Sequence[Window], p: AnalysisParams, verdict: Verdict
) -> Advice | None:
    """Only when the batch is full (running at max_num_seqs) and KV stays well below full."""
    queued = [w for w in windows if w.queue_bound]
    kv = [w.kv_usage_max for w in queued if w.kv_usage_max is not None]
    finding = verdict.limit_detail
    cap = capacity.max_num_seqs or (finding.max_num_seqs if finding is not None else None)
    base = cap or capacity.peak_running
    if not kv or not base or max(kv) <= 0 or max(kv) >= p.kv_high:
        return None
    running = [w.running_max for w in queued if w.running_max is not None]
    if cap is not None and running and max(running) < p.batch_full_fraction * cap:
        return None  # the batch is not full: compute or the token budget is the limit
    peak_kv = max(kv)
    if peak_kv < KV_SIZING_FLOOR:
        # vLLM prints KV usage to 0.1 %: a ratio of a reading this small sizes nothing (it
        # would suggest thousands of sequences, or overflow for a denormal).
        return None
    by_kv = math.floor(base * p.kv_high / peak_kv)
    why = (
        f"KV peaks at {peak_kv:.0%} with {base} running: room for about {by_kv} at {p.kv_high:.0%}"
    )
    fit = (
        int(capacity.kv_cache_tokens // capacity.mean_tokens_per_request)
        if capacity.kv_cache_tokens and capacity.mean_tokens_per_request
        else None
    )
    # The observed KV sizes it: the worst case of every request at its full length at once
    # (KV tokens / tokens per request) ignores shared prefixes and requests that finish early,
    # and is only said (the replay checks the number where it can).
    suggested = by_kv
    if fit is not None and fit < by_kv:
        why += (
            f"; {capacity.kv_cache_tokens:,} KV tokens / {capacity.mean_tokens_per_request:,.0f}"
            f" tokens per request = {fit} at their full length at once"
        )
    if suggested <= base:
        return None
    return Advice(
        0,
        "raise_max_num_seqs",
        "--max-num-seqs",
        str(cap) if cap is not None else None,
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
