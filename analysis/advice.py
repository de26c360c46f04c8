"""Ranked advice with numbers derived from the data and checked by simulation.

vLLM's optimization guide, for preemption: (1) increase gpu_memory_utilization, (2) decrease
max_num_seqs or max_num_batched_tokens, (3) increase tensor_parallel_size, then
pipeline_parallel_size. Each suggestion only ever moves a flag in that direction (never the
inverted advice some runbooks give), and is left out when the data shows it cannot help.

Every numeric suggestion is then replayed on the observed workload (analysis/sim/observed.py)
with a few candidate values: the one with the best predicted e2e p99 (then throughput) is
shown with its predicted effect; a setting predicted worse than now on both p99 and throughput,
or no better on anything, is dropped; the checked suggestions are ranked by predicted p99.
Without a replayable workload the heuristic number stays, marked unverified.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from preemptscope.analysis import kvmodel
from preemptscope.analysis.correlation import preemption_signal, run_duration_s, runs
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Advice, Capacity, Verdict, Window
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import engine_key
from preemptscope.analysis.sim.observed import Replay, candidate_config, check_changes
from preemptscope.analysis.sim.whatif import WhatIfOutcome, relabel

from preemptscope.errors import ConfigError

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


ReplayFactory = Callable[[], Replay | None]


def advise(
    verdict: Verdict,
    capacity: Capacity,
    windows: Sequence[Window],
    params: AnalysisParams | None = None,
    replay: ReplayFactory | None = None,
) -> list[Advice]:
    """Ranked remedies for a deployment that is over capacity or at risk; none otherwise.

    `replay` builds the observed workload's replay (only called when there is advice to check).
    """
    if verdict.state not in ("over_capacity", "at_risk"):
        return []
    items = _heuristics(verdict, capacity, windows, params)
    built = replay() if replay is not None and any(a.flag for a in items) else None
    return _check(items, built, capacity)


def _heuristics(
    verdict: Verdict,
    capacity: Capacity,
    windows: Sequence[Window],
    params: AnalysisParams | None,
) -> list[Advice]:
    p = params if params is not None else AnalysisParams()
    items: list[Advice] = []
    if verdict.problem == "throughput":
        # KV has room: the preemption remedies (less memory per request) would only cut
        # throughput further. More requests per batch if KV allows, else more replicas.
        for advice in (_raise_max_num_seqs(capacity, windows, p), _add_replicas(windows, p)):
            if advice is not None:
                items.append(advice)
        return items
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
    return items


# --- the check by simulation -------------------------------------------------------------

# The flag each numeric action changes, as the simulator spells it.
SIM_KEYS = {
    "raise_gpu_memory_utilization": "gpu_memory_utilization",
    "lower_max_num_seqs": "max_num_seqs",
    "raise_max_num_seqs": "max_num_seqs",
    "lower_max_num_batched_tokens": "max_num_batched_tokens",
    "raise_tensor_parallel_size": "tensor_parallel_size",
    "raise_pipeline_parallel_size": "pipeline_parallel_size",
}
MORE_GPUS = ("raise_tensor_parallel_size", "raise_pipeline_parallel_size")
# Within this relative margin a predicted figure counts as unchanged (the replay's own noise).
SAME = 0.02
UNVERIFIED = (
    " Unverified: no workload could be replayed (no client results with token counts and no "
    "request lines or stats lines), so the simulator has not checked this number."
)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _candidates(action: str, advice: Advice, replay: Replay, capacity: Capacity) -> list[Any]:
    """The heuristic's value and a few alternatives in the same direction."""
    config = replay.config
    suggested = _number(advice.suggested)
    if action == "raise_gpu_memory_utilization":
        current = config.gpu_memory_utilization
        values = {round(min(MAX_SUGGESTED_UTILIZATION, current + d), 2) for d in (0.03, 0.1)}
        if suggested is not None:
            values.add(round(suggested, 2))
        return sorted(v for v in values if v > current)
    if action in ("lower_max_num_seqs", "raise_max_num_seqs"):
        current = config.max_num_seqs
        peak = capacity.peak_running or current
        if action == "lower_max_num_seqs":
            pool = {round(min(current, peak) * f) for f in (0.5, 0.8)}
            keep = [
                v for v in pool | ({int(suggested)} if suggested else set()) if 1 <= v < current
            ]
        else:
            pool = {round(current * f) for f in (1.5, 2.0)}
            keep = [v for v in pool | ({int(suggested)} if suggested else set()) if v > current]
        return sorted(set(keep))
    if action == "lower_max_num_batched_tokens":
        current = config.max_num_batched_tokens
        floor = max(MIN_BATCHED_TOKENS, config.max_num_seqs)
        values = {max(floor, current // 2)}
        if not config.enable_chunked_prefill:
            values = {v for v in values if v >= config.max_model_len}
        return sorted(v for v in values if v < current)
    if action == "raise_tensor_parallel_size":
        return [config.tensor_parallel_size * 2]
    if action == "raise_pipeline_parallel_size":
        return [config.pipeline_parallel_size * 2]
    return []


def _figures(o: WhatIfOutcome) -> dict[str, float | int | None]:
    return {
        "preemptions": o.preemptions,
        "output_throughput": round(o.output_throughput, 3),
        "e2e_p99": round(o.e2e_p99, 3) if o.e2e_p99 is not None else None,
    }


def _change(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old <= 0:
        return None
    return new / old - 1.0


def effect(now: WhatIfOutcome, new: WhatIfOutcome) -> str:
    """ "preemptions 51 -> 0, tok/s -21 %, e2e p99 +53 %" """
    parts = [f"preemptions {now.preemptions:,} -> {new.preemptions:,}"]
    for label, change in (
        ("tok/s", _change(new.output_throughput, now.output_throughput)),
        ("e2e p99", _change(new.e2e_p99, now.e2e_p99)),
    ):
        if change is not None:
            parts.append(f"{label} {round(change * 100) + 0:+d} %")  # + 0: no "-0 %"
    return ", ".join(parts)


def _verdict(now: WhatIfOutcome, new: WhatIfOutcome) -> tuple[bool, bool]:
    """(worse on both p99 and throughput, better on something)."""
    tput = _change(new.output_throughput, now.output_throughput) or 0.0
    p99 = _change(new.e2e_p99, now.e2e_p99) or 0.0
    worse_both = tput < -SAME and p99 > SAME
    better = tput > SAME or p99 < -SAME or new.preemptions < now.preemptions
    return worse_both, better


def _check(items: list[Advice], replay: Replay | None, capacity: Capacity) -> list[Advice]:
    """Replay each numeric suggestion; keep, rank and annotate what the replay supports."""
    checked: list[tuple[float, float, Advice]] = []
    rest: list[Advice] = []
    now: WhatIfOutcome | None = None
    runs: dict[tuple[Any, ...], WhatIfOutcome] = {}
    caveat = UNVERIFIED
    if replay is not None and replay.replayable:
        try:
            now = replay.run()
            runs[engine_key(replay.config)] = now
        except ConfigError:
            now = None
        seen = replay.observed.preemptions
        if now is not None and seen is not None and not _reproduces(now.preemptions, seen):
            # A replay that misses what happened cannot check what would happen.
            caveat = (
                f" Unverified: the replay of the observed workload shows {now.preemptions:,} "
                f"preemptions where {seen:,} were counted, too far apart to check this number."
            )
            now = None
    for advice in items:
        key = SIM_KEYS.get(advice.action)
        if key is None:
            rest.append(advice)
            continue
        if now is None or replay is None:
            rest.append(dataclasses.replace(advice, reason=advice.reason + caveat, verified=False))
            continue
        best: tuple[float, float, Any, WhatIfOutcome] | None = None
        for value in _candidates(advice.action, advice, replay, capacity):
            try:
                check_changes(replay, {key: value})
                new = _replayed(replay, {key: value}, now, runs)
            except ConfigError:
                continue
            worse_both, better = _verdict(now, new)
            if worse_both or not better:
                continue
            score = (new.e2e_p99 if new.e2e_p99 is not None else math.inf, -new.output_throughput)
            if best is None or score < (best[0], best[1]):
                best = (score[0], score[1], value, new)
        if best is None:
            continue  # the replay says it would not help: not suggested
        _, _, value, new = best
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        if advice.action == "raise_gpu_memory_utilization":
            # The sizing text for the value the replay chose, not the heuristic's.
            advice = _gpu_memory(capacity, (), target=value) or advice
        checked.append(
            (
                best[0],
                best[1],
                dataclasses.replace(
                    advice,
                    suggested=shown,
                    reason=_plain(advice.reason)
                    + f" Replayed on the observed workload ({len(replay.workload or ())} "
                    f"requests): {effect(now, new)}.",
                    verified=True,
                    predicted={"now": _figures(now), "with_change": _figures(new)},
                ),
            )
        )
    # Changes on the same GPUs first, then those that buy GPUs (vLLM's order); within each,
    # the best predicted e2e p99, then throughput.
    checked.sort(key=lambda t: (t[2].action in MORE_GPUS, t[0], t[1]))
    head = [a for a in rest if a.action == "review_request_priorities"]
    tail = [a for a in rest if a.action != "review_request_priorities"]
    ordered = head + [a for *_, a in checked] + tail
    return [dataclasses.replace(a, rank=i + 1) for i, a in enumerate(ordered)]


def _replayed(
    replay: Replay,
    changes: dict[str, Any],
    now: WhatIfOutcome,
    runs: dict[tuple[Any, ...], WhatIfOutcome],
) -> WhatIfOutcome:
    """replay.run(changes), without simulating a run already known to be identical.

    Identical: a setting the engine reads the same way as one already replayed (the same GPU
    count by tensor or pipeline parallelism); a max_num_seqs that never binds (now and with
    the change, more than the most requests that ran at once now); a smaller
    max_num_batched_tokens that still holds every step's tokens now (the replay of now
    records the least budget that keeps its decisions). Either way every scheduling decision
    is the same, so is the whole run.
    """
    config = candidate_config(replay.config, changes)
    key = engine_key(config)
    found = runs.get(key)
    if found is None and (
        _cap_never_binds(replay, config, now) or _budget_never_binds(replay, config, now)
    ):
        found = now
    if found is not None:
        return relabel(found, config)
    runs[key] = new = replay.run(changes)
    return new


def _cap_never_binds(replay: Replay, config: SimConfig, now: WhatIfOutcome) -> bool:
    base = replay.config
    if engine_key(dataclasses.replace(config, max_num_seqs=base.max_num_seqs)) != engine_key(base):
        return False
    return min(base.max_num_seqs, config.max_num_seqs) > now.peak_running


def _budget_never_binds(replay: Replay, config: SimConfig, now: WhatIfOutcome) -> bool:
    base = replay.config
    other = dataclasses.replace(config, max_num_batched_tokens=base.max_num_batched_tokens)
    if engine_key(other) != engine_key(base):
        return False
    return now.budget_needed <= config.max_num_batched_tokens <= base.max_num_batched_tokens


def _reproduces(replayed: int, observed: int) -> bool:
    """Close enough to trust the replay's comparisons: within max(5, 50 %)."""
    return abs(replayed - observed) <= max(5.0, 0.5 * observed)


def _plain(reason: str) -> str:
    """The heuristic's sizing text, less claims the replay now answers for itself."""
    for claim in (
        " Requests queue a little longer (TTFT) instead of being evicted and recomputed "
        "(tail latency).",
        " A bigger batch serves more at once until KV or compute saturates; watch for "
        "preemption after the change.",
    ):
        reason = reason.replace(claim, "")
    return reason


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
