"""The deployment as observed, ready to replay: workload, settings, fitted step cost, and the
figures the replay of *now* must reproduce. One builder for `whatif`, the report and the advice.

Settings come from the data (KV blocks, block size, flags from the log and /metrics); `current`
fills only what no source shows; presets (model, GPU) are used only where nothing observed
exists, and every such use is written into `assumptions` in plain words. Pure: frames in.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
import polars as pl
from preemptscope.analysis import kvmodel, latency
from preemptscope.analysis.report import Capacity
from preemptscope.analysis.sim.calibrate import fit_step_cost
from preemptscope.analysis.sim.config import SimConfig, reserves_full_isl
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.observed_prefixes import (
    ROW_LATE_S,
    hashes_for,
    hashes_for_rows,
    log_prompt_hashes,
    prefix_hit_rate,
    with_hashed_prefixes,
    with_shared_prefix,
)
from preemptscope.analysis.sim.whatif import (
    WhatIfOutcome,
    observed_load,
    outcome,
    with_memory_change,
    workload_from_observed,
)
from preemptscope.analysis.sim.workload import Workload

from preemptscope.errors import ConfigError

# Fewer client requests with token counts than this make no workload worth replaying.
MIN_REQUESTS = 10
# The replay is bounded so the live service can afford it: the latest requests only, a step
# cap, and the last outcomes remembered (the service re-analyzes the same data between
# arrivals).
MAX_REPLAY_REQUESTS = 1000
MAX_REPLAY_STEPS = 500_000
_MEMO: OrderedDict[tuple[str, SimConfig, float | None], WhatIfOutcome] = OrderedDict()
_MEMO_SIZE = 128


@dataclass(frozen=True)
class ObservedFigures:
    """What the deployment showed over the replayed span (None: not observed)."""

    requests: int | None = None
    preemptions: int | None = None
    output_throughput: float | None = None
    e2e_p99: float | None = None
    prefix_cache_hit_rate: float | None = None  # vLLM's hits / queries over the data
    # Per priority class of the client rows: requests, e2e_p99, ttft_p99 (keys as text).
    per_priority: dict[str, dict[str, float | int | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class Replay:
    workload: Workload | None  # None: nothing to replay (no request data)
    config: SimConfig
    observed: ObservedFigures
    assumptions: list[str] = field(default_factory=list)
    workload_basis: str = ""
    priorities_known: bool = False  # the data gave each request's priority
    # Where the replayed shared prefixes come from: "hashes" (the log's prompt block hashes),
    # "hit rate" (inferred from the counters) or "" (none replayed).
    prefix_basis: str = ""

    @property
    def replayable(self) -> bool:
        return self.workload is not None and len(self.workload) > 0

    def run(
        self, changes: Mapping[str, Any] | None = None, *, until: float | None = None
    ) -> WhatIfOutcome:
        """Replay the workload now (no changes) or under changed settings."""
        if self.workload is None:
            raise ConfigError("nothing to replay: no request data")
        config = candidate_config(self.config, changes or {})
        wl = self.workload
        key = (wl.digest(), config, until)  # priorities and shared prefixes included
        if key in _MEMO:
            _MEMO.move_to_end(key)
            return _MEMO[key]
        result = simulate(wl, config, until=until, record_tokens=False, max_steps=MAX_REPLAY_STEPS)
        found = _MEMO[key] = outcome(result)
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
        return found


# Block sizes vLLM's GPU attention backends take (the CLI's choices before 0.10, plus 256).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)


def check_changes(replay: Replay, changes: Mapping[str, Any]) -> None:
    """Refuse values vLLM would refuse, or that would silently change the workload."""
    config = replay.config
    if (bs := changes.get("block_size")) is not None and bs not in BLOCK_SIZES:
        raise ConfigError(
            f"--block-size {bs}: vLLM's GPU attention backends take "
            f"{', '.join(map(str, BLOCK_SIZES))}"
        )
    if (tp := changes.get("tensor_parallel_size")) is not None:
        heads = (
            config.model.num_attention_heads or config.model.hidden_size // config.model.head_dim
        )
        if (
            tp < 1
            or heads % tp
            or (config.model.num_kv_heads % tp and tp % config.model.num_kv_heads)
        ):
            raise ConfigError(
                f"--tensor-parallel-size {tp}: {config.model.name} has {heads} attention heads "
                f"and {config.model.num_kv_heads} KV heads; vLLM needs the heads divisible by it"
            )
    if (length := changes.get("max_model_len")) is not None and replay.workload is not None:
        wl = replay.workload
        longer = int(((wl.prompt_len + wl.output_len) > length).sum())
        if length < 2 or longer:
            raise ConfigError(
                f"--max-model-len {length}: {longer} of {len(wl)} requests are longer "
                f"(up to {int((wl.prompt_len + wl.output_len).max()):,} tokens); vLLM would "
                "reject or cut them, so the replay would not be this workload"
            )
    for key in ("max_num_seqs", "max_num_batched_tokens", "num_gpu_blocks_override"):
        if (value := changes.get(key)) is not None and value < 1:
            raise ConfigError(f"--{key.replace('_', '-')} {value}: must be >= 1")
    if (mark := changes.get("watermark")) is not None and not 0 <= mark < 1:
        raise ConfigError(f"--watermark {mark}: must be in [0, 1)")
    if (util := changes.get("gpu_memory_utilization")) is not None and not 0 < util <= 1:
        raise ConfigError(f"--gpu-memory-utilization {util}: must be in (0, 1]")
    if (policy := changes.get("scheduling_policy")) is not None and policy not in (
        "fcfs",
        "priority",
    ):
        raise ConfigError(f"--scheduling-policy {policy!r}: fcfs or priority")
    if policy == "priority" and not replay.priorities_known:
        raise ConfigError(
            "--scheduling-policy priority: the data gives no request priorities (a `priority` "
            "column in the request rows, or `priorities` in the bench JSON); the replay would "
            "put every request at priority 0, which is fcfs"
        )


@dataclass(frozen=True)
class ReplayFrames:
    """What build_replay reads: client rows (or the log's), /metrics, stats and arrivals."""

    latencies: pl.DataFrame | None = None
    metrics: pl.DataFrame | None = None
    stats: pl.DataFrame | None = None
    arrivals: pl.Series | None = None  # when each logged request started
    # When each logged request started and its prompt's block hashes (prefixes.py), sorted by
    # time; None where no log line shows prompt token ids.
    prompt_hashes: pl.DataFrame | None = None


def replay_inputs(item: Any, *, latencies: pl.DataFrame | None = None) -> ReplayFrames:
    """build_replay's frames from a DeploymentInputs (logs, /metrics, client rows).

    `latencies`: the rows the analysis already has (client rows, else the log's), if any.
    """
    from preemptscope.ingest.lifecycle import log_arrivals, log_latencies

    def frames(kind: str) -> pl.DataFrame | None:
        parts = [lf[kind] for lf in item.logs if kind in lf.frames and not lf[kind].is_empty()]
        return pl.concat(parts, how="vertical_relaxed") if parts else None

    if latencies is None:
        latencies = item.latencies if item.latencies is not None and item.latencies.height else None
    if latencies is None and item.logs:
        derived = log_latencies(item.logs)
        latencies = derived if derived.height else None
    arrivals = log_arrivals(item.logs) if item.logs else None
    metrics = latency.usable_samples(item.metrics)
    stats = frames("scheduler_stats")
    last = stats["timestamp"].max() if stats is not None else None
    if latencies is not None and "start" in latencies.columns and last is not None:
        # Client rows can start after the last stats line: their hashes are looked up too
        # (hashes_for_rows lines them up).
        late = latencies.select(pl.col("start").max() + timedelta(seconds=ROW_LATE_S)).item()
        if late is not None:
            last = max(last, late)
    return ReplayFrames(
        latencies,
        metrics,
        stats,
        arrivals if arrivals is not None and arrivals.len() else None,
        log_prompt_hashes(item.logs, until=last, keep=MAX_REPLAY_REQUESTS) if item.logs else None,
    )


def candidate_config(base: SimConfig, changes: Mapping[str, Any]) -> SimConfig:
    """`base` with vLLM flags changed; memory moves the block count, TP scales a fitted cost."""
    config = with_memory_change(base, changes)
    gpus = config.tensor_parallel_size * config.pipeline_parallel_size
    base_gpus = base.tensor_parallel_size * base.pipeline_parallel_size
    if config.step_cost is not None and gpus != base_gpus:
        ratio = base_gpus / gpus
        cost = config.step_cost
        config = dataclasses.replace(
            config,
            step_cost=dataclasses.replace(
                cost,
                per_step_s=cost.per_step_s * ratio,
                per_prefill_token_s=cost.per_prefill_token_s * ratio,
                per_decode_token_s=cost.per_decode_token_s * ratio,
                per_context_token_s=cost.per_context_token_s * ratio,
                basis=cost.basis + f", scaled x{ratio:g} for the GPU count",
            ),
        )
    return config


def workload_from_latencies(frame: pl.DataFrame | None) -> Workload | None:
    """Client request rows (REQUEST_LATENCIES) as a replayable trace: arrivals and lengths."""
    if frame is None or frame.is_empty():
        return None
    rows = frame.filter(
        pl.col("start").is_not_null()
        & pl.col("prompt_tokens").is_not_null()
        & pl.col("output_tokens").is_not_null()
    ).sort("start")
    if rows.height < MIN_REQUESTS:
        return None
    rows = rows.tail(MAX_REPLAY_REQUESTS)
    first = rows["start"].min()
    arrival = (rows["start"] - first).dt.total_microseconds().cast(pl.Float64) / 1e6
    n = rows.height
    known = has_priorities(rows)
    # A row without a priority is sent without one: vLLM's default, 0.
    priority = rows["priority"].fill_null(0).to_numpy() if known else np.zeros(n)
    description: dict[str, Any] = {
        "kind": "client results",
        "requests": n,
        "basis": f"{n} client requests",
    }
    if known:
        classes = rows["priority"].fill_null(0).value_counts().sort("priority").rows()
        description["priorities"] = {str(p): c for p, c in classes}
    return Workload(
        arrival=arrival.to_numpy(),
        prompt_len=rows["prompt_tokens"].clip(lower_bound=1).to_numpy(),
        # Failed requests report 0 output tokens: replayed as 1-token requests.
        output_len=rows["output_tokens"].clip(lower_bound=1).to_numpy(),
        priority=priority.astype(np.int64),
        description=description,
    )


def has_priorities(frame: pl.DataFrame | None) -> bool:
    """The client rows give request priorities (a `priority` column with a value)."""
    return (
        frame is not None
        and "priority" in frame.columns
        and frame["priority"].null_count() < frame.height
    )


def _observed_from_latencies(frame: pl.DataFrame, workload: Workload) -> ObservedFigures:
    rows = frame.filter(pl.col("start").is_not_null() & pl.col("e2e").is_not_null())
    if rows.is_empty():
        return ObservedFigures(requests=len(workload))
    rows = rows.sort("start").tail(len(workload))
    start = rows["start"].dt.epoch("us").cast(pl.Float64).to_numpy() / 1e6
    end = start + rows["e2e"].to_numpy()
    span = float(end.max() - start.min())
    out = rows["output_tokens"].fill_null(0).sum() if "output_tokens" in rows.columns else None
    e2e = rows["e2e"].to_numpy()
    classes: dict[str, dict[str, float | int | None]] = {}
    if has_priorities(rows):
        for (p,), part in rows.with_columns(pl.col("priority").fill_null(0)).group_by(
            "priority", maintain_order=True
        ):
            ttft = part["ttft"].drop_nulls().to_numpy()
            classes[str(p)] = {
                "requests": part.height,
                "e2e_p99": float(np.percentile(part["e2e"].to_numpy(), 99)),
                "ttft_p99": float(np.percentile(ttft, 99)) if len(ttft) else None,
            }
        classes = dict(sorted(classes.items(), key=lambda kv: int(kv[0])))
    return ObservedFigures(
        requests=rows.height,
        output_throughput=float(out) / span if out and span > 0 else None,
        e2e_p99=float(np.percentile(e2e, 99)) if len(e2e) else None,
        per_priority=classes,
    )


def _gpu_total(capacity: Capacity, util: float) -> float | None:
    """Memory per GPU: logged, else rebuilt from vLLM's budget (weights + KV + the rest)."""
    if capacity.gpu_memory_total_gib:
        return capacity.gpu_memory_total_gib
    if capacity.available_kv_memory_gib and capacity.model_weights_gib:
        rest = kvmodel.DEFAULT_ACTIVATION_GIB + kvmodel.DEFAULT_NON_TORCH_GIB
        return (capacity.model_weights_gib + capacity.available_kv_memory_gib + rest) / util
    return None


def _model_for(capacity: Capacity) -> kvmodel.ModelSpec | None:
    if not capacity.model:
        return None
    name = capacity.model.lower()
    for spec in kvmodel.MODEL_PRESETS.values():
        if spec.name.lower() == name or name.endswith(spec.name.lower().split("/")[-1]):
            return spec
    return None


def settings(
    capacity: Capacity,
    base: SimConfig,
    current: Mapping[str, Any],
    assumptions: list[str],
    *,
    presets_given: bool,
) -> SimConfig:
    """The current configuration: observed values first, `current` for the gaps, then presets."""
    observed: dict[str, Any] = {
        "gpu_memory_utilization": capacity.gpu_memory_utilization,
        "max_num_seqs": capacity.max_num_seqs,
        "max_num_batched_tokens": capacity.max_num_batched_tokens,
        "tensor_parallel_size": capacity.tensor_parallel_size,
        "pipeline_parallel_size": capacity.pipeline_parallel_size,
        "block_size": capacity.block_size,
        "max_model_len": capacity.max_model_len,
        "num_gpu_blocks_override": capacity.num_gpu_blocks,
        "scheduling_policy": capacity.scheduling_policy
        if capacity.scheduling_policy in ("fcfs", "priority")
        else None,
        "scheduler_reserve_full_isl": reserves_full_isl(capacity.vllm_version),
        "enable_prefix_caching": capacity.enable_prefix_caching,
    }
    chosen: dict[str, Any] = {}
    for key, value in observed.items():
        given = current.get(key)
        if value is not None:
            chosen[key] = value
            if given is not None and given != value:
                assumptions.append(f"--current {key}={given} ignored: the data shows {value}")
        elif given is not None:
            chosen[key] = given
    for key, given in current.items():
        if key not in observed and given is not None:
            chosen[key] = given
    if chosen.get("max_num_batched_tokens") is None:
        seqs = chosen.get("max_num_seqs") or base.max_num_seqs
        chosen["max_num_batched_tokens"] = max(base.max_num_batched_tokens, int(seqs))
        assumptions.append(
            f"max_num_batched_tokens not shown: vLLM's default {chosen['max_num_batched_tokens']}"
        )
    for key, label in (
        ("max_num_seqs", "max_num_seqs"),
        ("gpu_memory_utilization", "gpu_memory_utilization"),
        ("max_model_len", "max_model_len"),
    ):
        if chosen.get(key) is None:
            assumptions.append(f"{label} not shown: {getattr(base, key)} assumed")
    if chosen.get("scheduler_reserve_full_isl") is None:
        assumptions.append("vLLM version not shown: 0.33's whole-prompt admission assumed")
    model = _model_for(capacity)
    if model is not None and not presets_given:
        chosen["model"] = model
    config = dataclasses.replace(base, **chosen)
    if config.num_gpu_blocks_override is None:
        cap = config.capacity()
        assumptions.append(
            f"KV cache not shown: {cap.num_gpu_blocks:,} blocks estimated for {config.model.name} "
            f"on {config.gpu.name}"
        )
    elif config.max_model_len > config.num_gpu_blocks_override * config.block_size:
        config = dataclasses.replace(
            config, max_model_len=config.num_gpu_blocks_override * config.block_size
        )
    total = _gpu_total(capacity, config.gpu_memory_utilization)
    if total is not None:
        config = dataclasses.replace(
            config, gpu=dataclasses.replace(config.gpu, memory_gib=total, name="observed GPU")
        )
    elif config.num_gpu_blocks_override is not None:
        assumptions.append(
            f"{GPU_MEMORY_ASSUMED}: {config.gpu.memory_gib:g} GiB ({config.gpu.name}) assumed "
            "for memory changes"
        )
    return config


GPU_MEMORY_ASSUMED = "GPU memory not shown"


def memory_assumption(replay: Replay) -> str | None:
    """The replay's assumed GPU memory, when the data shows none: a memory change's size (a
    higher gpu_memory_utilization, more GPUs) then rests on a preset, not on the data."""
    return next((a for a in replay.assumptions if a.startswith(GPU_MEMORY_ASSUMED)), None)


def build_replay(
    capacity: Capacity,
    frames: ReplayFrames,
    *,
    preemptions: int | None,
    base: SimConfig | None = None,
    current: Mapping[str, Any] | None = None,
    presets_given: bool = False,
    output_tokens: float | None = None,
    seed: int = 0,
) -> Replay:
    """Everything a replay needs, from what one deployment's inputs show."""
    latencies, metrics, stats, arrivals = (
        frames.latencies,
        frames.metrics,
        frames.stats,
        frames.arrivals,
    )
    assumptions: list[str] = []
    config = settings(
        capacity, base or SimConfig(), current or {}, assumptions, presets_given=presets_given
    )
    hit_rate = prefix_hit_rate(metrics, stats)
    caching = config.enable_prefix_caching
    # KV usage x the observed blocks is the context held (a preset's block count is no basis).
    kv_tokens = (
        config.num_gpu_blocks_override * config.block_size
        if config.num_gpu_blocks_override is not None
        else None
    )
    fitted = fit_step_cost(
        latencies,
        metrics,
        stats,
        prefix_hit_rate=hit_rate if caching else None,
        kv_tokens=kv_tokens,
    )
    if fitted is not None:
        config = dataclasses.replace(config, step_cost=fitted)
    else:
        assumptions.append(
            f"no step timings to fit: step times from the roofline of {config.model.name} on "
            f"{config.gpu.name} (presets)"
        )
    workload = workload_from_latencies(latencies)
    if latencies is not None and workload is not None and _usable_rows(latencies) > len(workload):
        _note_whole_run(preemptions, len(workload), assumptions)
        preemptions = None
    figures = ObservedFigures(preemptions=preemptions)
    basis = ""
    if workload is not None and latencies is not None:
        basis = str(workload.description.get("basis", ""))
        figures = dataclasses.replace(
            _observed_from_latencies(latencies, workload), preemptions=preemptions
        )
    elif stats is not None and stats.height >= 2:
        try:
            load = observed_load(
                stats, arrivals, output_tokens=output_tokens, keep_last=MAX_REPLAY_REQUESTS
            )
        except ConfigError as exc:
            assumptions.append(f"no workload to replay: {exc}")
        else:
            workload = workload_from_observed(load, seed=seed, last=MAX_REPLAY_REQUESTS)
            # (Of logged arrivals, only the last ones were drawn: their count tells.)
            if max(load.arrival_count, len(workload)) > MAX_REPLAY_REQUESTS:
                # A long log's load is replayed over its latest stretch: the cost of the
                # advice check stays bounded whatever the size of the log.
                workload = _latest(workload, MAX_REPLAY_REQUESTS)
                _note_whole_run(preemptions, len(workload), assumptions)
                preemptions = None
            basis = load.basis + "; lengths lognormal around the means"
            hashed = hashes_for(frames.prompt_hashes, stats, len(workload), assumptions)
            if hashed is not None:
                workload = with_hashed_prefixes(workload, config, *hashed, assumptions)
                basis = load.basis + "; prompt lengths from the prompt block hashes where shown"
                workload = dataclasses.replace(
                    workload,
                    description={**workload.description, "basis": basis, "prefixes": "hashes"},
                )
            figures = ObservedFigures(
                requests=len(workload),
                preemptions=preemptions,
                output_throughput=load.mean_output_tokens * load.request_rate,
                e2e_p99=_log_e2e_p99(latencies),
            )
    else:
        assumptions.append("no workload to replay: no request data or stats lines")
    figures = dataclasses.replace(figures, prefix_cache_hit_rate=hit_rate)
    if workload is not None and latencies is not None and workload.prefix_group is None:
        matched = hashes_for_rows(
            frames.prompt_hashes, latencies["start"].max(), workload, assumptions
        )
        if matched is not None:
            workload = with_hashed_prefixes(
                workload, config, matched, workload.prompt_len, assumptions
            )
    prefix_basis = ""
    if workload is not None and workload.prefix_group is not None:
        prefix_basis = "hashes"  # the log's prompt block hashes said which prompts share what
    elif workload is not None and len(workload):
        workload = with_shared_prefix(workload, config, hit_rate, assumptions)
        prefix_basis = "hit rate" if workload.shares_prefixes else ""
    known = has_priorities(latencies) and workload is not None
    if config.scheduling_policy == "priority" and not known:
        assumptions.append(
            "the server schedules by priority but the data gives no request priorities: "
            "every request replayed at priority 0"
        )
    return Replay(
        workload,
        config,
        figures,
        assumptions,
        basis,
        priorities_known=known,
        prefix_basis=prefix_basis,
    )


HIT_RATE_TOLERANCE = 0.05  # absolute: a replayed hit rate further off is stated


def hit_rate_note(replay: Replay, now: WhatIfOutcome) -> str | None:
    """The replay's prefix-cache hit rate beside the observed one, when they differ."""
    seen, replayed = replay.observed.prefix_cache_hit_rate, now.prefix_cache_hit_rate
    hashed = replay.prefix_basis == "hashes"
    if seen is None:
        if hashed and replayed is not None:
            return (
                f"the replay's prefix-cache hit rate is {replayed:.0%} (prefixes from the "
                "prompt block hashes); the data shows no hit rate to compare it with"
            )
        return None
    if replayed is None:
        replayed = 0.0
    close = abs(replayed - seen) <= HIT_RATE_TOLERANCE
    if hashed:  # the prefixes are the data's own: their hit rate is stated either way
        miss = "" if close else "; the replay does not reproduce the sharing"
        return (
            f"the replay's prefix-cache hit rate is {replayed:.0%}, the deployment's {seen:.0%} "
            f"(prefixes from the prompt block hashes{miss})"
        )
    if close:
        return None
    return (
        f"the replay's prefix-cache hit rate is {replayed:.0%}, the deployment's {seen:.0%}: "
        "the replay does not reproduce its sharing"
    )


def _usable_rows(frame: pl.DataFrame) -> int:
    """Client rows workload_from_latencies can replay (start and both token counts)."""
    return frame.filter(
        pl.col("start").is_not_null()
        & pl.col("prompt_tokens").is_not_null()
        & pl.col("output_tokens").is_not_null()
    ).height


def _latest(workload: Workload, n: int) -> Workload:
    """The last `n` requests of `workload`, arrivals from 0."""
    keep = slice(len(workload) - n, None)
    arrival = workload.arrival[keep]
    return Workload(
        arrival=arrival - arrival[0],
        prompt_len=workload.prompt_len[keep],
        output_len=workload.output_len[keep],
        priority=workload.priority[keep],
        request_ids=workload.request_ids[keep] if workload.request_ids else (),
        description={**workload.description, "requests": n},
    )


def _note_whole_run(preemptions: int | None, replayed: int, assumptions: list[str]) -> None:
    """A count over the whole run is not a count over the replayed stretch: not compared."""
    if preemptions is not None:
        assumptions.append(
            f"the replay covers the latest {replayed:,} requests; the {preemptions:,} "
            "preemptions counted cover the whole run, so the two are not compared"
        )


def _log_e2e_p99(latencies: pl.DataFrame | None) -> float | None:
    if latencies is None or latencies.is_empty():
        return None
    e2e = latencies["e2e"].drop_nulls().to_numpy()
    return float(np.percentile(e2e, 99)) if len(e2e) else None


def relative(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or old == 0 or math.isnan(new) or math.isnan(old):
        return None
    return new / old - 1.0


def fit_line(replay: Replay, now: WhatIfOutcome) -> list[tuple[str, str, str]]:
    """(figure, observed, replayed now) rows: the fit's own error, shown to the user."""
    o = replay.observed

    def num(v: float | int | None, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    return [
        ("preemptions", num(o.preemptions, ","), num(now.preemptions, ",")),
        ("output tok/s", num(o.output_throughput, ",.0f"), num(now.output_throughput, ",.0f")),
        ("e2e p99 (s)", num(o.e2e_p99, ".2f"), num(now.e2e_p99, ".2f")),
    ]


def describe_cost(config: SimConfig) -> str:
    cost = config.step_cost
    if cost is None:
        return f"roofline of {config.model.name} on {config.gpu.name}"
    err = f", median error {cost.rel_error:.0%}" if cost.rel_error is not None else ""
    context = (
        f" + {cost.per_context_token_s * 1e6:.3f} µs per context token"
        if cost.per_context_token_s
        else ""
    )
    return (
        f"fitted from {cost.basis}: {cost.per_step_s * 1e3:.1f} ms per step + "
        f"{cost.per_decode_token_s * 1e3:.3f} ms per running request + "
        f"{cost.per_prefill_token_s * 1e3:.3f} ms per prefill token{context}{err}"
    )


def inputs_summary(sources: Sequence[str]) -> str:
    return ", ".join(sources)
