"""The typed Report: one schema used by the CLI (--json), the JSON API and the dashboards.

Plain dataclasses; `to_dict()` gives the documented JSON contract (docs/report.md).
Datetimes serialise as ISO 8601 strings with offset; None as null.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

# A source's description is ingest's to fill; the Report carries it as it is.
from preemptscope.ingest.gathered import SourceSummary as SourceSummary

SCHEMA_VERSION = 1

VerdictState = Literal["ok", "at_risk", "over_capacity", "insufficient_data"]
# How a preemption count was obtained, best first.
PreemptionSource = Literal[
    "metrics_counter",  # vllm:num_preemptions_total deltas: exact
    "v1_stats_field",  # `Preemptions: N` in V1 stats lines: exact for the logged intervals
    "v0_warning_counter",  # every-50th V0 warning's cumulative counter: a lower bound
    "inferred",  # V1 log with no count: KV >= ~0.98, waiting > 0, running dropping
    "none",
]
CountQuality = Literal["exact", "lower_bound", "inferred", "none"]
LatencyMetric = Literal["e2e", "ttft", "itl", "tpot", "queue"]


@dataclass(frozen=True)
class LatencyStats:
    """Tail and mean of one latency metric over one window, in seconds."""

    metric: LatencyMetric
    source: Literal["histogram", "samples", "run"]  # run: the client's whole-run figures
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    # p99 / mean; the tail-vs-average gap that dashboards of averages hide.
    p99_over_mean: float | None
    # True when p99 fell in the first or the +Inf bucket, so it is only a bound.
    bucket_limited: bool = False


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    preemptions: int | None  # None: no count for this window (never read as 0)
    preemption_quality: CountQuality
    preemption_source: PreemptionSource
    likely_preempting: bool  # inference from KV/waiting/running, labelled as such
    forced_preemptions: bool  # burst preempting everything at low KV: a cache reset, not capacity
    kv_usage_max: float | None
    kv_usage_mean: float | None
    running_mean: float | None
    running_max: int | None
    waiting_mean: float | None
    waiting_max: int | None
    waiting_for_capacity_max: int | None
    prompt_throughput: float | None  # tokens/s
    generation_throughput: float | None  # tokens/s
    idle: bool
    over_capacity: bool
    latency: dict[str, LatencyStats] = field(default_factory=dict)
    # Stats records plus /metrics scrapes in the window; 0 means no server-side data at all.
    samples: int = 0
    # Requests queue (waiting >= 1 and >= a quarter of running) while KV is not full: the limit
    # is max_num_seqs or compute, not the KV cache.
    queue_bound: bool = False
    # First and last record (stats line, warning, scrape) in the window that shows the
    # overload; null when the window is not over capacity or its evidence has no time.
    evidence_first: datetime | None = None
    evidence_last: datetime | None = None
    # Mean tokens per engine step: measured ("iteration_tokens": the histogram's _sum / _count
    # increases) or estimated from the stats lines' throughputs ("stats_estimate").
    tokens_per_step: float | None = None
    tokens_per_step_source: Literal["iteration_tokens", "stats_estimate"] | None = None
    # The scheduler limits that held requests back in this window: "kv_cache", "max_num_seqs",
    # "max_num_batched_tokens" (empty: none did, or the data cannot tell).
    limits: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Episode:
    """A run of over-capacity windows, each with evidence of its own."""

    start: datetime
    end: datetime
    windows: int
    preemptions: int | None
    peak_kv_usage: float | None
    peak_waiting: int | None
    peak_p99_over_mean: float | None
    # From the first to the last record that shows the overload (plus one sampling interval),
    # so the length does not depend on where the window edges fall.
    evidence_start: datetime | None = None
    evidence_end: datetime | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class Correlation:
    metric: LatencyMetric | None  # the latency metric used (ITL preferred), None when no latency
    windows_with_preemption: int
    windows_without_preemption: int
    p99_over_mean_with: float | None
    p99_over_mean_without: float | None
    p99_with: float | None
    p99_without: float | None
    spearman_rho: float | None  # preemption rate vs p99/mean over all windows
    best_lag_windows: int | None  # lag (in windows) where |rho| is largest
    best_lag_rho: float | None
    # preemption rate vs absolute p99: under sustained overload every request slows (queueing),
    # so p99 rises while p99/mean may not.
    spearman_rho_p99: float | None = None
    # Window pairs behind spearman_rho (lag 0), its two-sided p-value and 95 % interval
    # (Fisher z with the Fieller-Hartley-Pearson variance 1.06 / (n - 3)).
    pairs: int = 0
    p_value: float | None = None
    rho_low: float | None = None
    rho_high: float | None = None
    best_lag_pairs: int = 0
    best_lag_p_value: float | None = None  # Bonferroni-adjusted for the lags tried
    pairs_p99: int = 0
    p_value_p99: float | None = None
    # "supports" (positive and significant), "against" (enough windows, no positive
    # significant link), "too_few" (fewer than min_correlation_windows pairs), "none"
    conclusion: Literal["supports", "against", "too_few", "none"] = "none"


@dataclass(frozen=True)
class Evidence:
    """One fact behind a verdict, as a number and a sentence."""

    code: str  # stable id, e.g. "preemptions", "kv_saturated", "p99_over_mean"
    message: str
    value: float | None = None
    # The report fields the sentence quotes, by path inside the deployment's JSON (e.g.
    # "preemptions.total"), with the values the sentence was written from.
    quotes: dict[str, float | int | str | None] = field(default_factory=dict)


LimitName = Literal["kv_cache", "max_num_seqs", "max_num_batched_tokens", "none", "unknown"]


@dataclass(frozen=True)
class LimitFinding:
    """How the binding limit was measured: the figures behind verdict.limit."""

    reason: str  # one plain sentence (also for `unknown`: why the data cannot tell)
    also: list[str] = field(default_factory=list)  # other limits that bound too
    windows: dict[str, int] = field(default_factory=dict)  # flagged windows per limit
    flagged_windows: int = 0
    max_num_seqs: int | None = None
    max_num_seqs_source: Literal["log", "inferred", "none"] = "none"
    max_num_batched_tokens: int | None = None
    peak_running: int | None = None
    peak_waiting: int | None = None
    peak_kv_usage: float | None = None
    tokens_per_step: float | None = None  # the highest window mean in the flagged windows
    tokens_per_step_source: Literal["iteration_tokens", "stats_estimate"] | None = None
    # Chosen by the replay: predicted e2e p99 (s) when each binding limit is doubled.
    relief_e2e_p99: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    state: VerdictState
    evidence: list[Evidence]
    # "capacity" (too little KV for the load), "throughput" (requests queue with KV to spare:
    # max_num_seqs or compute is the limit) or "ordering" (priority policy moves the pain)
    problem: Literal["capacity", "throughput", "ordering", "none", "unknown"] = "unknown"
    # Which of the scheduler's limits held requests back in the flagged windows (LimitFinding).
    limit: LimitName = "unknown"
    limit_detail: LimitFinding | None = None


@dataclass(frozen=True)
class Advice:
    rank: int  # 1 = try first, as vLLM's docs rank the remedies
    action: str  # e.g. "raise_gpu_memory_utilization"
    flag: str | None  # e.g. "--gpu-memory-utilization"
    current: str | None
    suggested: str | None
    reason: str
    # The change replayed on the observed workload (analysis/advice.py): True when it was,
    # False when nothing could be replayed (the number is unverified), None: not a setting.
    verified: bool | None = None
    # Predicted figures now and with the change: preemptions, output tok/s, e2e p99 (s), and
    # per_priority.<p>.{requests, e2e_p99, ttft_p99, preemptions} when the data has classes.
    predicted: dict[str, dict[str, Any]] | None = None


@dataclass(frozen=True)
class Preemptions:
    total: int | None  # None when nothing in the inputs counts preemptions
    exact: bool
    evidence: PreemptionSource
    warning_lines: int = 0  # V0 warning lines seen (each stands for up to 50 preemptions)
    # Windows with a count / with preemptions (> 0, cache resets excluded).
    windows_counted: int = 0
    windows_with_preemption: int = 0
    # Largest cumulative counter seen (V0 warning or /metrics), summed over restarts: counts
    # preemptions since the engine started, including any before the data began.
    since_start: int | None = None
    cache_reset_preemptions: int = 0  # of `total`, in bursts judged to be cache resets
    unplaced: int = 0  # of `total`, counted by warnings without a timestamp (in no window)


@dataclass(frozen=True)
class Capacity:
    num_gpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrency_context_tokens: int | None = None
    available_kv_memory_gib: float | None = None
    model_weights_gib: float | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    scheduling_policy: str | None = None
    vllm_version: str | None = None
    model: str | None = None
    gpu_memory_total_gib: float | None = None  # per GPU, from the memory-profiling lines
    max_model_len: int | None = None
    enable_prefix_caching: bool | None = None  # the server's flag (None: not shown)
    # Observed load, for sizing: mean prompt + output tokens per request, peak running requests.
    mean_tokens_per_request: float | None = None
    peak_running: int | None = None


@dataclass(frozen=True)
class Event:
    """A moment that changes how the windows around it read; the timeline marks each one."""

    time: datetime
    kind: Literal["restart", "config_change"]
    message: str  # e.g. "engine restarted (counters reset)", "max_num_seqs 256 -> 64"


@dataclass(frozen=True)
class ClientRun:
    """A client benchmark run's whole-run figures (a run-level source, not per window).

    `start`/`end` place it on the time axis when the file says when it ran (else null).
    `latency` holds the tool's own mean/median/p90/p99 per metric (e2e, ttft, tpot, itl).
    """

    source: str
    label: str
    start: datetime | None
    end: datetime | None
    duration_s: float | None
    requests: int | None
    failed: int | None
    request_throughput: float | None  # completed requests / s
    goodput: float | None  # requests / s within the run's SLOs
    mean_tokens_per_request: float | None  # (input + output tokens) / completed requests
    request_rate: float | None  # offered by the client; null for "as fast as possible"
    max_concurrency: int | None
    latency: dict[str, LatencyStats] = field(default_factory=dict)


@dataclass(frozen=True)
class DeploymentReport:
    name: str
    verdict: Verdict
    preemptions: Preemptions
    capacity: Capacity
    advice: list[Advice]
    windows: list[Window]
    episodes: list[Episode]
    correlation: Correlation
    sources: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)  # restarts and config changes, by time
    client_runs: list[ClientRun] = field(default_factory=list)
    # Set when this deployment is one server of a group the user named (PATH=NAME).
    group: str | None = None
    # The replay of now against what was observed, in fidelity's words ("Verified: the replay of
    # now matches ..."), said once for every replayed advice item; null when nothing was replayed.
    advice_check: str | None = None


@dataclass(frozen=True)
class GroupSummary:
    """Servers the user named as one (PATH=NAME): each analysed alone, then summarised.

    Running counts, KV and windows are never added across servers (different engines);
    only preemption counts add up, and only when every member has one.
    """

    name: str
    members: list[str]
    states: dict[str, VerdictState]
    state: VerdictState  # the worst member's
    servers_over_capacity: int
    preemptions_total: int | None  # sum over members; null unless every member has a count
    preemptions_exact: bool
    peak_running: dict[str, int | None]  # per member, side by side
    num_gpu_blocks: dict[str, int | None]
    message: str


@dataclass(frozen=True)
class Report:
    deployments: list[DeploymentReport]
    sources: list[SourceSummary]
    parameters: dict[str, Any] = field(default_factory=dict)
    generated_at: datetime | None = None
    schema_version: int = SCHEMA_VERSION
    groups: list[GroupSummary] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = _jsonable(self)
        return result


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; a missing figure is null
    return value
