"""Small builders for hand-made /metrics snapshots used across the source tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

import polars as pl
from preemptscope.ingest.metrics import parse_metrics_text

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
MODEL = "m"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def histogram_lines(
    name: str,
    cumulative: Mapping[str, float],
    total: float,
    count: float,
    *,
    engine: str = "0",
    created: float | None = None,
) -> list[str]:
    labels = f'engine="{engine}",model_name="{MODEL}"'
    lines = [f"# TYPE vllm:{name} histogram"]
    lines += [f'vllm:{name}_bucket{{{labels},le="{le}"}} {n}' for le, n in cumulative.items()]
    lines += [f"vllm:{name}_sum{{{labels}}} {total}", f"vllm:{name}_count{{{labels}}} {count}"]
    if created is not None:
        lines += [f"# TYPE vllm:{name}_created gauge", f"vllm:{name}_created{{{labels}}} {created}"]
    return lines


def counter_lines(
    name: str, value: float, *, engine: str = "0", created: float | None = None
) -> list[str]:
    labels = f'engine="{engine}",model_name="{MODEL}"'
    lines = [f"# TYPE vllm:{name}_total counter", f"vllm:{name}_total{{{labels}}} {value}"]
    if created is not None:
        lines += [f"# TYPE vllm:{name}_created gauge", f"vllm:{name}_created{{{labels}}} {created}"]
    return lines


def gauge_lines(name: str, values: Mapping[str, float], *, extra: str = "") -> list[str]:
    lines = [f"# TYPE vllm:{name} gauge"]
    for engine, value in values.items():
        lines.append(f'vllm:{name}{{engine="{engine}",model_name="{MODEL}"{extra}}} {value}')
    return lines


def snapshots(texts: Sequence[tuple[float, Sequence[str]]], source: str = "s") -> pl.DataFrame:
    """Parse (seconds after T0, lines) snapshots into one METRIC_SAMPLES frame."""
    frames = [
        parse_metrics_text("\n".join(lines) + "\n", timestamp=at(t), source=source, deployment="d")
        for t, lines in texts
    ]
    return pl.concat(frames)
