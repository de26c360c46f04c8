"""Response models of the JSON API, for the OpenAPI schema (`/openapi.json`).

The handlers serialise the report themselves (bodies are cached per snapshot); these models
describe what they send, and a test validates real responses against them so the two cannot
drift. The report parts reuse the report's own dataclasses (analysis/report.py).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from preemptscope.analysis.report import (
    Advice,
    Capacity,
    ClientRun,
    Correlation,
    Episode,
    Event,
    Preemptions,
    SourceSummary,
    Verdict,
    Window,
)
from pydantic import BaseModel, ConfigDict

VerdictState = Literal["ok", "at_risk", "over_capacity", "insufficient_data"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Totals(_Strict):
    """Running totals since the state directory was created (they survive restarts)."""

    lines: int
    unrecognized_lines: int
    # Only sources that exist for the deployment have a key (no count is no key, never 0).
    preemptions: dict[str, int]
    sources_known: bool
    rotations: dict[str, int]
    gaps: int
    last_event: dict[str, float]


class ScrapeStatus(_Strict):
    target: str
    up: bool
    duration_seconds: float | None
    last_error: str | None
    scrapes: int
    failures: int


class LiveStatus(_Strict):
    over_capacity: bool
    model_name: str | None
    kv_cache_usage: float | None
    requests_waiting: float | None
    latest_window_start: datetime | None
    totals: Totals | None
    scrapes: list[ScrapeStatus]


class DeploymentSummary(LiveStatus):
    name: str
    verdict: VerdictState
    problem: str
    preemptions_in_history: int | None
    episodes: int


class DeploymentList(_Strict):
    generated_at: datetime | None
    deployments: list[DeploymentSummary]


class DeploymentDetail(_Strict):
    """One deployment of `preemptscope report --json` (docs/report.md), its sources in full,
    and `live`."""

    name: str
    verdict: Verdict
    preemptions: Preemptions
    capacity: Capacity
    advice: list[Advice]
    windows: list[Window]
    episodes: list[Episode]
    correlation: Correlation
    events: list[Event]
    client_runs: list[ClientRun]
    group: str | None
    sources: list[SourceSummary]
    live: LiveStatus
    generated_at: datetime | None
    parameters: dict[str, Any]
