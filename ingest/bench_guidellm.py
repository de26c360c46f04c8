"""GuideLLM `benchmarks.json` (or .yaml) into client rows and whole-run figures.

Per-request stats are under benchmarks[].requests {successful, incomplete, errored}, with Unix
timestamps. GuideLLM keeps only a sample of requests by default (`--request-samples`); its
whole-run figures are in `runs`. Its `inter_token_latency_ms` is vLLM's TPOT (first token
excluded). This module owns the format's fields and reading; it never opens a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl
from preemptscope.ingest.bench_rows import BenchRun, RunLatency, _count, _number, _Rows, _unix

from preemptscope.errors import InputError


def _get(item: Mapping[str, Any], *paths: str) -> Any:
    """The first present value among dotted paths."""
    for dotted in paths:
        value: Any = item
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            return value
    return None


def _guidellm_stats(benchmark: Mapping[str, Any]) -> dict[str, RunLatency]:
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, Mapping):
        return {}
    wanted: dict[str, tuple[str, float]] = {
        "request_latency": ("e2e", 1.0),
        "time_to_first_token_ms": ("ttft", 1000.0),
        "inter_token_latency_ms": ("tpot", 1000.0),
    }
    stats: dict[str, RunLatency] = {}
    for key, (metric, scale) in wanted.items():
        summary = _get(metrics, f"{key}.successful")
        if not isinstance(summary, Mapping) or _number(summary.get("mean")) is None:
            continue
        mean = float(summary["mean"]) / scale

        def pick(
            name: str, summary: Mapping[str, Any] = summary, scale: float = scale
        ) -> float | None:
            value = _number(_get(summary, f"percentiles.{name}"))
            return value / scale if value is not None else None

        p50 = pick("p50")
        if p50 is None and _number(summary.get("median")) is not None:
            p50 = float(summary["median"]) / scale
        count = _count(summary.get("count")) or 0
        stats[metric] = RunLatency(metric, count, mean, p50, pick("p90"), pick("p99"))
    return stats


def _read_guidellm(
    report: Mapping[str, Any], path: str, deployment: str, notes: list[str]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise InputError(path, "GuideLLM report without a `benchmarks` list")
    rows = _Rows(path, deployment, "guidellm")
    runs: list[BenchRun] = []
    for number, benchmark in enumerate(benchmarks):
        if not isinstance(benchmark, Mapping):
            raise InputError(path, f"GuideLLM benchmarks[{number}] is not an object")
        label = str(
            _get(benchmark, "id_", "id", "config.strategy.type_", "args.strategy.type_") or number
        )
        start = _number(
            _get(benchmark, "start_time", "run_stats.start_time", "scheduler_state.start_time")
        )
        end = _number(_get(benchmark, "end_time", "run_stats.end_time", "scheduler_state.end_time"))
        requests = benchmark.get("requests")
        total = None
        if isinstance(requests, Mapping):
            total = sum(len(v) for v in requests.values() if isinstance(v, list))
            for status in ("successful", "incomplete", "errored"):
                for position, item in enumerate(requests.get(status) or []):
                    if not isinstance(item, Mapping):
                        raise InputError(
                            path, f"GuideLLM requests.{status}[{position}] is not an object"
                        )
                    _guidellm_row(rows, item, status, f"{label}:{status}:{position}")
        successful = requests.get("successful") if isinstance(requests, Mapping) else None
        runs.append(
            BenchRun(
                label=label,
                start=_unix(start) if start else None,
                end=_unix(end) if end else None,
                requests=len(successful) if isinstance(successful, list) else total,
                stats=_guidellm_stats(benchmark),
                duration_s=end - start if start and end and end >= start else None,
                request_throughput=_number(
                    _get(benchmark, "metrics.requests_per_second.successful.mean")
                ),
            )
        )
    frame = rows.frame()
    if not frame.is_empty():
        notes.append("GuideLLM stores a sample of requests unless run with --request-samples all")
    return frame, runs


def _guidellm_row(rows: _Rows, item: Mapping[str, Any], status: str, fallback_id: str) -> None:
    start = _number(_get(item, "request_start_time", "info.timings.request_start", "start_time"))
    end = _number(_get(item, "request_end_time", "info.timings.request_end", "end_time"))
    e2e = _number(item.get("request_latency"))
    if e2e is None and start is not None and end is not None:
        e2e = end - start
    ttft_ms = _number(item.get("time_to_first_token_ms"))
    if ttft_ms is None:
        first = _number(_get(item, "info.timings.first_token_iteration", "first_token_time"))
        ttft_ms = (first - start) * 1000 if first is not None and start is not None else None
    itl_ms = _number(item.get("inter_token_latency_ms"))
    success = status == "successful"
    rows.add(
        request_id=str(item.get("request_id") or fallback_id),
        start=_unix(start),
        e2e=e2e if success else None,
        ttft=ttft_ms / 1000 if ttft_ms is not None and success else None,
        tpot=itl_ms / 1000 if itl_ms is not None and success else None,
        prompt_tokens=_count(_get(item, "prompt_tokens", "input_metrics.total_tokens")),
        output_tokens=_count(_get(item, "output_tokens", "output_metrics.total_tokens")),
        success=success,
    )
