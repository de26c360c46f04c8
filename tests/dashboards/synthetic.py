"""Hand-built Reports for the dashboard tests, the benchmark and the README screenshot.

A toy load model, not the simulator: demand follows a daily cycle with bursts; whenever it
exceeds the KV capacity the windows preempt, queue and blow up the tail. Deterministic per seed.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta

from preemptscope.analysis.report import (
    Advice,
    Capacity,
    Correlation,
    CountQuality,
    DeploymentReport,
    Episode,
    Event,
    Evidence,
    LatencyMetric,
    LatencyStats,
    Preemptions,
    Report,
    SourceSummary,
    Verdict,
    Window,
)

START = datetime(2026, 3, 2, 0, 0, tzinfo=UTC)
XSS = '<script>window.__xss=1</script><img src=x onerror="window.__xss=1">'


def latency(
    metric: LatencyMetric, mean: float, tail: float, *, limited: bool = False
) -> LatencyStats:
    return LatencyStats(
        metric=metric,
        source="histogram",
        count=100,
        mean=mean,
        p50=mean * 0.9,
        p90=mean * 1.5,
        p99=mean * tail,
        p99_over_mean=tail,
        bucket_limited=limited,
    )


def make_windows(
    count: int,
    *,
    seconds: int = 10,
    seed: int = 7,
    capacity: float = 48.0,
    quality: CountQuality = "exact",
) -> list[Window]:
    rng = random.Random(seed)
    windows: list[Window] = []
    backlog = 0.0
    per_day = 86400 / seconds
    for i in range(count):
        phase = 2 * math.pi * i / per_day
        burst = 25.0 if (i // 90) % 11 == 3 else 0.0
        demand = max(0.0, 30 + 22 * math.sin(phase) + burst + rng.gauss(0, 3)) + backlog
        running = min(demand, capacity * 1.08)
        kv = min(1.0, running / capacity * 0.93)
        over = demand > capacity
        waiting = max(0.0, demand - running)
        backlog = waiting * 0.6
        preempt = int((demand - capacity) * 0.8 + rng.random() * 3) if over else 0
        tail = 2.2 + (6.0 if over else 0.0) + rng.random()
        mean = 1.4 + 0.02 * running + (0.8 if over else 0.0)
        start = START + timedelta(seconds=i * seconds)
        windows.append(
            Window(
                start=start,
                end=start + timedelta(seconds=seconds),
                preemptions=preempt,
                preemption_quality=quality,
                preemption_source="v1_stats_field" if quality == "exact" else "v0_warning_counter",
                likely_preempting=over,
                forced_preemptions=False,
                kv_usage_max=round(min(1.0, kv + 0.03), 4),
                kv_usage_mean=round(kv, 4),
                running_mean=round(running, 2),
                running_max=int(running) + 2,
                waiting_mean=round(waiting, 2),
                waiting_max=int(waiting) + (1 if waiting else 0),
                waiting_for_capacity_max=int(waiting) if over else 0,
                prompt_throughput=800.0 + 20 * running,
                generation_throughput=40.0 * running,
                idle=False,
                over_capacity=over,
                latency={
                    "e2e": latency("e2e", mean, tail, limited=over and tail > 8.8),
                    "ttft": latency("ttft", mean / 12, tail * 1.4),
                    "itl": latency("itl", 0.021 + 0.0004 * running, 1.6 + (1.5 if over else 0)),
                },
            )
        )
    return windows


def episodes_of(windows: list[Window]) -> list[Episode]:
    episodes: list[Episode] = []
    run: list[Window] = []
    for window in [*windows, None]:
        if window is not None and window.over_capacity:
            run.append(window)
            continue
        if run:
            episodes.append(
                Episode(
                    start=run[0].start,
                    end=run[-1].end,
                    windows=len(run),
                    preemptions=sum(w.preemptions or 0 for w in run),
                    peak_kv_usage=max(w.kv_usage_max or 0 for w in run),
                    peak_waiting=max(w.waiting_max or 0 for w in run),
                    peak_p99_over_mean=max(w.latency["e2e"].p99_over_mean or 0 for w in run),
                )
            )
            run = []
    return episodes


def make_deployment(
    name: str = "llama-3.1-8b",
    count: int = 360,
    *,
    seconds: int = 10,
    model: str = "meta-llama/Llama-3.1-8B-Instruct",
    evidence_text: str = "",
    quality: CountQuality = "exact",
    with_events: bool = False,
) -> DeploymentReport:
    windows = make_windows(count, seconds=seconds, quality=quality)
    episodes = episodes_of(windows)
    total = sum(w.preemptions or 0 for w in windows)
    over = [w for w in windows if w.over_capacity]
    return DeploymentReport(
        name=name,
        verdict=Verdict(
            state="over_capacity" if over else "ok",
            problem="capacity" if over else "none",
            evidence=[
                Evidence("preemptions", f"{total} preemptions in {len(over)} windows", total),
                Evidence("kv_saturated", "KV cache usage reached 100% " + evidence_text, 1.0),
                Evidence("p99_over_mean", "e2e p99 is 8.4x the mean while preempting", 8.4),
            ],
        ),
        preemptions=Preemptions(total=total, exact=quality == "exact", evidence="v1_stats_field"),
        capacity=Capacity(
            num_gpu_blocks=2870,
            block_size=16,
            kv_cache_tokens=45920,
            max_concurrency=44.8,
            max_concurrency_context_tokens=1024,
            gpu_memory_utilization=0.9,
            max_num_seqs=256,
            max_num_batched_tokens=8192,
            model=model,
            vllm_version="0.11.0",
        ),
        advice=[
            Advice(
                2,
                "lower_max_num_seqs",
                "--max-num-seqs",
                "256",
                "48",
                "cap concurrency at what the KV cache holds",
            ),
            Advice(
                1,
                "raise_gpu_memory_utilization",
                "--gpu-memory-utilization",
                "0.9",
                "0.95",
                "more KV blocks: +11% capacity " + evidence_text,
            ),
        ],
        windows=windows,
        episodes=episodes,
        correlation=Correlation(
            metric="e2e",
            windows_with_preemption=len(over),
            windows_without_preemption=len(windows) - len(over),
            p99_over_mean_with=9.1,
            p99_over_mean_without=2.7,
            p99_with=24.0,
            p99_without=4.1,
            spearman_rho=0.81,
            best_lag_windows=1,
            best_lag_rho=0.84,
        ),
        sources=["/var/log/vllm/server.log"],
        events=[
            Event(windows[len(windows) // 3].start, "restart", "engine restarted " + evidence_text),
            Event(
                windows[2 * len(windows) // 3].start,
                "config_change",
                "max_num_seqs 256 -> 64 " + evidence_text,
            ),
        ]
        if with_events and len(windows) >= 3
        else [],
    )


def make_report(
    count: int = 360,
    *,
    seconds: int = 10,
    hostile: bool = False,
    deployments: int = 1,
) -> Report:
    """One (or more) over-capacity deployments; `hostile` plants XSS payloads in log text."""
    payload = XSS if hostile else ""
    deps = [
        make_deployment(
            name=(f"prod{payload}" if hostile else "llama-3.1-8b") + (f"-{i}" if i else ""),
            count=count,
            seconds=seconds,
            model="meta-llama/Llama-3.1-8B-Instruct" + payload,
            evidence_text=payload,
            with_events=hostile,
        )
        for i in range(deployments)
    ]
    return Report(
        deployments=deps,
        sources=[
            SourceSummary(
                path="/var/log/vllm/server.log" + payload,
                kind="log",
                deployment=deps[0].name,
                lines=count * 3 + 120,
                unrecognized_lines=4,
                records={"scheduler_stats": count, "config": 1},
                vllm_version="0.11.0",
                log_era="v1" + payload,
            )
        ],
        parameters={"window": f"{seconds}s", "kv_high": 0.98, "note": payload or "none"},
        generated_at=START + timedelta(seconds=count * seconds),
    )
