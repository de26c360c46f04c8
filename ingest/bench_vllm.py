"""`vllm bench serve --save-result [--save-detailed]` JSON into client rows and whole-run figures.

Several results may be appended to one file (`--append-result`). Per-request arrays exist only
with --save-detailed. `start_times` are `time.perf_counter()` readings, so they are anchored at
`date` (the local time the result was saved, read as UTC) minus `duration`; `ingest/bench.py`
re-anchors them at a `start` you give. This module owns the format's keys and reading; it never
opens a file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl
from preemptscope.ingest.bench_rows import (
    BenchRun,
    RunLatency,
    _after,
    _count,
    _number,
    _priority,
    _Rows,
)

from preemptscope.errors import InputError

_VLLM_KEYS = {
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "mean_ttft_ms",
    "median_ttft_ms",
    "request_throughput",
    "completed",
}


def _is_vllm(document: Any) -> bool:
    return isinstance(document, Mapping) and bool(_VLLM_KEYS & set(document))


def _vllm_anchor(result: Mapping[str, Any], path: str, notes: list[str]) -> datetime | None:
    date, duration = result.get("date"), _number(result.get("duration"))
    if not isinstance(date, str):
        return None
    # Saved right after the run, with the client's naive local clock.
    saved = None
    for layout in ("%Y%m%d-%H%M%S", "%Y-%m-%d %H:%M:%S"):
        try:
            saved = datetime.strptime(date, layout).replace(tzinfo=UTC)
            break
        except ValueError:
            continue
    if saved is None:
        raise InputError(path, f"vllm bench `date` {date!r} is not YYYYMMDD-HHMMSS")
    note = "vllm bench `date` is the client's local time; read as UTC (give a start to re-anchor)"
    if note not in notes:
        notes.append(note)
    return _after(saved, -(duration or 0.0))


def _vllm_stats(result: Mapping[str, Any]) -> dict[str, RunLatency]:
    names = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
    count = _count(result.get("completed"))
    stats: dict[str, RunLatency] = {}
    for key, metric in names.items():
        mean = _number(result.get(f"mean_{key}_ms"))
        if mean is None:
            continue

        def ms(name: str, key: str = key) -> float | None:
            value = _number(result.get(f"{name}_{key}_ms"))
            return value / 1000 if value is not None else None

        median = ms("median")
        stats[metric] = RunLatency(
            metric,
            count or 0,
            mean / 1000,
            median if median is not None else ms("p50"),
            ms("p90"),
            ms("p99"),
        )
    return stats


def _array(result: Mapping[str, Any], key: str, n: int, path: str) -> list[Any] | None:
    values = result.get(key)
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != n:
        size = len(values) if isinstance(values, list) else type(values).__name__
        raise InputError(path, f"vllm bench `{key}` has {size} entries, expected {n}")
    return values


def _read_vllm(
    results: Sequence[Mapping[str, Any]], path: str, deployment: str, notes: list[str]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    rows = _Rows(path, deployment, "vllm_bench")
    runs: list[BenchRun] = []
    for number, result in enumerate(results):
        anchor = _vllm_anchor(result, path, notes)
        duration = _number(result.get("duration"))
        label = str(result.get("label") or result.get("request_rate") or number)
        end = _after(anchor, duration)
        runs.append(
            BenchRun(
                label,
                anchor,
                end,
                _count(result.get("completed")),
                _vllm_stats(result),
                duration_s=duration,
                failed=_count(result.get("failed")),
                request_throughput=_number(result.get("request_throughput")),
                # benchmark_serving.py of 0.6.x spelled the key with a colon.
                goodput=_number(result.get("request_goodput", result.get("request_goodput:"))),
                input_tokens=_count(result.get("total_input_tokens")),
                output_tokens=_count(result.get("total_output_tokens")),
                max_concurrency=_count(result.get("max_concurrency")),
                request_rate=_number(result.get("request_rate")),
            )
        )
        lengths = [
            len(result[k])
            for k in ("ttfts", "latencies", "e2els")
            if isinstance(result.get(k), list)
        ]
        if not lengths:
            continue
        n = lengths[0]
        ttfts = _array(result, "ttfts", n, path)
        latencies = _array(result, "latencies", n, path) or _array(result, "e2els", n, path)
        itls = _array(result, "itls", n, path)
        starts = _array(result, "start_times", n, path)
        inputs = _array(result, "input_lens", n, path)
        outputs = _array(result, "output_lens", n, path)
        errors = _array(result, "errors", n, path)
        priorities = _array(result, "priorities", n, path)
        if starts is None:
            note = (
                "vllm bench result without start_times (older vLLM, or no --save-detailed): "
                "its requests cannot be placed in time windows"
            )
            if note not in notes:
                notes.append(note)
        offsets = [_number(s) for s in starts] if starts is not None else None
        first = min((o for o in offsets if o is not None), default=None) if offsets else None
        for i in range(n):
            ttft = _number(ttfts[i]) if ttfts else None
            e2e = _number(latencies[i]) if latencies else None
            if e2e is None and ttft is not None and itls is not None and isinstance(itls[i], list):
                e2e = ttft + sum(_number(x) or 0.0 for x in itls[i])
            moment = None
            offset = offsets[i] if offsets is not None else None
            if anchor is not None and first is not None and offset is not None:
                moment = _after(anchor, offset - first)
            failed = bool(errors[i]) if errors is not None else not (e2e or ttft)
            rows.add(
                request_id=f"{label}:{i}" if len(results) > 1 else str(i),
                start=moment,
                e2e=None if failed else e2e,
                ttft=None if failed else ttft,
                prompt_tokens=_count(inputs[i]) if inputs else None,
                output_tokens=_count(outputs[i]) if outputs else None,
                success=not failed,
                priority=_priority(priorities[i], (path, 0)) if priorities else None,
            )
    return rows.frame(), runs
