"""A deployment's capacity facts: startup KV lines, engine config, cache_config_info, load.

Owns `capacity_facts`, the one place a Capacity is built from logs and /metrics (the replay
and the advice read it from there). It never estimates what was not printed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl
from preemptscope.analysis import latency
from preemptscope.analysis.events import clean_setting as _clean
from preemptscope.analysis.report import (
    Capacity,
    Window,
)
from preemptscope.ingest.schema import LogFrames, empty


def kind_frames(logs: Iterable[LogFrames], kind: str) -> pl.DataFrame:
    parts = [lf[kind] for lf in logs if kind in lf.frames and not lf[kind].is_empty()]
    return pl.concat(parts, how="vertical_relaxed") if parts else empty(kind)


# -------------------------------------------------------------------------------------------
# Capacity facts: startup KV lines, engine config, cache_config_info, observed load

_INT_KEYS = {
    "max_num_seqs",
    "max_num_batched_tokens",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "block_size",
    "max_model_len",
}


def _as_int(value: Any) -> int | None:
    text = _clean(value)
    try:
        return int(float(text.replace(",", ""))) if text is not None else None
    except ValueError:
        return None


def _as_float(value: Any) -> float | None:
    text = _clean(value)
    try:
        number = float(text.replace(",", "")) if text is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _as_bool(value: Any) -> bool | None:
    """A flag as vLLM prints it (True/False in args and config lines, true/false elsewhere)."""
    text = _clean(value)
    if text is None:
        return None
    return {"true": True, "1": True, "false": False, "0": False}.get(text.lower())


def capacity_facts(
    logs: Sequence[LogFrames],
    metrics: pl.DataFrame | None,
    latencies: pl.DataFrame | None,
    windows: Sequence[Window],
) -> Capacity:
    """What the deployment had (KV blocks/tokens, memory, flags) and what the load needed."""
    config: dict[str, str] = {}
    for labels in latency.info_labels(metrics) if metrics is not None else []:
        for key, value in labels.items():
            if (clean := _clean(value)) is not None:
                config.setdefault(key, clean)
    conf = kind_frames(logs, "config")
    for key, value in conf.select("key", "value").iter_rows():
        if (clean := _clean(value)) is not None:
            config[key] = clean  # later lines win: the last start of the engine
    kv: dict[str, tuple[float, int | None]] = {}
    kv_frame = kind_frames(logs, "kv_capacity").filter(pl.col("value").is_not_null())
    for kind, value, context in kv_frame.select("kind", "value", "context_tokens").iter_rows():
        kv[kind] = (float(value), context)
    versions = [lf.vllm_version for lf in logs if lf.vllm_version]

    def kv_value(kind: str) -> float | None:
        return kv[kind][0] if kind in kv else None

    tokens = kv_value("kv_cache_tokens") or _as_float(config.get("kv_cache_size_tokens"))
    blocks = kv_value("gpu_blocks") or _as_float(config.get("num_gpu_blocks"))
    block_size = _as_int(config.get("block_size"))
    if tokens is None and blocks is not None and block_size:
        tokens = blocks * block_size
    if block_size is None and tokens and blocks and tokens % blocks == 0:
        block_size = int(tokens // blocks)  # V1 logs tokens and blocks but not the block size
    if blocks is None and tokens and block_size and tokens % block_size == 0:
        # V1 logs the KV cache in tokens only ("GPU KV cache size: N tokens"); with the block
        # size printed (non-default args, engine config) the block count follows.
        blocks = tokens / block_size
    context = kv["max_concurrency"][1] if "max_concurrency" in kv else None
    concurrency = kv_value("max_concurrency") or _as_float(config.get("kv_cache_max_concurrency"))
    running = [w.running_max for w in windows if w.running_max is not None]
    return Capacity(
        num_gpu_blocks=round(blocks) if blocks is not None else None,
        block_size=block_size,
        kv_cache_tokens=round(tokens) if tokens is not None else None,
        max_concurrency=concurrency,
        max_concurrency_context_tokens=kv["max_concurrency"][1]
        if "max_concurrency" in kv
        else None,
        available_kv_memory_gib=kv_value("available_kv_memory") or kv_value("memory_for_kv"),
        model_weights_gib=kv_value("model_weights"),
        gpu_memory_utilization=_as_float(config.get("gpu_memory_utilization"))
        or kv_value("gpu_memory_utilization"),
        max_num_seqs=_as_int(config.get("max_num_seqs")),
        max_num_batched_tokens=_as_int(config.get("max_num_batched_tokens")),
        tensor_parallel_size=_as_int(config.get("tensor_parallel_size")),
        pipeline_parallel_size=_as_int(config.get("pipeline_parallel_size")),
        scheduling_policy=_clean(config.get("scheduling_policy")),
        vllm_version=versions[-1] if versions else _clean(config.get("vllm_version")),
        model=_clean(config.get("served_model_name") or config.get("model")),
        gpu_memory_total_gib=kv_value("memory_total"),
        max_model_len=_as_int(config.get("max_model_len")),
        enable_prefix_caching=_as_bool(config.get("enable_prefix_caching")),
        mean_tokens_per_request=_mean_tokens(latencies, metrics),
        peak_running=max(running) if running else None,
    )


def _mean_tokens(latencies: pl.DataFrame | None, metrics: pl.DataFrame | None) -> float | None:
    """Mean prompt + output tokens per request: client rows first, else vLLM's histograms."""
    if latencies is not None:
        both = latencies.filter(
            pl.col("prompt_tokens").is_not_null() & pl.col("output_tokens").is_not_null()
        )
        if both.height:
            return float((both["prompt_tokens"] + both["output_tokens"]).mean())  # type: ignore[arg-type]
    if metrics is None:
        return None
    total = 0.0
    for name in ("request_prompt_tokens", "request_generation_tokens"):
        rows = metrics.filter((pl.col("metric") == name) & pl.col("sample").is_in(["sum", "count"]))
        if rows.is_empty():
            return None
        last = rows.filter(pl.col("timestamp") == pl.col("timestamp").max())
        sums = last.filter(pl.col("sample") == "sum")["value"].sum()
        counts = last.filter(pl.col("sample") == "count")["value"].sum()
        if not counts:
            return None
        total += float(sums) / float(counts)
    return total
