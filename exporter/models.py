"""Response models of the JSON API, for the OpenAPI schema (`/openapi.json`).

The handlers serialise the report themselves (bodies are cached per snapshot); these models
describe what they send, and a test validates real responses against them so the two cannot
drift. The report parts are the report's own dataclasses (analysis/report.py).
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import datetime
from typing import Any, Literal

from preemptscope.analysis.report import DeploymentReport, SourceSummary
from pydantic import BaseModel, ConfigDict, create_model

VerdictState = Literal["ok", "at_risk", "over_capacity", "insufficient_data"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Totals(_Strict):
    """Running totals since the state directory was created (they survive restarts)."""

    lines: int
    unrecognized_lines: int
    # Only sources that exist for the deployment have a key (no count is no key, never 0).
    preemptions: dict[str, int]
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


def _detail_model() -> type[BaseModel]:
    """One deployment of `preemptscope report --json` (docs/report.md) with its sources in full,
    `live`, `generated_at` and `parameters`. Built from DeploymentReport's own fields, so a
    field added to the report is in the schema at once."""
    hints = typing.get_type_hints(DeploymentReport)
    fields: dict[str, Any] = {
        f.name: (hints[f.name], ...) for f in dataclasses.fields(DeploymentReport)
    }
    fields["sources"] = (list[SourceSummary], ...)  # the summaries, not the report's paths
    fields["live"] = (LiveStatus, ...)
    fields["generated_at"] = (datetime | None, ...)
    fields["parameters"] = (dict[str, Any], ...)
    model: type[BaseModel] = create_model(
        "DeploymentDetail",
        __config__=ConfigDict(extra="forbid"),
        __doc__=_detail_model.__doc__,
        **fields,
    )
    return model


DeploymentDetail = _detail_model()
