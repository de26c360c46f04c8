"""What ingest hands the analysis: a description of each source and one deployment's frames.

This module owns two containers, `SourceSummary` and `DeploymentInputs`; it reads nothing and
decides nothing. The analysis re-exports both (`analysis.report`, `analysis.analyze`), where
the README and the docs show them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import polars as pl
from preemptscope.ingest.bench import BenchRun
from preemptscope.ingest.schema import LogFrames

if TYPE_CHECKING:
    # Type only: `reduced` holds windows the analysis' own code computed (a Prometheus did the
    # sums); ingest never builds one, so it never imports the analysis at run time.
    from preemptscope.analysis.windows import MetricWindows

__all__ = ["DeploymentInputs", "SourceSummary"]


@dataclass(frozen=True)
class SourceSummary:
    # One input as read: its kind, size, what it held, caveats. No docstring: the API schema
    # (OpenAPI) would publish it as the model's description.
    path: str
    kind: Literal["log", "metrics", "bench", "requests"]
    deployment: str
    lines: int | None = None
    unrecognized_lines: int | None = None
    records: dict[str, int] = field(default_factory=dict)
    vllm_version: str | None = None
    log_era: str | None = None
    timezone: str | None = None
    notes: list[str] = field(default_factory=list)  # caveats about this source, for people


@dataclass
class DeploymentInputs:
    """Everything known about one deployment: its logs, /metrics samples and client latencies."""

    name: str
    logs: list[LogFrames] = field(default_factory=list)
    metrics: pl.DataFrame | None = None  # METRIC_SAMPLES
    latencies: pl.DataFrame | None = None  # REQUEST_LATENCIES
    sources: list[SourceSummary] = field(default_factory=list)
    # Client runs' whole-run figures, with the file they came from (summary-only results too).
    runs: list[tuple[str, BenchRun]] = field(default_factory=list)
    group: str | None = None  # the user's NAME when this is one server of several under it
    # /metrics windows a Prometheus already reduced (preemptscope/fleet.py); `metrics` then
    # holds only the samples read raw (the range's edges, restarts, busy windows).
    reduced: MetricWindows | None = None
