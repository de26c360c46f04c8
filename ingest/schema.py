"""Column names and dtypes of every frame ingest produces: the contract between rooms.

Units: fractions 0..1 for percentages, seconds for durations, tokens/s for throughput,
timestamps as timezone-aware UTC datetimes (the zone assumed for vLLM's naive local
times is reported by the parser). Documented in docs/frames.md; keep both in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

# The years a time may have (--year, --start, client results): past them, shifting by a
# window or a year overflows datetime.
YEAR_RANGE = (1970, 2100)

TIMESTAMP = pl.Datetime("us", "UTC")

# Columns every record read from a log carries, in this order.
RECORD_COLUMNS: dict[str, pl.DataType] = {
    "source": pl.String(),  # file path as given (or "-" for stdin)
    "line": pl.Int64(),  # 1-based physical line where the record starts
    "deployment": pl.String(),  # default: the file stem; settable with PATH=NAME
    "process": pl.String(),  # "APIServer", "EngineCore_DP0", "Worker_TP1", ... or null
    "pid": pl.Int64(),
    "level": pl.String(),  # DEBUG / INFO / WARNING / ERROR / CRITICAL or null
    "timestamp": TIMESTAMP,  # null when the record has no time of its own
}


def _schema(extra: dict[str, pl.DataType]) -> pl.Schema:
    return pl.Schema({**RECORD_COLUMNS, **extra})


PREEMPTION_WARNING = _schema(
    {
        "request_id": pl.String(),
        "mode": pl.String(),  # "RECOMPUTE" or "SWAP"
        # total_num_cumulative_preemption (or the docs' total_cumulative_preemption_cnt);
        # null when the line was cut before the counter.
        "cumulative": pl.Int64(),
    }
)

SCHEDULER_STATS = _schema(
    {
        "era": pl.String(),  # "v0" (Running/Swapped/Pending) or "v1" (Engine NNN / Waiting)
        "engine": pl.Int64(),  # V1 engine index; null for V0 and for aggregated lines
        "prompt_throughput": pl.Float64(),  # tokens/s
        "generation_throughput": pl.Float64(),  # tokens/s
        "running": pl.Int64(),
        "waiting": pl.Int64(),  # V1 Waiting, or V0 Pending
        "swapped": pl.Int64(),  # V0 only
        "deferred": pl.Int64(),  # V1 v0.20+ only, when present
        # V1 `Preemptions: N` in this interval. Null means "no count in this log", never 0.
        "preemptions": pl.Int64(),
        "kv_device": pl.String(),  # "GPU", "XPU", "CPU", ...
        "gpu_kv_cache_usage": pl.Float64(),  # fraction 0..1 (of the device named in kv_device)
        "cpu_kv_cache_usage": pl.Float64(),  # V0 swap space use, fraction 0..1
        "prefix_cache_hit_rate": pl.Float64(),  # fraction 0..1
        "external_prefix_cache_hit_rate": pl.Float64(),
        "mm_cache_hit_rate": pl.Float64(),
        "extra": pl.String(),  # unknown fields kept verbatim, null when none
    }
)

# One row per quantity, so new KV-sizing lines add rows, not columns.
# kind: gpu_blocks, cpu_blocks, kv_cache_tokens, max_concurrency, available_kv_memory,
#       model_weights, memory_total, memory_for_kv (see docs/frames.md for the full list)
KV_CAPACITY = _schema(
    {
        "kind": pl.String(),
        "value": pl.Float64(),
        "unit": pl.String(),  # "blocks", "tokens", "x", "GiB", "s", "fraction"
        "context_tokens": pl.Int64(),  # for max_concurrency: the per-request length L
        "device": pl.String(),  # "GPU", "CUDA", "cuda", "TPU", ...
    }
)

# One row per extracted setting.
# key: vllm_version, engine_version (V0/V1), model, served_model_name, max_num_seqs,
#      max_num_batched_tokens, gpu_memory_utilization, tensor_parallel_size,
#      pipeline_parallel_size, block_size, scheduling_policy, max_model_len, ...
CONFIG = _schema(
    {
        "key": pl.String(),
        "value": pl.String(),
        "origin": pl.String(),  # version_line, engine_config, non_default_args, args_namespace, ...
    }
)

# event: received, added, finished, aborted, generated, failed
REQUESTS = _schema(
    {
        "event": pl.String(),
        "request_id": pl.String(),
    }
)

ACCESS = _schema(
    {
        "client": pl.String(),
        "method": pl.String(),
        "path": pl.String(),
        "http_version": pl.String(),
        "status": pl.Int64(),
    }
)

OTHER = _schema(
    {
        "logger_file": pl.String(),  # "scheduler.py", "v1/metrics/loggers.py", ...
        "logger_line": pl.Int64(),
        "message": pl.String(),
    }
)

UNRECOGNIZED = pl.Schema(
    {
        "source": pl.String(),
        "line": pl.Int64(),
        "deployment": pl.String(),
        "text": pl.String(),
        # why: "no known format", "number out of range: ...", "line longer than ... bytes"
        "reason": pl.String(),
    }
)

# /metrics samples, long format: one row per sample per scrape (ingest/metrics.py).
METRIC_SAMPLES = pl.Schema(
    {
        "timestamp": TIMESTAMP,  # scrape time
        "source": pl.String(),  # file or URL
        "deployment": pl.String(),
        # canonical name with prefix (vllm:, ray_vllm_) and _total stripped and renames folded,
        # e.g. "num_preemptions", "kv_cache_usage_perc", "inter_token_latency_seconds"
        "metric": pl.String(),
        "raw_name": pl.String(),  # the name as exposed
        "type": pl.String(),  # counter, gauge, histogram, info, unknown
        "sample": pl.String(),  # value, bucket, sum, count, created
        "le": pl.Float64(),  # bucket bound for sample == "bucket" (inf for +Inf), else null
        "model_name": pl.String(),
        "engine": pl.String(),
        "labels": pl.String(),  # the remaining labels as a JSON object, sorted keys
        "value": pl.Float64(),
    }
)


def has_number() -> pl.Expr:
    """Where a METRIC_SAMPLES value is a number to analyse: not NaN, not infinite, within 64
    bits (the samples analysis.latency.usable_samples keeps; ingest/metrics.snapshot_notes
    counts the others)."""
    value = pl.col("value")
    return value.is_finite() & (value.abs() < 2.0**63)


# Per-request latencies from client results or log lifecycle lines (ingest/bench.py).
REQUEST_LATENCIES = pl.Schema(
    {
        "source": pl.String(),
        "deployment": pl.String(),
        "request_id": pl.String(),
        "start": TIMESTAMP,  # when the request was sent / received
        "e2e": pl.Float64(),  # seconds
        "ttft": pl.Float64(),  # seconds, null when unknown
        "tpot": pl.Float64(),  # mean time per output token, seconds, null when unknown
        "prompt_tokens": pl.Int64(),
        "output_tokens": pl.Int64(),
        "success": pl.Boolean(),
        "origin": pl.String(),  # vllm_bench, guidellm, csv, jsonl, log_lifecycle
    }
)

# What `report` and `serve` keep of request lines instead of the rows (ingest/reduce.py):
# one row per request, at its first start line (`line`, `pid`: to split a file two servers
# wrote to). One row a request that started: in JOINED when its end was logged too (its start
# is its arrival), else in ARRIVALS.
# Both carry what the request's lines show of its prompt (ingest/prompts.py), null when none
# shows ids: `prompt_block_hashes`, chained hashes of its complete 16-token blocks in order
# (equal hash i: equal first 16 * (i + 1) tokens; at most 256), `prompt_tokens` (the ids
# visible) and `prompt_cut` (the list was cut: `...]` or no `]`).
PROMPT_COLUMNS: dict[str, pl.DataType] = {
    "prompt_block_hashes": pl.List(pl.UInt64()),
    "prompt_tokens": pl.Int64(),
    "prompt_cut": pl.Boolean(),
}
ARRIVALS = pl.Schema(
    {"line": pl.Int64(), "pid": pl.Int32(), "timestamp": TIMESTAMP, **PROMPT_COLUMNS}
)
JOINED = pl.Schema(
    {
        "line": pl.Int64(),
        "pid": pl.Int32(),
        "start": TIMESTAMP,
        "e2e": pl.Float64(),  # seconds
        "success": pl.Boolean(),
        **PROMPT_COLUMNS,
    }
)

FRAME_SCHEMAS: dict[str, pl.Schema] = {
    "preemption_warning": PREEMPTION_WARNING,
    "scheduler_stats": SCHEDULER_STATS,
    "kv_capacity": KV_CAPACITY,
    "config": CONFIG,
    "requests": REQUESTS,
    "access": ACCESS,
    "other": OTHER,
    "unrecognized": UNRECOGNIZED,
}


_EMPTY: dict[str, pl.DataFrame] = {
    kind: pl.DataFrame(schema=s) for kind, s in FRAME_SCHEMAS.items()
}


def empty(kind: str) -> pl.DataFrame:
    """An empty frame of the given kind with the right dtypes.

    A clone of a prebuilt frame: building one from a schema costs ~0.3 ms, and every LogFrames
    (one per live batch) starts with eight of them.
    """
    return _EMPTY[kind].clone()


@dataclass
class LineAccounting:
    """Every physical line is either part of a record or unrecognized: the totals add up."""

    lines: int = 0
    parsed_lines: int = 0
    unrecognized_lines: int = 0
    blank_lines: int = 0  # empty lines count as parsed-to-nothing, reported separately

    def check(self) -> bool:
        return self.parsed_lines + self.unrecognized_lines + self.blank_lines == self.lines


@dataclass
class LogFrames:
    """Everything read from one log source (or a batch of its lines)."""

    source: str
    deployment: str
    frames: dict[str, pl.DataFrame] = field(
        default_factory=lambda: {kind: empty(kind) for kind in FRAME_SCHEMAS}
    )
    accounting: LineAccounting = field(default_factory=LineAccounting)
    vllm_version: str | None = None
    log_era: str | None = None  # "v0", "v1", "mixed" or None when nothing tells
    timezone: str = "UTC"  # zone assumed for the log's own naive timestamps
    year_source: str | None = None  # "wrapper", "json", "mtime", "option", "now"
    # Rows recognised but not extracted, per kind (only when parsed with a `keep` of fewer kinds:
    # requests, access and other are then counted, not materialised).
    summarized: dict[str, int] = field(default_factory=dict)
    # Reduced while reading (ingest/reduce.py): the requests as ARRIVALS and JOINED rows, and
    # `frames["requests"]` holds only the rows that mark activity. None: not reduced.
    arrivals: pl.DataFrame | None = None
    joined: pl.DataFrame | None = None
    # The prompt ids request lines show (ingest/prompts.py PROMPTS), read when requests are
    # extracted; the reducer hands them to the join, which puts them on the request's row.
    prompts: pl.DataFrame | None = None

    @property
    def reduced(self) -> bool:
        return self.arrivals is not None

    def __getitem__(self, kind: str) -> pl.DataFrame:
        return self.frames[kind]

    def record_counts(self) -> dict[str, int]:
        return {
            kind: frame.height + self.summarized.get(kind, 0) for kind, frame in self.frames.items()
        }

    def extend(self, other: LogFrames) -> None:
        """Append the next batch of the same source: frames, line counts, version, era."""
        for kind, frame in other.frames.items():
            mine = self.frames.get(kind)
            self.frames[kind] = (
                frame if mine is None or mine.height == 0 else pl.concat([mine, frame])
            )
        for name in ("lines", "parsed_lines", "unrecognized_lines", "blank_lines"):
            setattr(
                self.accounting,
                name,
                getattr(self.accounting, name) + getattr(other.accounting, name),
            )
        self.vllm_version = self.vllm_version or other.vllm_version
        if other.log_era is not None and self.log_era not in (None, other.log_era):
            self.log_era = "mixed"
        else:
            self.log_era = self.log_era or other.log_era
        self.year_source = self.year_source or other.year_source
        for kind, count in other.summarized.items():
            self.summarized[kind] = self.summarized.get(kind, 0) + count
        for name in ("arrivals", "joined", "prompts"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if theirs is not None:
                setattr(self, name, theirs if mine is None else pl.concat([mine, theirs]))
