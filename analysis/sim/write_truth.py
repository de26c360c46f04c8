"""The ground truth of a simulated run: every preemption and each window's over-capacity truth.

This module owns the truth's definitions (when a window and a deployment are over capacity).
Pure: it returns a JSON-ready dict and never writes a file; the analysis never reads it (only
tests and bench/ compare the analysis against it).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from preemptscope.analysis.sim.engine import SimResult
from preemptscope.analysis.sim.write_log import V0_WARNING_EVERY

from preemptscope.errors import ConfigError

# A window is over capacity when the scheduler preempted in it, or when waiting requests were
# refused admission for lack of KV blocks during at least this fraction of its steps.
KV_BLOCKED_OVER_CAPACITY = 0.25
# A deployment is over capacity when at least this fraction of its busy windows is.
DEPLOYMENT_OVER_CAPACITY = 0.10


def ground_truth(
    result: SimResult, *, start: datetime, window: float = 60.0, label: str = ""
) -> dict[str, Any]:
    """Everything the simulator knows: each preemption, and per-window over-capacity truth."""
    if window <= 0:
        raise ConfigError(f"window must be > 0, got {window}")
    steps = result.steps
    wl = result.workload
    ids = wl.ids()
    origin = start.astimezone(UTC)

    def iso(t: float) -> str:
        return (origin + timedelta(seconds=t)).isoformat()

    preemptions = [
        {
            "time": iso(t),
            "t": round(t, 6),
            "request_id": ids[r],
            "cumulative": k + 1,
        }
        for k, (t, r) in enumerate(
            zip(result.preempt_time.tolist(), result.preempt_request.tolist(), strict=True)
        )
    ]
    n_windows = max(1, math.ceil(result.end_time / window))
    edges = np.arange(n_windows + 1, dtype=np.float64) * window
    pre_w = np.histogram(result.preempt_time, bins=edges)[0]
    step_w = np.clip(np.searchsorted(edges, steps.end, side="right") - 1, 0, n_windows - 1)
    done = result.finished_mask
    fin_w = np.clip(np.searchsorted(edges, result.finish[done], side="right") - 1, 0, n_windows - 1)
    e2e_all = result.finish[done] - wl.arrival[done]
    usage = steps.used_blocks / result.capacity.num_gpu_blocks
    windows: list[dict[str, Any]] = []
    for w in range(n_windows):
        in_w = step_w == w
        n_steps = int(in_w.sum())
        blocked = float(steps.kv_blocked[in_w].mean()) if n_steps else 0.0
        busy = n_steps > 0 and int(steps.scheduled_tokens[in_w].sum()) > 0
        e2e = e2e_all[fin_w == w]
        over = busy and (int(pre_w[w]) > 0 or blocked >= KV_BLOCKED_OVER_CAPACITY)
        windows.append(
            {
                "start": iso(float(edges[w])),
                "end": iso(float(edges[w + 1])),
                "preemptions": int(pre_w[w]),
                "kv_blocked_fraction": round(blocked, 4),
                "kv_usage_max": round(float(usage[in_w].max()), 4) if n_steps else 0.0,
                "running_max": int(steps.running[in_w].max()) if n_steps else 0,
                "waiting_max": int(steps.waiting[in_w].max()) if n_steps else 0,
                "finished": len(e2e),
                "e2e_mean": float(e2e.mean()) if len(e2e) else None,
                "e2e_p99": float(np.percentile(e2e, 99)) if len(e2e) else None,
                "busy": busy,
                "over_capacity": over,
            }
        )
    busy_windows = [w for w in windows if w["busy"]]
    over_windows = sum(1 for w in windows if w["over_capacity"])
    fraction = over_windows / len(busy_windows) if busy_windows else 0.0
    cfg, cap = result.config, result.capacity
    return {
        "schema": "preemptscope-sim-ground-truth/1",
        "label": label,
        "start": iso(0.0),
        "end": iso(result.end_time),
        "window_seconds": window,
        "config": {
            "model": cfg.model.name,
            "gpu": cfg.gpu.name,
            **{k: v for k, v in cfg.non_default_args().items() if k != "model"},
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "scheduling_policy": cfg.scheduling_policy,
        },
        "capacity": {
            "num_gpu_blocks": cap.num_gpu_blocks,
            "block_size": cap.block_size,
            "kv_cache_tokens": cap.kv_cache_tokens,
            "kv_memory_gib": round(cap.kv_memory_gib, 4),
            "max_concurrency": round(cap.max_concurrency, 4),
        },
        "workload": wl.description,
        "totals": {
            "requests": len(wl),
            "finished": int(done.sum()),
            "preemptions": result.total_preemptions,
            "preempted_requests": int(np.count_nonzero(result.num_preemptions)),
            "max_preemptions_per_request": int(result.num_preemptions.max()) if len(wl) else 0,
            "v0_warning_lines": (result.total_preemptions + V0_WARNING_EVERY - 1)
            // V0_WARNING_EVERY,
            "output_tokens": int(result.steps.generation_tokens.sum()),
            "clamped_requests": result.clamped_requests,
        },
        "over_capacity": fraction >= DEPLOYMENT_OVER_CAPACITY,
        "over_capacity_window_fraction": round(fraction, 4),
        "definitions": {
            "window_over_capacity": "preemptions > 0, or waiting requests refused KV blocks in "
            f">= {KV_BLOCKED_OVER_CAPACITY:.0%} of the window's steps (busy windows only)",
            "deployment_over_capacity": f">= {DEPLOYMENT_OVER_CAPACITY:.0%} of busy windows "
            "over capacity",
        },
        "preemptions": preemptions,
        "windows": windows,
    }
