"""Hand-built frames for analyzer tests: every column typed as ingest/schema.py says."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from preemptscope.ingest.schema import (
    CONFIG,
    KV_CAPACITY,
    METRIC_SAMPLES,
    PREEMPTION_WARNING,
    REQUEST_LATENCIES,
    SCHEDULER_STATS,
    LogFrames,
)

T0 = datetime(2026, 11, 20, 10, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _frame(schema: pl.Schema, rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    columns = {name: [row.get(name) for row in rows] for name in schema.names()}
    return pl.DataFrame(columns, schema=schema)


def stat(
    t: float,
    *,
    running: int,
    waiting: int,
    kv: float,
    preemptions: int | None = None,
    era: str = "v1",
    gen: float | None = None,
    engine: int | None = 0,
    source: str = "vllm.log",
) -> dict[str, Any]:
    active = running > 0 or waiting > 0
    return {
        "source": source,
        "line": int(t) + 1,
        "deployment": "d",
        "timestamp": at(t),
        "level": "INFO",
        "era": era,
        "engine": engine if era == "v1" else None,
        "prompt_throughput": 100.0 if active else 0.0,
        "generation_throughput": gen if gen is not None else (50.0 * running if active else 0.0),
        "running": running,
        "waiting": waiting,
        "swapped": 0 if era == "v0" else None,
        "preemptions": preemptions,
        "kv_device": "GPU",
        "gpu_kv_cache_usage": kv,
    }


def warning(t: float | None, cumulative: int | None, source: str = "vllm.log") -> dict[str, Any]:
    return {
        "source": source,
        "line": int(t) + 1 if t is not None else 1,  # file order follows time, as stat() does
        "deployment": "d",
        "timestamp": at(t) if t is not None else None,
        "level": "WARNING",
        "request_id": "cmpl-1",
        "mode": "RECOMPUTE",
        "cumulative": cumulative,
    }


def logframes(
    stats: Sequence[dict[str, Any]] = (),
    warnings: Sequence[dict[str, Any]] = (),
    config: dict[str, str] | None = None,
    kv: Sequence[tuple[str, float, str, int | None]] = (),
    era: str | None = "v1",
    version: str | None = None,
    source: str = "vllm.log",
) -> LogFrames:
    lf = LogFrames(source=source, deployment="d", log_era=era, vllm_version=version)
    lf.frames["scheduler_stats"] = _frame(SCHEDULER_STATS, stats)
    lf.frames["preemption_warning"] = _frame(PREEMPTION_WARNING, warnings)
    lf.frames["config"] = _frame(
        CONFIG,
        [
            {"source": "vllm.log", "line": 1, "key": k, "value": v, "origin": "non_default_args"}
            for k, v in (config or {}).items()
        ],
    )
    lf.frames["kv_capacity"] = _frame(
        KV_CAPACITY,
        [
            {"source": "vllm.log", "line": 1, "kind": k, "value": v, "unit": u, "context_tokens": c}
            for k, v, u, c in kv
        ],
    )
    return lf


def sample(
    t: float,
    metric: str,
    value: float,
    *,
    kind: str = "gauge",
    sample_kind: str = "value",
    le: float | None = None,
    labels: dict[str, str] | None = None,
    engine: str = "0",
) -> dict[str, Any]:
    return {
        "timestamp": at(t),
        "source": "metrics/",
        "deployment": "d",
        "metric": metric,
        "raw_name": f"vllm:{metric}",
        "type": kind,
        "sample": sample_kind,
        "le": le,
        "model_name": "m",
        "engine": engine,
        "labels": json.dumps(labels or {}, sort_keys=True),
        "value": value,
    }


E2E_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, float("inf"))


def histogram(
    t: float, metric: str, observations: Sequence[float], buckets: Sequence[float] = E2E_BUCKETS
) -> list[dict[str, Any]]:
    """Cumulative histogram samples of all observations so far, at time t."""
    rows = [
        sample(
            t,
            metric,
            float(sum(1 for o in observations if o <= b)),
            kind="histogram",
            sample_kind="bucket",
            le=b,
        )
        for b in buckets
    ]
    rows.append(sample(t, metric, float(sum(observations)), kind="histogram", sample_kind="sum"))
    rows.append(sample(t, metric, float(len(observations)), kind="histogram", sample_kind="count"))
    return rows


def metrics_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    return _frame(METRIC_SAMPLES, rows)


def request(
    t: float, e2e: float, *, ttft: float | None = None, prompt: int = 500, output: int = 200
) -> dict[str, Any]:
    return {
        "source": "bench.json",
        "deployment": "d",
        "request_id": f"r{t}",
        "start": at(t),
        "e2e": e2e,
        "ttft": ttft,
        "tpot": None,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "success": True,
        "origin": "vllm_bench",
    }


def latencies_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    return _frame(REQUEST_LATENCIES, rows)


def setting(
    t: float | None,
    key: str,
    value: str,
    *,
    line: int,
    origin: str = "non_default_args",
    source: str = "vllm.log",
) -> dict[str, Any]:
    """One CONFIG row: a setting printed on a startup line."""
    return {
        "source": source,
        "line": line,
        "deployment": "d",
        "timestamp": at(t) if t is not None else None,
        "level": "INFO",
        "key": key,
        "value": value,
        "origin": origin,
    }


def config_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    return _frame(CONFIG, rows)
