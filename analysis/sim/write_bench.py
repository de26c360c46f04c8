"""The `vllm bench serve` result JSON of a simulated run's client.

This module owns the bench result's fields (summary figures and per-request lists). Pure: it
returns a JSON-ready dict and never writes a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from preemptscope.analysis.sim.engine import SimResult
from preemptscope.analysis.sim.workload import FloatArray


def _ms_stats(name: str, values_s: FloatArray, percentiles: Sequence[float]) -> dict[str, float]:
    ms = values_s * 1000.0 if len(values_s) else np.zeros(1)
    stats = {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
    }
    for p in percentiles:
        label = f"{p:g}"
        stats[f"p{label}_{name}_ms"] = float(np.percentile(ms, p))
    return stats


def render_bench_result(
    result: SimResult,
    *,
    start: datetime,
    model_id: str | None = None,
    percentiles: Sequence[float] = (50, 90, 99),
) -> dict[str, Any]:
    """A `vllm bench serve --save-result --save-detailed` JSON of the simulated client.

    `start_times` are Unix epoch seconds (when each request was sent). Requests the simulation
    did not finish are reported as failed, with 0 output tokens, as the benchmark does.
    """
    wl = result.workload
    n = len(wl)
    epoch0 = start.timestamp()
    done = result.finished_mask
    arrived = wl.arrival <= result.end_time
    rows = np.flatnonzero(arrived)
    e2e = np.where(done, result.finish - wl.arrival, 0.0)
    ttft = np.where(np.isnan(result.first_token), 0.0, result.first_token - wl.arrival)
    out_lens = np.where(done, result.output_len, 0)
    itl_req, _, itl_gap = result.itls()
    order = np.argsort(itl_req, kind="stable")
    split = np.searchsorted(itl_req[order], np.arange(n + 1))
    gaps_sorted = itl_gap[order]
    itls = [gaps_sorted[split[i] : split[i + 1]].tolist() if done[i] else [] for i in rows]
    tpot = np.array(
        [(e2e[i] - ttft[i]) / (out_lens[i] - 1) for i in rows if done[i] and out_lens[i] > 1],
        dtype=np.float64,
    )
    completed = int(done[rows].sum())
    t_first = float(wl.arrival[rows[0]]) if len(rows) else 0.0
    t_last = float(np.nanmax(result.finish)) if completed else t_first
    duration = max(t_last - t_first, 1e-9)
    total_out = int(out_lens[rows].sum())
    total_in = int(result.prompt_len[rows][done[rows]].sum())
    desc = wl.description
    schedule = desc.get("rate_schedule") or [[0.0, float("inf")]]
    # vllm bench stamps `date` when the run ends (client local time; we write UTC).
    finished_at = start.astimezone(UTC) + timedelta(seconds=t_first + duration)
    body: dict[str, Any] = {
        "date": f"{finished_at:%Y%m%d-%H%M%S}",
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": model_id or result.config.model.name,
        "tokenizer_id": result.config.model.name,
        "num_prompts": len(rows),
        "request_rate": float(schedule[0][1]) if len(schedule) == 1 else "schedule",
        "burstiness": float(desc.get("burstiness", 1.0)),
        "max_concurrency": None,
        "duration": duration,
        "completed": completed,
        "failed": len(rows) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "max_concurrent_requests": int(result.steps.running.max()) if len(result.steps) else 0,
        "percentile_metrics": "ttft,tpot,itl,e2el",
        "metric_percentiles": ",".join(f"{p:g}" for p in percentiles),
    }
    body.update(_ms_stats("ttft", ttft[rows][done[rows]], percentiles))
    body.update(_ms_stats("tpot", tpot, percentiles))
    body.update(_ms_stats("itl", itl_gap, percentiles))
    body.update(_ms_stats("e2el", e2e[rows][done[rows]], percentiles))
    body.update(
        {
            "input_lens": result.prompt_len[rows].tolist(),
            "output_lens": out_lens[rows].tolist(),
            "ttfts": ttft[rows].tolist(),
            "itls": itls,
            "latencies": e2e[rows].tolist(),
            "start_times": (epoch0 + wl.arrival[rows]).tolist(),
            "generated_texts": ["" for _ in rows],
            "errors": [
                "" if done[i] else "simulation ended before the request finished" for i in rows
            ],
        }
    )
    return body
