"""What-if: replay an observed workload under other vLLM settings and predict the outcome.

`predict(workload, changes, base=...)` simulates the baseline and the changed configuration on
the SAME arrivals and lengths, so differences come from the settings alone. The advice quotes it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl
from preemptscope.analysis.kvmodel import GIB, kv_bytes_per_token, weights_gib
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import SimResult, simulate
from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic

from preemptscope.errors import ConfigError


@dataclass(frozen=True)
class WhatIfOutcome:
    """Predicted behaviour of one configuration on the workload."""

    settings: dict[str, Any]
    num_gpu_blocks: int
    kv_cache_tokens: int
    requests: int
    finished: int
    preemptions: int
    preempted_requests: int
    output_throughput: float  # generated tokens/s over the replay
    request_throughput: float  # finished requests/s
    e2e_mean: float | None
    e2e_p99: float | None
    ttft_mean: float | None
    ttft_p99: float | None
    recomputed_tokens: int  # prefill work redone because of preemption
    peak_running: int = 0  # the most requests running at once (within a step)
    budget_needed: int = 0  # SimResult.budget_needed: a smaller token budget changes the run
    prefix_cache_hit_rate: float | None = None  # hits / queries of first admissions (vLLM's)
    # Per priority class (when the workload has priorities): requests, e2e_p99, ttft_p99,
    # preemptions; keys are the priorities as text (JSON object keys).
    per_priority: dict[str, dict[str, float | int | None]] = field(default_factory=dict)

    @property
    def e2e_p99_over_mean(self) -> float | None:
        if self.e2e_mean and self.e2e_p99 is not None:
            return self.e2e_p99 / self.e2e_mean
        return None


@dataclass(frozen=True)
class WhatIfResult:
    changes: dict[str, Any]
    baseline: WhatIfOutcome
    candidate: WhatIfOutcome
    workload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _settings(config: SimConfig) -> dict[str, Any]:
    return {
        "model": config.model.name,
        "gpu": config.gpu.name,
        "tensor_parallel_size": config.tensor_parallel_size,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "max_num_seqs": config.max_num_seqs,
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "max_model_len": config.max_model_len,
        "block_size": config.block_size,
        "scheduling_policy": config.scheduling_policy,
        "num_gpu_blocks_override": config.num_gpu_blocks_override,
    }


def _pct(values: np.ndarray[Any, Any], q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _mean(values: np.ndarray[Any, Any]) -> float | None:
    return float(values.mean()) if len(values) else None


def outcome(result: SimResult) -> WhatIfOutcome:
    """Summarise one simulation as the figures the advice and the CLI quote."""
    e2e, ttft = result.e2e(), result.ttft()
    span = result.end_time - (float(result.workload.arrival[0]) if len(result.workload) else 0.0)
    finished = int(result.finished_mask.sum())
    # Prompt tokens computed once: all of them but the prefix-cache hits of first admissions.
    prompt_total = int(result.prompt_len.sum()) - (result.prefix_cache_hits or 0)
    recomputed = max(0, int(result.steps.prefill_tokens.sum()) - prompt_total)
    return WhatIfOutcome(
        settings=_settings(result.config),
        num_gpu_blocks=result.capacity.num_gpu_blocks,
        kv_cache_tokens=result.capacity.kv_cache_tokens,
        requests=len(result.workload),
        finished=finished,
        preemptions=result.total_preemptions,
        preempted_requests=int(np.count_nonzero(result.num_preemptions)),
        output_throughput=result.output_throughput(),
        request_throughput=finished / span if span > 0 else 0.0,
        e2e_mean=_mean(e2e),
        e2e_p99=_pct(e2e, 99),
        ttft_mean=_mean(ttft),
        ttft_p99=_pct(ttft, 99),
        recomputed_tokens=recomputed,
        peak_running=peak_running(result),
        budget_needed=result.budget_needed,
        prefix_cache_hit_rate=result.prefix_cache_hit_rate,
        per_priority=per_priority(result),
    )


def per_priority(result: SimResult) -> dict[str, dict[str, float | int | None]]:
    """Figures per priority class, when the workload has more than one class or any but 0."""
    prio = result.workload.priority
    classes = np.unique(prio)
    if not len(classes) or (len(classes) == 1 and classes[0] == 0):
        return {}
    arrival, finish, first = result.workload.arrival, result.finish, result.first_token
    out: dict[str, dict[str, float | int | None]] = {}
    for p in classes.tolist():
        mask = prio == p
        e2e = (finish - arrival)[mask]
        ttft = (first - arrival)[mask]
        out[str(p)] = {
            "requests": int(mask.sum()),
            "e2e_p99": _pct(e2e[~np.isnan(e2e)], 99),
            "ttft_p99": _pct(ttft[~np.isnan(ttft)], 99),
            "preemptions": int(result.num_preemptions[mask].sum()),
        }
    return out


def peak_running(result: SimResult) -> int:
    """The most requests that ran at once: after admission, before the step's finishes."""
    steps = result.steps
    return int((steps.running + steps.finished).max()) if len(steps) else 0


def relabel(found: WhatIfOutcome, config: SimConfig) -> WhatIfOutcome:
    """An outcome of an identical run, under the settings of `config`."""
    cap = config.capacity()
    return dataclasses.replace(
        found,
        settings=_settings(config),
        num_gpu_blocks=cap.num_gpu_blocks,
        kv_cache_tokens=cap.kv_cache_tokens,
    )


def with_memory_change(base: SimConfig, changes: Mapping[str, Any]) -> SimConfig:
    """Apply changes; when the base was calibrated to an observed block count, a new
    gpu_memory_utilization moves the block count by the memory it adds, as vLLM would."""
    config = base.with_changes(changes)
    if base.num_gpu_blocks_override is None:
        return config
    touches_memory = any(
        k.lstrip("-").replace("-", "_")
        in (
            "gpu_memory_utilization",
            "tensor_parallel_size",
            "tp",
            "pipeline_parallel_size",
            "pp",
            "block_size",
        )
        for k in changes
    )
    overrides_blocks = any(
        k.lstrip("-").replace("-", "_") == "num_gpu_blocks_override" for k in changes
    )
    if not touches_memory or overrides_blocks:
        return config
    old, new = base.capacity(), dataclasses.replace(config, num_gpu_blocks_override=None)
    # Observed KV memory + the memory the change frees or adds (per GPU).
    extra = (new.gpu_memory_utilization - base.gpu_memory_utilization) * base.gpu.memory_gib
    extra -= weights_gib(
        new.model, tp=new.tensor_parallel_size, pp=new.pipeline_parallel_size
    ) - weights_gib(base.model, tp=base.tensor_parallel_size, pp=base.pipeline_parallel_size)
    block_bytes = (
        kv_bytes_per_token(
            new.model,
            kv_dtype_bytes=new.kv_cache_dtype_bytes,
            tp=new.tensor_parallel_size,
            pp=new.pipeline_parallel_size,
        )
        * new.block_size
    )
    kv_bytes = old.num_gpu_blocks * old.bytes_per_token * old.block_size + extra * GIB
    if kv_bytes <= 0:
        raise ConfigError("the change leaves no memory for the KV cache")
    return dataclasses.replace(config, num_gpu_blocks_override=int(kv_bytes // block_bytes))


def predict(
    workload: Workload,
    changes: Mapping[str, Any],
    *,
    base: SimConfig | None = None,
    until: float | None = None,
) -> WhatIfResult:
    """Replay `workload` under `base` and under `base` with `changes` (vLLM flag names)."""
    base_config = base or SimConfig()
    candidate_config = with_memory_change(base_config, changes)
    baseline = outcome(simulate(workload, base_config, until=until, record_tokens=False))
    candidate = outcome(simulate(workload, candidate_config, until=until, record_tokens=False))
    return WhatIfResult(
        changes=dict(changes), baseline=baseline, candidate=candidate, workload=workload.description
    )


def sweep(
    workload: Workload,
    setting: str,
    values: Sequence[Any],
    *,
    base: SimConfig | None = None,
    until: float | None = None,
) -> list[WhatIfOutcome]:
    """One outcome per value of one setting (the what-if curve the dashboards draw)."""
    base_config = base or SimConfig()
    return [
        outcome(
            simulate(
                workload,
                with_memory_change(base_config, {setting: value}),
                until=until,
                record_tokens=False,
            )
        )
        for value in values
    ]


@dataclass(frozen=True)
class ObservedLoad:
    """What a parsed log says about the offered load (the what-if's input when no bench JSON)."""

    duration: float
    request_rate: float
    mean_prompt_tokens: float
    mean_output_tokens: float
    # Seconds from the first stats record, sorted (an array: a long log has millions); empty
    # when unknown. With observed_load's `keep_last`, only the last ones of `logged`.
    arrivals: npt.NDArray[np.float64]
    basis: str  # how it was estimated, quoted to the user
    logged: int | None = None  # arrivals in the stats' span; None: len(arrivals)

    @property
    def arrival_count(self) -> int:
        return len(self.arrivals) if self.logged is None else self.logged


def observed_load(
    stats: pl.DataFrame,
    arrivals: pl.Series | None,
    *,
    output_tokens: float | None = None,
    keep_last: int | None = None,
) -> ObservedLoad:
    """Estimate the offered load from scheduler-stats frames and request arrivals.

    Token totals integrate the per-interval throughputs. The request count comes from the
    request lines' arrivals (ingest/lifecycle.py `log_arrivals`) when the log has them;
    otherwise from the generation total divided by `output_tokens` (an assumption the caller
    must state). `keep_last`: keep only the last `keep_last` arrival times (the report
    replays a tail; all of a 4 GB log's are 36 MB, and twice that while converted).
    """
    frame = stats.filter(pl.col("timestamp").is_not_null()).sort("timestamp")
    if frame.height < 2:
        raise ConfigError("the log needs at least two timestamped stats records for a what-if")
    ts = frame["timestamp"].dt.epoch("us").cast(pl.Float64) / 1e6
    times = ts.to_numpy()
    gaps = np.diff(times)
    duration = float(times[-1] - times[0])
    prompt_tokens = float((frame["prompt_throughput"].fill_null(0).to_numpy()[1:] * gaps).sum())
    gen_tokens = float((frame["generation_throughput"].fill_null(0).to_numpy()[1:] * gaps).sum())
    arrival_times = np.empty(0, dtype=np.float64)
    logged = 0
    if arrivals is not None and arrivals.len():
        # Compared as times, not as seconds: the stats' seconds (Polars multiplies by 1e-6)
        # and the arrivals' (numpy divides) could differ in the last bit, which kept or
        # dropped an arrival logged in the second of the first or last stats line.
        known = arrivals.drop_nulls()
        first, last = frame["timestamp"][0], frame["timestamp"][-1]
        if known.is_sorted():
            # Sorted (log_arrivals' are): the stats' span is one slice, not a filtered copy.
            low = int(known.search_sorted(first, side="left"))
            high = int(known.search_sorted(last, side="right"))
            inside = known.slice(low, high - low)
        else:
            inside = known.filter((known >= first) & (known <= last)).sort()
        logged = inside.len()
        if keep_last is not None:
            inside = inside.slice(max(0, logged - keep_last))
        micros = inside.dt.epoch("us").cast(pl.Float64).to_numpy()
        arrival_times = micros / 1e6
        arrival_times -= times[0]  # in place: millions of arrivals, one copy
    if logged:
        count = float(logged)
        basis = f"{logged} request lines; token totals from stats throughputs"
    elif output_tokens:
        count = gen_tokens / output_tokens
        basis = f"generation total / assumed {output_tokens:g} output tokens per request"
    else:
        raise ConfigError(
            "the log has no request lines; give the mean output length (--output-len) "
            "so the request rate can be estimated from the generation throughput"
        )
    if count <= 0 or duration <= 0:
        raise ConfigError("the log shows no traffic to replay")
    return ObservedLoad(
        duration=duration,
        request_rate=count / duration,
        mean_prompt_tokens=max(1.0, prompt_tokens / count),
        mean_output_tokens=max(1.0, gen_tokens / count),
        arrivals=arrival_times,
        basis=basis,
        logged=logged if keep_last is not None else None,
    )


def workload_from_observed(
    load: ObservedLoad, *, seed: int = 0, cv: float = 0.6, last: int | None = None
) -> Workload:
    """A replayable workload matching an observed load (lognormal lengths around the means).

    `last`: of the logged arrivals, only the last `last` requests, with the lengths they have
    in the whole workload (the caller replays a long log's tail)."""
    prompt = LengthDist("lognormal", load.mean_prompt_tokens, cv, 1, 1_000_000)
    output = LengthDist("lognormal", load.mean_output_tokens, cv, 1, 1_000_000)
    if len(load.arrivals):
        rng = np.random.default_rng(seed)
        n = load.arrival_count
        keep = n if last is None else min(n, last)
        assert keep <= len(load.arrivals), "observed_load kept fewer arrivals than asked for"
        return Workload(
            arrival=np.asarray(load.arrivals[len(load.arrivals) - keep :], dtype=np.float64),
            prompt_len=prompt.sample(rng, n, last=keep),
            output_len=output.sample(rng, n, last=keep),
            priority=np.zeros(keep, dtype=np.int64),
            description={"kind": "observed", "basis": load.basis, "requests": n, "seed": seed},
        )
    wl = synthetic(
        rate=load.request_rate,
        duration=max(load.duration, 1.0),
        seed=seed,
        prompt=prompt,
        output=output,
    )
    return dataclasses.replace(
        wl, description={**wl.description, "kind": "observed", "basis": load.basis}
    )


def fmt_seconds(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:.2f}s" if value < 100 else f"{value:.0f}s"
