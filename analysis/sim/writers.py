"""Render a SimResult as the artefacts a real vLLM deployment leaves behind.

Every writer is importable from here, by output kind: the server log (`write_log`), `/metrics`
snapshots (`write_metrics`), the `vllm bench serve` result (`write_bench`) and the ground truth
(`write_truth`). This module owns `dumps`, the JSON form the `demo` command writes. All are
pure: they return strings, lines or JSON-ready dicts and never write a file.
"""

from __future__ import annotations

import json
from typing import Any

from preemptscope.analysis.sim.write_bench import render_bench_result
from preemptscope.analysis.sim.write_log import (
    ERAS,
    PROFILES,
    V0_STATS_INTERVAL,
    V0_WARNING_EVERY,
    V1_STATS_INTERVAL,
    Era,
    StatsRecord,
    prompt_token_ids,
    render_log,
    stats_records,
)
from preemptscope.analysis.sim.write_metrics import (
    E2E_BUCKETS,
    ITL_BUCKETS,
    PREEMPTION_BUCKETS,
    TTFT_BUCKETS,
    render_metrics_snapshots,
)
from preemptscope.analysis.sim.write_truth import (
    DEPLOYMENT_OVER_CAPACITY,
    KV_BLOCKED_OVER_CAPACITY,
    ground_truth,
)

__all__ = [
    "DEPLOYMENT_OVER_CAPACITY",
    "E2E_BUCKETS",
    "ERAS",
    "ITL_BUCKETS",
    "KV_BLOCKED_OVER_CAPACITY",
    "PREEMPTION_BUCKETS",
    "PROFILES",
    "TTFT_BUCKETS",
    "V0_STATS_INTERVAL",
    "V0_WARNING_EVERY",
    "V1_STATS_INTERVAL",
    "Era",
    "StatsRecord",
    "dumps",
    "ground_truth",
    "prompt_token_ids",
    "render_bench_result",
    "render_log",
    "render_metrics_snapshots",
    "stats_records",
]


def dumps(data: Any) -> str:
    """Stable, readable JSON for the written artefacts."""
    return json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"
