"""Advice: every knob explored in both directions, the replay decides what is shown.

For each of vLLM's knobs (max_num_seqs and max_num_batched_tokens up and down,
gpu_memory_utilization, tensor and pipeline parallelism, replicas) a few candidate values in
both directions are replayed on the observed workload (analysis/sim/observed.py). A change is
shown when the replay says it helps: better e2e p99 or output tok/s without the other getting
worse, or fewer preemptions with both unchanged. Shown changes are ranked changes on the same
GPUs first, then those that buy GPUs; within each, by predicted e2e p99, then tok/s; vLLM's
documented order (for preemption: raise gpu_memory_utilization, lower max_num_seqs /
max_num_batched_tokens, then tensor, then pipeline parallelism) only breaks ties.

A suggestion is "verified" only where the replay of the current settings reproduces what was
observed (analysis/sim/fidelity.py, the one rule); otherwise it says how far off the replay of
now is. Without a replayable workload, the data's own sizing in the direction of the binding
limit is shown, marked unverified.

This module owns the engine: the knobs, their candidates, the replays, the ranking and the
wording. The data's own sizing of each knob is `analysis/sizing.py`'s (re-exported here). It
never reads a file or a clock; the replay is handed in.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Advice, Capacity, Verdict, Window
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import engine_key
from preemptscope.analysis.sim.fidelity import Fidelity, fidelity, preemption_tolerance
from preemptscope.analysis.sim.observed import (
    Replay,
    candidate_config,
    check_changes,
    memory_assumption,
)
from preemptscope.analysis.sim.whatif import WhatIfOutcome, relabel
from preemptscope.analysis.sim.workload import Workload
from preemptscope.analysis.sizing import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    KV_SIZING_FLOOR,
    MAX_SUGGESTED_UTILIZATION,
    MIN_BATCHED_TOKENS,
    UTILIZATION_STEP,
    _add_replicas,
    _gpu_memory,
    _max_num_batched_tokens,
    _max_num_seqs,
    _more_gpus,
    _raise_max_num_seqs,
    onset_running,
)
from preemptscope.analysis.windows import LIMIT_BUDGET, LIMIT_KV, LIMIT_SEQS

from preemptscope.errors import ConfigError

__all__ = [
    "BY_ACTION",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "KNOBS",
    "KV_SIZING_FLOOR",
    "MAX_SUGGESTED_UTILIZATION",
    "MEMORY_KEYS",
    "MIN_BATCHED_TOKENS",
    "MISSED",
    "NO_REPLAY",
    "ORDER",
    "SAME",
    "UTILIZATION_STEP",
    "AdvicePlan",
    "Knob",
    "ReplayFactory",
    "advise",
    "check_label",
    "effect",
    "helps",
    "onset_running",
    "split_workload",
]

ReplayFactory = Callable[[], Replay | None]


@dataclass(frozen=True)
class AdvicePlan:
    """The ranked advice, and what the replay says relieving each binding limit would do."""

    items: list[Advice]
    # Binding limit -> predicted e2e p99 (s) with that limit doubled (None: not replayed).
    relief: dict[str, float | None] = field(default_factory=dict)
    check: Fidelity | None = None  # the replay of now against what was observed


@dataclass(frozen=True)
class Knob:
    action: str
    flag: str | None
    key: str  # the simulator's name ("replicas": the workload is split)
    buys_gpus: bool
    why: str


# Knobs whose change the replay sizes from the GPU's memory.
MEMORY_KEYS = frozenset(
    {"gpu_memory_utilization", "tensor_parallel_size", "pipeline_parallel_size"}
)

# vLLM's documented order first (its remedies for preemption), then the opposite directions.
KNOBS = (
    Knob("raise_gpu_memory_utilization", "--gpu-memory-utilization", "gpu_memory_utilization",
         False, "More memory for the KV cache (vLLM's first remedy for preemption)."),
    Knob("lower_max_num_seqs", "--max-num-seqs", "max_num_seqs", False,
         "Fewer requests at once, so running requests keep their KV blocks."),
    Knob("lower_max_num_batched_tokens", "--max-num-batched-tokens", "max_num_batched_tokens",
         False, "A smaller token budget per step admits new prompts more slowly."),
    Knob("raise_max_num_seqs", "--max-num-seqs", "max_num_seqs", False,
         "More request slots: requests queue behind a full batch while KV has room."),
    Knob("raise_max_num_batched_tokens", "--max-num-batched-tokens", "max_num_batched_tokens",
         False, "A bigger token budget per step: prefills wait for room in each step."),
    Knob("lower_gpu_memory_utilization", "--gpu-memory-utilization", "gpu_memory_utilization",
         False, "Less memory for the KV cache."),
    Knob("lower_tensor_parallel_size", "--tensor-parallel-size", "tensor_parallel_size",
         False, "Fewer GPUs per replica."),
    Knob("lower_pipeline_parallel_size", "--pipeline-parallel-size", "pipeline_parallel_size",
         False, "Fewer pipeline stages."),
    Knob("raise_tensor_parallel_size", "--tensor-parallel-size", "tensor_parallel_size", True,
         "Shard the model over more GPUs: each holds less of the weights and of every "
         "token's KV, and steps are faster."),
    Knob("raise_pipeline_parallel_size", "--pipeline-parallel-size", "pipeline_parallel_size",
         True, "When tensor parallelism is not possible (interconnect, head count): split the "
               "layers over more GPUs, at some per-step latency."),
    Knob("add_replicas", None, "replicas", True,
         "More replicas behind the load balancer, each serving its share of the requests."),
)  # fmt: skip
ORDER = {k.action: i for i, k in enumerate(KNOBS)}
BY_ACTION = {k.action: k for k in KNOBS}
# Within this relative margin a predicted figure counts as unchanged: a replay trusted to
# 10 % (tok/s) and 15 % (e2e p99) of now is no evidence for a smaller gain.
SAME = 0.05
# An item's label when the replay of now misses the data (the figures: advice_check).
MISSED = "Unverified: the replay of now misses what was observed"
NO_REPLAY = (
    " Unverified: no workload could be replayed (no client results with token counts and no "
    "request lines or stats lines), so the simulator has not checked this number."
)


def advise(
    verdict: Verdict,
    capacity: Capacity,
    windows: Sequence[Window],
    params: AnalysisParams | None = None,
    replay: ReplayFactory | None = None,
) -> AdvicePlan:
    """Ranked changes for a deployment that is over capacity or at risk; none otherwise.

    `replay` builds the observed workload's replay (only called when there is advice to find).
    """
    if verdict.state not in ("over_capacity", "at_risk"):
        return AdvicePlan([])
    p = params if params is not None else AnalysisParams()
    head = _priorities(verdict)
    try:
        built = replay() if replay is not None else None
    except ConfigError:
        built = None  # settings no engine would start with: nothing to replay
    if built is None or not built.replayable:
        return AdvicePlan(_rank(head + _fallback(verdict, capacity, windows, p)))
    try:
        now = built.run()
    except ConfigError:
        return AdvicePlan(_rank(head + _fallback(verdict, capacity, windows, p)))
    check = fidelity(built.observed, now)
    explorer = _Explorer(built, now)
    found: list[tuple[tuple[Any, ...], Advice]] = []
    hints = _hints(verdict, capacity, windows, p)
    for knob in KNOBS:
        best: tuple[tuple[Any, ...], Any, WhatIfOutcome] | None = None
        for value in _candidates(knob, built, hints):
            new = explorer.outcome(knob.key, value)
            if new is None or not helps(now, new):
                continue
            score = _score(now, new, knob)
            if best is None or score < best[0]:
                best = (score, value, new)
        if best is None:
            continue
        score, value, new = best
        shown = _advice(knob, value, new, now, built, capacity, verdict, check)
        # Same-GPU changes before bought GPUs; within each, predicted gains (what the replay
        # vouches for first) before changes that only save preemptions (in vLLM's order: the
        # replay cannot tell those apart).
        unvouched = not shown.verified and score[0] == 0
        found.append(((knob.buys_gpus, score[0], unvouched, *score[1:]), shown))
    found.sort(key=lambda t: t[0])
    chosen = [a for _, a in found]
    if not check.verified:
        # A replay that misses what happened cannot decide alone: the data's own sizing for
        # the binding limit comes first, then what the replay adds; all unverified.
        sized = _fallback(verdict, capacity, windows, p, caveat=" " + MISSED + ".")
        taken = {a.action for a in sized}
        chosen = sized + [a for a in chosen if a.action not in taken]
    relief = {
        name: explorer.relief(name)
        for name in [verdict.limit, *(verdict.limit_detail.also if verdict.limit_detail else [])]
        if name in (LIMIT_KV, LIMIT_SEQS, LIMIT_BUDGET)
    }
    return AdvicePlan(_rank(head + chosen), relief, check)


def check_label(check: Fidelity) -> str:
    """'Verified: ...' / 'Unverified: the replay of now is off by ...' (fidelity's words).

    Said once per deployment (`DeploymentReport.advice_check`); each item says only its label.
    """
    text = check.describe()
    return text[0].upper() + text[1:]


def _score(now: WhatIfOutcome, new: WhatIfOutcome, knob: Knob) -> tuple[Any, ...]:
    """Rank key: predicted e2e p99, then tok/s, then vLLM's order. A change that only saves
    preemptions (p99 and tok/s within SAME of now) gains nothing the replay can tell apart:
    it ranks after those that do, in vLLM's order."""
    tput = _change(new.output_throughput, now.output_throughput) or 0.0
    p99 = _change(new.e2e_p99, now.e2e_p99) or 0.0
    if abs(p99) <= SAME and abs(tput) <= SAME:
        return (1, 0.0, 0.0, ORDER[knob.action])
    return (0, _sig(new.e2e_p99), -_sig(new.output_throughput), ORDER[knob.action])


def helps(now: WhatIfOutcome, new: WhatIfOutcome) -> bool:
    """Better e2e p99 or tok/s without the other worse, or, both unchanged, fewer preemptions
    by more than the replay's own tolerance (fidelity.py: a smaller saving is within what the
    replay of now may miss by, so the replay cannot tell it from none)."""
    tput = _change(new.output_throughput, now.output_throughput) or 0.0
    p99 = _change(new.e2e_p99, now.e2e_p99) or 0.0
    if p99 < -SAME and tput >= -SAME:
        return True
    if tput > SAME and p99 <= SAME:
        return True
    saved = now.preemptions - new.preemptions
    return abs(p99) <= SAME and abs(tput) <= SAME and saved > preemption_tolerance(now.preemptions)


def _sig(value: float | None) -> float:
    """Three significant digits: a difference below that is a tie for vLLM's order to break."""
    if value is None or not math.isfinite(value):
        return math.inf
    return float(f"{value:.3g}")


def _rank(items: list[Advice]) -> list[Advice]:
    return [dataclasses.replace(a, rank=i + 1) for i, a in enumerate(items)]


def _priorities(verdict: Verdict) -> list[Advice]:
    if verdict.problem != "ordering":
        return []
    return [
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
    ]


class _Explorer:
    """Replays of changed settings, without simulating a run already known to be identical."""

    def __init__(self, replay: Replay, now: WhatIfOutcome) -> None:
        self.replay = replay
        self.now = now
        self.runs: dict[tuple[Any, ...], WhatIfOutcome] = {engine_key(replay.config): now}

    def outcome(self, key: str, value: Any) -> WhatIfOutcome | None:
        try:
            if key == "replicas":
                return self._replicas(int(value))
            changes = {key: value}
            check_changes(self.replay, changes)
            return _replayed(self.replay, changes, self.now, self.runs)
        except ConfigError:
            return None

    def _replicas(self, n: int) -> WhatIfOutcome:
        """One of n replicas behind round-robin: every n-th request, n x its throughput."""
        wl = self.replay.workload
        assert wl is not None
        share = split_workload(wl, n)
        one = dataclasses.replace(self.replay, workload=share).run()
        return dataclasses.replace(
            one,
            requests=one.requests * n,
            finished=one.finished * n,
            preemptions=one.preemptions * n,
            output_throughput=one.output_throughput * n,
            request_throughput=one.request_throughput * n,
        )

    def relief(self, limit: str) -> float | None:
        """Predicted e2e p99 with the limit doubled: its relief, for settle_limit."""
        config = self.replay.config
        changes: dict[str, Any]
        if limit == LIMIT_SEQS:
            seqs = config.max_num_seqs * 2
            budget = max(config.max_num_batched_tokens, seqs)
            changes = {"max_num_seqs": seqs, "max_num_batched_tokens": budget}
        elif limit == LIMIT_BUDGET:
            changes = {"max_num_batched_tokens": config.max_num_batched_tokens * 2}
        else:
            changes = {"num_gpu_blocks_override": config.capacity().num_gpu_blocks * 2}
        try:
            new = _replayed(self.replay, changes, self.now, self.runs)
        except ConfigError:
            return None
        return new.e2e_p99


def split_workload(wl: Workload, n: int) -> Workload:
    """Every n-th request of `wl` (a round-robin share), all per-request arrays sliced alike."""
    size = len(wl)
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(wl):
        value = getattr(wl, f.name)
        if isinstance(value, np.ndarray | tuple) and len(value) == size:
            changes[f.name] = value[::n]
    return dataclasses.replace(wl, **changes)


@dataclass(frozen=True)
class _Hints:
    """Values the data itself sizes, tried beside the fixed steps."""

    fit: int | None = None  # requests that fit in KV at their mean length
    onset: int | None = None  # running count where preemption began, minus one
    by_kv: int | None = None  # max_num_seqs the KV headroom allows
    replicas: int | None = None  # arrival / service rate


def _hints(
    verdict: Verdict, capacity: Capacity, windows: Sequence[Window], p: AnalysisParams
) -> _Hints:
    fit = (
        int(capacity.kv_cache_tokens // capacity.mean_tokens_per_request)
        if capacity.kv_cache_tokens and capacity.mean_tokens_per_request
        else None
    )
    onset = onset_running(windows)
    raised = _raise_max_num_seqs(capacity, windows, p, verdict)
    replicas = _add_replicas(windows, p)
    factor = replicas.suggested if replicas is not None else None
    return _Hints(
        fit=fit if fit and fit >= 1 else None,
        onset=onset - 1 if onset and onset > 1 else None,
        by_kv=int(raised.suggested) if raised is not None and raised.suggested else None,
        replicas=math.ceil(float(factor[1:])) if factor else None,
    )


def _candidates(knob: Knob, replay: Replay, hints: _Hints) -> list[Any]:
    """A few values of one knob in its direction: fixed steps and the data's own sizing."""
    c = replay.config
    action = knob.action
    if action == "raise_gpu_memory_utilization":
        cur = c.gpu_memory_utilization
        return sorted({round(min(MAX_SUGGESTED_UTILIZATION, cur + d), 2)
                       for d in (0.03, 0.05, 0.1)} - {round(cur, 2)})  # fmt: skip
    if action == "lower_gpu_memory_utilization":
        return [round(c.gpu_memory_utilization - 0.1, 2)] if c.gpu_memory_utilization > 0.2 else []
    if action == "lower_max_num_seqs":
        cur = c.max_num_seqs
        pool: set[int | None] = {round(cur * f) for f in (0.25, 0.5, 0.75)}
        pool |= {hints.fit, hints.onset}
        return sorted(v for v in pool if v is not None and 1 <= v < cur)
    if action == "raise_max_num_seqs":
        cur = c.max_num_seqs
        pool = {round(cur * f) for f in (1.5, 2, 4)}
        pool |= {hints.by_kv}
        return sorted(v for v in pool if v is not None and cur < v <= c.max_num_batched_tokens)
    if action == "lower_max_num_batched_tokens":
        cur = c.max_num_batched_tokens
        floor = c.max_num_seqs if c.enable_chunked_prefill else max(c.max_num_seqs, c.max_model_len)
        budgets = {max(floor, cur // 2), max(floor, cur // 4)}
        return sorted(v for v in budgets if v < cur)
    if action == "raise_max_num_batched_tokens":
        cur = c.max_num_batched_tokens
        return [cur * 2, cur * 4]
    if action == "raise_tensor_parallel_size":
        return [c.tensor_parallel_size * 2]
    if action == "lower_tensor_parallel_size":
        return [c.tensor_parallel_size // 2] if c.tensor_parallel_size > 1 else []
    if action == "raise_pipeline_parallel_size":
        return [c.pipeline_parallel_size * 2]
    if action == "lower_pipeline_parallel_size":
        return [c.pipeline_parallel_size // 2] if c.pipeline_parallel_size > 1 else []
    if action == "add_replicas":
        return sorted({2, hints.replicas or 2})
    return []


def _figures(o: WhatIfOutcome) -> dict[str, Any]:
    out: dict[str, Any] = {
        "preemptions": o.preemptions,
        "output_throughput": round(o.output_throughput, 3),
        "e2e_p99": round(o.e2e_p99, 3) if o.e2e_p99 is not None else None,
    }
    if o.per_priority:  # the workload has priority classes: each one's figures too
        out["per_priority"] = o.per_priority
    return out


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
    for cls in sorted(set(now.per_priority) & set(new.per_priority), key=int):
        a, b = now.per_priority[cls].get("e2e_p99"), new.per_priority[cls].get("e2e_p99")
        if a is not None and b is not None:
            parts.append(f"priority {cls} e2e p99 {a:,.2f} -> {b:,.2f} s")
    return ", ".join(parts)


def _current(knob: Knob, capacity: Capacity, config: SimConfig, verdict: Verdict) -> str:
    """The knob's value now, and where it came from when not from the data."""
    if knob.key == "replicas":
        return "1 replica (this deployment)"
    logged = getattr(capacity, knob.key, None)
    if logged is not None:
        return f"{logged:.2f}" if isinstance(logged, float) else str(logged)
    value = getattr(config, knob.key)
    shown = f"{value:.2f}" if isinstance(value, float) else str(value)
    f = verdict.limit_detail
    if knob.key == "max_num_seqs" and f is not None and f.max_num_seqs_source == "inferred":
        return f"{shown} (inferred from the running plateau)"
    return f"{shown} (not in the data; assumed)"


def _advice(
    knob: Knob,
    value: Any,
    new: WhatIfOutcome,
    now: WhatIfOutcome,
    replay: Replay,
    capacity: Capacity,
    verdict: Verdict,
    check: Fidelity,
) -> Advice:
    shown = f"{value:.2f}" if isinstance(value, float) else str(value)
    if knob.key == "replicas":
        shown = f"x{value}"
    # A replay of now that matches the data cannot vouch for a memory change sized on a
    # preset's memory: such a change stays unverified, saying what was assumed.
    assumed = memory_assumption(replay) if knob.key in MEMORY_KEYS else None
    label = "Verified" if check.verified else MISSED
    if assumed is not None:
        label = f"Unverified: {assumed}, not from the data"
    why = knob.why
    if knob.action == "raise_gpu_memory_utilization":
        sized = _gpu_memory(capacity, (), target=float(value))
        if sized is not None:
            why = sized.reason
    return Advice(
        0,
        knob.action,
        knob.flag,
        _current(knob, capacity, replay.config, verdict),
        shown,
        f"{why} Replayed on the observed workload ({len(replay.workload or ())} requests): "
        f"{effect(now, new)}. {label}.",
        verified=check.verified and assumed is None,
        predicted={"now": _figures(now), "with_change": _figures(new)},
    )


def _fallback(
    verdict: Verdict,
    capacity: Capacity,
    windows: Sequence[Window],
    p: AnalysisParams,
    caveat: str = NO_REPLAY,
) -> list[Advice]:
    """The data's own sizing in the binding limit's direction, unverified (`caveat` says why)."""
    items: list[Advice | None]
    if verdict.limit == LIMIT_SEQS or (
        verdict.problem == "throughput" and verdict.limit != LIMIT_BUDGET
    ):
        items = [_raise_max_num_seqs(capacity, windows, p, verdict), _add_replicas(windows, p)]
    elif verdict.limit == LIMIT_BUDGET:
        items = [_raise_budget(capacity), _add_replicas(windows, p)]
    else:
        items = [
            _gpu_memory(capacity, windows),
            _max_num_seqs(capacity, windows),
            _max_num_batched_tokens(capacity, windows),
            _more_gpus(capacity, "tensor"),
            _more_gpus(capacity, "pipeline"),
        ]
    return [
        dataclasses.replace(a, reason=a.reason + caveat, verified=False)
        for a in items
        if a is not None
    ]


def _raise_budget(capacity: Capacity) -> Advice:
    current = capacity.max_num_batched_tokens
    return Advice(
        0,
        "raise_max_num_batched_tokens",
        "--max-num-batched-tokens",
        str(current) if current is not None else None,
        str(current * 2) if current is not None else None,
        BY_ACTION["raise_max_num_batched_tokens"].why
        + ("" if current is not None else " Its current value is not in the log."),
    )


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
