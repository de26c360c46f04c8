"""`/metrics` text of a simulated run, as Prometheus would scrape it (vLLM V1 names).

This module owns the snapshots: gauges, cumulative counters and histograms on vLLM's default
buckets. Pure: it returns text and never writes a file or opens a socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from preemptscope.analysis.sim.engine import SimResult
from preemptscope.analysis.sim.workload import FloatArray
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from preemptscope.errors import ConfigError

# vLLM's default histogram buckets (vllm/v1/metrics/buckets.py).
E2E_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480,
               960, 1920, 7680)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5,
                7.5, 10, 20, 40, 80, 160, 640, 2560)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5,
               10, 20, 40, 80)  # fmt: skip
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def _cumulative_histograms(
    obs_time: FloatArray, values: FloatArray, snap_times: FloatArray, buckets: Sequence[float]
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], FloatArray]:
    """Per snapshot: cumulative bucket counts (le, +Inf last) and the running sum."""
    k = len(snap_times)
    bounds = np.asarray(buckets, dtype=np.float64)
    counts = np.zeros((k, len(bounds) + 1), dtype=np.int64)
    sums = np.zeros(k, dtype=np.float64)
    if len(obs_time):
        snap = np.searchsorted(snap_times, obs_time, side="left")  # first snapshot seeing it
        keep = snap < k
        bucket = np.searchsorted(bounds, values[keep], side="left")  # le semantics
        np.add.at(counts, (snap[keep], bucket), 1)
        np.add.at(sums, snap[keep], values[keep])
    per_le = np.cumsum(np.cumsum(counts, axis=0), axis=1)
    return per_le, np.cumsum(sums)


class _Snapshot:
    """A prometheus_client collector yielding one snapshot's families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def render_metrics_snapshots(
    result: SimResult,
    *,
    start: datetime,
    interval: float = 15.0,
    model_name: str | None = None,
) -> list[tuple[datetime, str]]:
    """`/metrics` text as Prometheus would scrape it every `interval` s (vLLM V1 names).

    Counters are cumulative and monotonic; histograms use vLLM's default buckets.
    """
    if interval <= 0:
        raise ConfigError(f"interval must be > 0, got {interval}")
    steps = result.steps
    name = model_name or result.config.model.name
    end = max(result.end_time, interval)
    snap_times = np.arange(interval, end + interval, interval, dtype=np.float64)
    k = len(snap_times)
    step_idx = np.searchsorted(steps.end, snap_times, side="right") - 1

    def cumulative(obs_time: FloatArray, weights: FloatArray | None = None) -> FloatArray:
        snap = np.searchsorted(snap_times, obs_time, side="left")
        keep = snap < k
        acc = np.zeros(k, dtype=np.float64)
        np.add.at(acc, snap[keep], 1.0 if weights is None else weights[keep])
        out: FloatArray = np.cumsum(acc)
        return out

    wl = result.workload
    done = result.finished_mask
    fin_t = result.finish[done]
    e2e = fin_t - wl.arrival[done]
    queue = result.first_scheduled[done] - wl.arrival[done]
    has_first = ~np.isnan(result.first_token)
    ttft_t = result.first_token[has_first]
    ttft = ttft_t - wl.arrival[has_first]
    _, itl_t, itl = result.itls()
    pre_per_req = result.num_preemptions[done].astype(np.float64)

    hist = {
        "e2e": _cumulative_histograms(fin_t, e2e, snap_times, E2E_BUCKETS),
        "queue": _cumulative_histograms(fin_t, queue, snap_times, E2E_BUCKETS),
        "ttft": _cumulative_histograms(ttft_t, ttft, snap_times, TTFT_BUCKETS),
        "itl": _cumulative_histograms(itl_t, itl, snap_times, ITL_BUCKETS),
        "npre": _cumulative_histograms(fin_t, pre_per_req, snap_times, PREEMPTION_BUCKETS),
    }
    preempt_total = cumulative(result.preempt_time)
    success_total = cumulative(fin_t)
    prompt_total = cumulative(steps.end, steps.first_token_prompt_tokens.astype(np.float64))
    gen_total = cumulative(steps.end, steps.generation_tokens.astype(np.float64))
    cfg, cap = result.config, result.capacity
    labels = ["model_name", "engine"]
    lv = [name, "0"]

    out: list[tuple[datetime, str]] = []
    for s in range(k):
        i = int(step_idx[s])
        running = int(steps.running[i]) if i >= 0 else 0
        waiting = int(steps.waiting[i]) if i >= 0 else 0
        usage = float(steps.used_blocks[i]) / cap.num_gpu_blocks if i >= 0 else 0.0
        fams: list[Metric] = []

        def gauge(metric: str, doc: str, value: float, fams: list[Metric] = fams) -> None:
            g = GaugeMetricFamily(metric, doc, labels=labels)
            g.add_metric(lv, value)
            fams.append(g)

        def counter(metric: str, doc: str, value: float, fams: list[Metric] = fams) -> None:
            c = CounterMetricFamily(metric, doc, labels=labels)
            c.add_metric(lv, value)
            fams.append(c)

        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[
                "block_size",
                "cache_dtype",
                "engine",
                "gpu_memory_utilization",
                "kv_cache_max_concurrency",
                "kv_cache_size_tokens",
                "num_gpu_blocks",
            ],
        )
        info.add_metric(
            [
                str(cfg.block_size),
                "auto",
                "0",
                str(cfg.gpu_memory_utilization),
                f"{cap.max_concurrency:.2f}",
                str(cap.kv_cache_tokens),
                str(cap.num_gpu_blocks),
            ],
            1.0,
        )
        fams.append(info)
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
              running)  # fmt: skip
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
              waiting)  # fmt: skip
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by reason.",
            labels=[*labels, "reason"],
        )
        by_reason.add_metric([*lv, "capacity"], waiting)
        by_reason.add_metric([*lv, "deferred"], 0)
        fams.append(by_reason)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                float(preempt_total[s]))  # fmt: skip
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                float(prompt_total[s]))  # fmt: skip
        counter("vllm:generation_tokens", "Number of generation tokens processed.",
                float(gen_total[s]))  # fmt: skip
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        success.add_metric([*lv, "length"], float(success_total[s]))
        fams.append(success)
        for metric, doc, key, buckets in (
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             "e2e", E2E_BUCKETS),
            ("vllm:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", "queue", E2E_BUCKETS),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             "ttft", TTFT_BUCKETS),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             "itl", ITL_BUCKETS),
            ("vllm:request_num_preemptions",
             "Histogram of the number of preemptions per finished request.", "npre",
             PREEMPTION_BUCKETS),
        ):  # fmt: skip
            per_le, sums = hist[key]
            h = HistogramMetricFamily(metric, doc, labels=labels)
            bucket_pairs = [(_le(b), float(per_le[s, j])) for j, b in enumerate(buckets)]
            bucket_pairs.append(("+Inf", float(per_le[s, -1])))
            h.add_metric(lv, bucket_pairs, float(sums[s]))
            fams.append(h)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(fams))
        when = start.astimezone(UTC) + timedelta(seconds=float(snap_times[s]))
        out.append((when, generate_latest(registry).decode()))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))
