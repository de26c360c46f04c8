"""Client-side latency results into REQUEST_LATENCIES: vllm bench serve, GuideLLM, CSV, JSONL.

Formats (auto-detected from the content; see docs/sources.md):

* `vllm bench serve --save-result [--save-detailed]` JSON, also several results appended
  to one file (`--append-result`). Per-request arrays exist only with --save-detailed.
  `start_times` are `time.perf_counter()` readings, so they are anchored at `date` (the local
  time the result was saved, read as UTC) minus `duration`, or at the `start` you give.
* GuideLLM `benchmarks.json` (or .yaml): per-request stats under benchmarks[].requests
  {successful, incomplete, errored}, with Unix timestamps. GuideLLM keeps only a sample of
  requests by default (`--request-samples`); its whole-run figures are in `runs`.
* Generic per-request rows, CSV with a header or JSON Lines: `start` (ISO 8601 or Unix
  seconds) and `e2e` seconds (or `e2e_ms`, or `end`), optionally `request_id`, `ttft`,
  `tpot` (seconds or `_ms`), `prompt_tokens`, `output_tokens`, `success`, `priority`.

Rows carry REQUEST_LATENCIES' columns plus `priority` (vLLM's request priority, null where the
file gives none): a `priority` column, or a vllm bench JSON's `priorities` list beside its
other per-request lists. The what-if replays it (docs/simulator.md).

TPOT everywhere means vLLM's: (e2e - ttft) / (output_tokens - 1), excluding the first token
(GuideLLM's `inter_token_latency_ms`; its `time_per_output_token_ms` includes the first).
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import yaml
from preemptscope.ingest.schema import REQUEST_LATENCIES, YEAR_RANGE

from preemptscope.errors import InputError

__all__ = [
    "GENERIC_COLUMNS",
    "BenchResult",
    "BenchRun",
    "RunLatency",
    "read_bench",
    "read_latencies",
]

# Generic CSV/JSONL columns: name -> meaning. `start` and one of e2e/e2e_ms/end are required.
GENERIC_COLUMNS: dict[str, str] = {
    "start": "when the request was sent: ISO 8601 (no zone = UTC) or Unix seconds",
    "e2e": "end-to-end latency, seconds (or e2e_ms, milliseconds)",
    "end": "when the last byte arrived (instead of e2e): ISO 8601 or Unix seconds",
    "request_id": "any identifier (default: the row number)",
    "ttft": "time to first token, seconds (or ttft_ms)",
    "tpot": "mean time per output token after the first, seconds (or tpot_ms)",
    "prompt_tokens": "prompt length, tokens",
    "output_tokens": "generated tokens",
    "success": "true/false, 1/0, yes/no (default true); failed rows are kept, flagged",
    "priority": "vLLM's request priority, an integer (lower is served first under "
    "--scheduling-policy priority)",
}

# Client rows: REQUEST_LATENCIES and the request's priority (null: not given).
REQUEST_ROWS = pl.Schema({**REQUEST_LATENCIES, "priority": pl.Int64()})

_VLLM_KEYS = {
    "ttfts",
    "itls",
    "latencies",
    "start_times",
    "mean_ttft_ms",
    "median_ttft_ms",
    "request_throughput",
    "completed",
}


@dataclass(frozen=True)
class RunLatency:
    """Whole-run client latency of one metric ("e2e", "ttft", "tpot", "itl"), seconds.

    Plain numbers as the tool printed them (ingest does not depend on analysis types)."""

    metric: str
    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class BenchRun:
    """One benchmark run's whole-run client figures, as the tool itself reported them.

    `start`/`end` are None when the file does not say when it ran; every figure is None when
    the file does not give it (never 0)."""

    label: str
    start: datetime | None
    end: datetime | None
    requests: int | None  # completed (successful) requests
    stats: dict[str, RunLatency] = field(default_factory=dict)
    duration_s: float | None = None
    failed: int | None = None
    request_throughput: float | None = None  # completed requests / s
    goodput: float | None = None  # requests / s meeting the run's SLOs (--goodput)
    input_tokens: int | None = None  # total over the run
    output_tokens: int | None = None
    max_concurrency: int | None = None  # the client's cap (--max-concurrency), if any
    request_rate: float | None = None  # offered rate (--request-rate); None for "inf"


@dataclass(frozen=True)
class BenchResult:
    path: str
    origin: str  # vllm_bench, guidellm, csv, jsonl
    latencies: pl.DataFrame  # REQUEST_LATENCIES
    runs: list[BenchRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # caveats to show the user


class _Rows:
    """Column buffers for REQUEST_LATENCIES."""

    def __init__(self, source: str, deployment: str, origin: str) -> None:
        self.source, self.deployment, self.origin = source, deployment, origin
        self.columns: dict[str, list[Any]] = {name: [] for name in REQUEST_ROWS.names()}

    def add(
        self,
        request_id: str,
        start: datetime | None,
        e2e: float | None,
        ttft: float | None = None,
        tpot: float | None = None,
        prompt_tokens: int | None = None,
        output_tokens: int | None = None,
        success: bool = True,
        priority: int | None = None,
    ) -> None:
        if (
            tpot is None
            and e2e is not None
            and ttft is not None
            and output_tokens is not None
            and output_tokens > 1
        ):
            tpot = (e2e - ttft) / (output_tokens - 1)  # vLLM's TPOT: first token excluded
        values = (request_id, start, e2e, ttft, tpot, prompt_tokens, output_tokens, success)
        names = ("request_id", "start", "e2e", "ttft", "tpot", "prompt_tokens", "output_tokens")
        for name, value in zip((*names, "success"), values, strict=True):
            self.columns[name].append(value)
        self.columns["source"].append(self.source)
        self.columns["deployment"].append(self.deployment)
        self.columns["origin"].append(self.origin)
        self.columns["priority"].append(priority)

    def frame(self) -> pl.DataFrame:
        return pl.DataFrame(self.columns, schema=REQUEST_ROWS)


# ---------------------------------------------------------------------------------------------
# Small converters


def _number(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    return None


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and abs(number) < 2.0**63 else None


def _dated(moment: datetime | None) -> datetime | None:
    """`moment` when its year is in YEAR_RANGE, else None (no window or shift can hold it)."""
    low, high = YEAR_RANGE
    return moment if moment is not None and low <= moment.year <= high else None


def _unix(seconds: float | None) -> datetime | None:
    """Unix seconds as a time; None when there are none or they are outside YEAR_RANGE."""
    if seconds is None:
        return None
    try:
        return _dated(datetime.fromtimestamp(seconds, UTC))
    except (OverflowError, OSError, ValueError):
        return None


def _after(moment: datetime | None, seconds: float | None) -> datetime | None:
    """`moment` moved by `seconds`; None when either is missing or the result is outside
    YEAR_RANGE (a damaged file's duration of 1e30 s)."""
    if moment is None or seconds is None:
        return None
    try:
        return _dated(moment + timedelta(seconds=seconds))
    except OverflowError:
        return None


def _moment(value: Any) -> datetime | None:
    """ISO 8601 text (UTC when it has no zone) or Unix seconds; ValueError otherwise."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), UTC)
    text = str(value).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return datetime.fromtimestamp(float(text), UTC)
    moment = datetime.fromisoformat(text)
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _shift(frame: pl.DataFrame, start: datetime | None) -> pl.DataFrame:
    """Move all start times so that the earliest is `start` (None: leave as they are)."""
    if start is None or frame.is_empty() or frame["start"].null_count() == frame.height:
        return frame
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    earliest: datetime = frame["start"].min()  # type: ignore[assignment]
    return frame.with_columns(pl.col("start") + (start.astimezone(UTC) - earliest))


# ---------------------------------------------------------------------------------------------
# vllm bench serve


def _vllm_anchor(result: Mapping[str, Any], path: str, notes: list[str]) -> datetime | None:
    date, duration = result.get("date"), _number(result.get("duration"))
    if not isinstance(date, str):
        return None
    # Saved right after the run, with the client's naive local clock.
    saved = None
    for layout in ("%Y%m%d-%H%M%S", "%Y-%m-%d %H:%M:%S"):
        try:
            saved = datetime.strptime(date, layout).replace(tzinfo=UTC)
            break
        except ValueError:
            continue
    if saved is None:
        raise InputError(path, f"vllm bench `date` {date!r} is not YYYYMMDD-HHMMSS")
    note = "vllm bench `date` is the client's local time; read as UTC (give a start to re-anchor)"
    if note not in notes:
        notes.append(note)
    return _after(saved, -(duration or 0.0))


def _vllm_stats(result: Mapping[str, Any]) -> dict[str, RunLatency]:
    names = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}
    count = _count(result.get("completed"))
    stats: dict[str, RunLatency] = {}
    for key, metric in names.items():
        mean = _number(result.get(f"mean_{key}_ms"))
        if mean is None:
            continue

        def ms(name: str, key: str = key) -> float | None:
            value = _number(result.get(f"{name}_{key}_ms"))
            return value / 1000 if value is not None else None

        median = ms("median")
        stats[metric] = RunLatency(
            metric,
            count or 0,
            mean / 1000,
            median if median is not None else ms("p50"),
            ms("p90"),
            ms("p99"),
        )
    return stats


def _array(result: Mapping[str, Any], key: str, n: int, path: str) -> list[Any] | None:
    values = result.get(key)
    if values is None:
        return None
    if not isinstance(values, list) or len(values) != n:
        size = len(values) if isinstance(values, list) else type(values).__name__
        raise InputError(path, f"vllm bench `{key}` has {size} entries, expected {n}")
    return values


def _read_vllm(
    results: Sequence[Mapping[str, Any]], path: str, deployment: str, notes: list[str]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    rows = _Rows(path, deployment, "vllm_bench")
    runs: list[BenchRun] = []
    for number, result in enumerate(results):
        anchor = _vllm_anchor(result, path, notes)
        duration = _number(result.get("duration"))
        label = str(result.get("label") or result.get("request_rate") or number)
        end = _after(anchor, duration)
        runs.append(
            BenchRun(
                label,
                anchor,
                end,
                _count(result.get("completed")),
                _vllm_stats(result),
                duration_s=duration,
                failed=_count(result.get("failed")),
                request_throughput=_number(result.get("request_throughput")),
                # benchmark_serving.py of 0.6.x spelled the key with a colon.
                goodput=_number(result.get("request_goodput", result.get("request_goodput:"))),
                input_tokens=_count(result.get("total_input_tokens")),
                output_tokens=_count(result.get("total_output_tokens")),
                max_concurrency=_count(result.get("max_concurrency")),
                request_rate=_number(result.get("request_rate")),
            )
        )
        lengths = [
            len(result[k])
            for k in ("ttfts", "latencies", "e2els")
            if isinstance(result.get(k), list)
        ]
        if not lengths:
            continue
        n = lengths[0]
        ttfts = _array(result, "ttfts", n, path)
        latencies = _array(result, "latencies", n, path) or _array(result, "e2els", n, path)
        itls = _array(result, "itls", n, path)
        starts = _array(result, "start_times", n, path)
        inputs = _array(result, "input_lens", n, path)
        outputs = _array(result, "output_lens", n, path)
        errors = _array(result, "errors", n, path)
        priorities = _array(result, "priorities", n, path)
        if starts is None:
            note = (
                "vllm bench result without start_times (older vLLM, or no --save-detailed): "
                "its requests cannot be placed in time windows"
            )
            if note not in notes:
                notes.append(note)
        offsets = [_number(s) for s in starts] if starts is not None else None
        first = min((o for o in offsets if o is not None), default=None) if offsets else None
        for i in range(n):
            ttft = _number(ttfts[i]) if ttfts else None
            e2e = _number(latencies[i]) if latencies else None
            if e2e is None and ttft is not None and itls is not None and isinstance(itls[i], list):
                e2e = ttft + sum(_number(x) or 0.0 for x in itls[i])
            moment = None
            offset = offsets[i] if offsets is not None else None
            if anchor is not None and first is not None and offset is not None:
                moment = _after(anchor, offset - first)
            failed = bool(errors[i]) if errors is not None else not (e2e or ttft)
            rows.add(
                request_id=f"{label}:{i}" if len(results) > 1 else str(i),
                start=moment,
                e2e=None if failed else e2e,
                ttft=None if failed else ttft,
                prompt_tokens=_count(inputs[i]) if inputs else None,
                output_tokens=_count(outputs[i]) if outputs else None,
                success=not failed,
                priority=_priority(priorities[i], (path, 0)) if priorities else None,
            )
    return rows.frame(), runs


# ---------------------------------------------------------------------------------------------
# GuideLLM


def _get(item: Mapping[str, Any], *paths: str) -> Any:
    """The first present value among dotted paths."""
    for dotted in paths:
        value: Any = item
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value is not None:
            return value
    return None


def _guidellm_stats(benchmark: Mapping[str, Any]) -> dict[str, RunLatency]:
    metrics = benchmark.get("metrics")
    if not isinstance(metrics, Mapping):
        return {}
    wanted: dict[str, tuple[str, float]] = {
        "request_latency": ("e2e", 1.0),
        "time_to_first_token_ms": ("ttft", 1000.0),
        "inter_token_latency_ms": ("tpot", 1000.0),
    }
    stats: dict[str, RunLatency] = {}
    for key, (metric, scale) in wanted.items():
        summary = _get(metrics, f"{key}.successful")
        if not isinstance(summary, Mapping) or _number(summary.get("mean")) is None:
            continue
        mean = float(summary["mean"]) / scale

        def pick(
            name: str, summary: Mapping[str, Any] = summary, scale: float = scale
        ) -> float | None:
            value = _number(_get(summary, f"percentiles.{name}"))
            return value / scale if value is not None else None

        p50 = pick("p50")
        if p50 is None and _number(summary.get("median")) is not None:
            p50 = float(summary["median"]) / scale
        count = _count(summary.get("count")) or 0
        stats[metric] = RunLatency(metric, count, mean, p50, pick("p90"), pick("p99"))
    return stats


def _read_guidellm(
    report: Mapping[str, Any], path: str, deployment: str, notes: list[str]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise InputError(path, "GuideLLM report without a `benchmarks` list")
    rows = _Rows(path, deployment, "guidellm")
    runs: list[BenchRun] = []
    for number, benchmark in enumerate(benchmarks):
        if not isinstance(benchmark, Mapping):
            raise InputError(path, f"GuideLLM benchmarks[{number}] is not an object")
        label = str(
            _get(benchmark, "id_", "id", "config.strategy.type_", "args.strategy.type_") or number
        )
        start = _number(
            _get(benchmark, "start_time", "run_stats.start_time", "scheduler_state.start_time")
        )
        end = _number(_get(benchmark, "end_time", "run_stats.end_time", "scheduler_state.end_time"))
        requests = benchmark.get("requests")
        total = None
        if isinstance(requests, Mapping):
            total = sum(len(v) for v in requests.values() if isinstance(v, list))
            for status in ("successful", "incomplete", "errored"):
                for position, item in enumerate(requests.get(status) or []):
                    if not isinstance(item, Mapping):
                        raise InputError(
                            path, f"GuideLLM requests.{status}[{position}] is not an object"
                        )
                    _guidellm_row(rows, item, status, f"{label}:{status}:{position}")
        successful = requests.get("successful") if isinstance(requests, Mapping) else None
        runs.append(
            BenchRun(
                label=label,
                start=_unix(start) if start else None,
                end=_unix(end) if end else None,
                requests=len(successful) if isinstance(successful, list) else total,
                stats=_guidellm_stats(benchmark),
                duration_s=end - start if start and end and end >= start else None,
                request_throughput=_number(
                    _get(benchmark, "metrics.requests_per_second.successful.mean")
                ),
            )
        )
    frame = rows.frame()
    if not frame.is_empty():
        notes.append("GuideLLM stores a sample of requests unless run with --request-samples all")
    return frame, runs


def _guidellm_row(rows: _Rows, item: Mapping[str, Any], status: str, fallback_id: str) -> None:
    start = _number(_get(item, "request_start_time", "info.timings.request_start", "start_time"))
    end = _number(_get(item, "request_end_time", "info.timings.request_end", "end_time"))
    e2e = _number(item.get("request_latency"))
    if e2e is None and start is not None and end is not None:
        e2e = end - start
    ttft_ms = _number(item.get("time_to_first_token_ms"))
    if ttft_ms is None:
        first = _number(_get(item, "info.timings.first_token_iteration", "first_token_time"))
        ttft_ms = (first - start) * 1000 if first is not None and start is not None else None
    itl_ms = _number(item.get("inter_token_latency_ms"))
    success = status == "successful"
    rows.add(
        request_id=str(item.get("request_id") or fallback_id),
        start=_unix(start),
        e2e=e2e if success else None,
        ttft=ttft_ms / 1000 if ttft_ms is not None and success else None,
        tpot=itl_ms / 1000 if itl_ms is not None and success else None,
        prompt_tokens=_count(_get(item, "prompt_tokens", "input_metrics.total_tokens")),
        output_tokens=_count(_get(item, "output_tokens", "output_metrics.total_tokens")),
        success=success,
    )


# ---------------------------------------------------------------------------------------------
# Generic CSV / JSON Lines

_TRUE = {"true", "1", "yes", "y", "ok", "t"}
_FALSE = {"false", "0", "no", "n", "f", "error", "failed"}


def _priority(raw: Any, where: tuple[str, int]) -> int | None:
    """vLLM's request priority: an integer (a float that is one is taken), null if empty."""
    if raw is None or raw == "":
        return None
    try:
        value = float(raw) if not isinstance(raw, bool) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value == int(value) and abs(value) < 2.0**63):
        path, line = where
        if line:
            raise InputError(path, f"`priority` must be an integer, got {raw!r}", line)
        raise InputError(path, f"vllm bench `priorities` must hold integers, got {raw!r}")
    return int(value)


def _seconds(record: Mapping[str, Any], name: str, where: tuple[str, int]) -> float | None:
    for key, scale in ((name, 1.0), (f"{name}_ms", 1000.0), (f"{name}_s", 1.0)):
        raw = record.get(key)
        if raw is None or raw == "":
            continue
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InputError(where[0], f"`{key}` is not a number: {raw!r}", where[1]) from None
        if not math.isfinite(value) or value < 0:
            raise InputError(
                where[0], f"`{key}` must be a non-negative number, got {raw!r}", where[1]
            )
        return value / scale
    return None


def _generic_row(
    rows: _Rows, record: Mapping[str, Any], where: tuple[str, int], index: int
) -> None:
    path, line = where
    try:
        start = _moment(record.get("start"))
        end = _moment(record.get("end"))
    except (TypeError, ValueError, OverflowError, OSError):
        bad = record.get("start") if "start" in record else record.get("end")
        raise InputError(
            path, f"time is neither ISO 8601 nor Unix seconds: {bad!r}", line
        ) from None
    if start is None:
        raise InputError(path, "`start` is empty", line)
    low, high = YEAR_RANGE
    for key, moment in (("start", start), ("end", end)):
        if moment is not None and _dated(moment) is None:
            raise InputError(
                path, f"`{key}` {record.get(key)!r} is not a time from {low} to {high}", line
            )
    e2e = _seconds(record, "e2e", where)
    if e2e is None and end is not None:
        e2e = (end - start).total_seconds()
        if e2e < 0:
            raise InputError(path, "`end` is before `start`", line)
    raw_success = record.get("success")
    success = True
    if raw_success is not None and raw_success != "":
        text = str(raw_success).strip().lower()
        if text not in _TRUE | _FALSE:
            raise InputError(path, f"`success` must be true or false, got {raw_success!r}", line)
        success = text in _TRUE
    if e2e is None and success:
        raise InputError(path, "no latency: give `e2e` (s), `e2e_ms` or `end`", line)

    def tokens(key: str) -> int | None:
        raw = record.get(key)
        if raw is None or raw == "":
            return None
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise InputError(path, f"`{key}` is not a number: {raw!r}", line) from None
        if not 0 <= value < 2.0**63:  # (NaN fails too)
            raise InputError(path, f"`{key}` must be a token count, got {raw!r}", line)
        return int(value)

    rows.add(
        request_id=str(record.get("request_id") or index),
        start=start,
        e2e=e2e,
        ttft=_seconds(record, "ttft", where),
        tpot=_seconds(record, "tpot", where),
        prompt_tokens=tokens("prompt_tokens"),
        output_tokens=tokens("output_tokens"),
        success=success,
        priority=_priority(record.get("priority"), where),
    )


def _check_columns(names: Sequence[str], path: str) -> None:
    present = set(names)
    if "start" not in present or not present & {"e2e", "e2e_ms", "e2e_s", "end"}:
        raise InputError(
            path,
            "per-request rows need columns `start` and `e2e` (or `e2e_ms`, or `end`); "
            f"found: {', '.join(sorted(present)) or 'none'}",
            1,
        )


def _read_csv(text: str, path: str, deployment: str) -> pl.DataFrame:
    rows = _Rows(path, deployment, "csv")
    reader = csv.DictReader(io.StringIO(text))
    _check_columns([name.strip() for name in reader.fieldnames or []], path)
    for index, record in enumerate(reader):
        if None in record:
            raise InputError(path, "more fields than the header names", reader.line_num)
        clean = {k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in record.items()}
        _generic_row(rows, clean, (path, reader.line_num), index)
    return rows.frame()


def _jsonl_records(text: str, path: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"not JSON: {exc.msg} (column {exc.colno})", number) from None


def _read_records(records: Iterator[tuple[int, Any]], path: str, deployment: str) -> pl.DataFrame:
    rows = _Rows(path, deployment, "jsonl")
    checked = False
    for index, (line, record) in enumerate(records):
        if not isinstance(record, Mapping):
            raise InputError(path, "each line must be a JSON object", line)
        if not checked:
            try:
                _check_columns(list(record), path)
            except InputError as exc:
                raise InputError(path, exc.reason, line) from None
            checked = True
        _generic_row(rows, record, (path, line), index)
    return rows.frame()


# ---------------------------------------------------------------------------------------------
# Detection


def _is_vllm(document: Any) -> bool:
    return isinstance(document, Mapping) and bool(_VLLM_KEYS & set(document))


def _guarded(
    origin: str, path: str, read: Callable[[], tuple[pl.DataFrame, list[BenchRun]]]
) -> tuple[pl.DataFrame, list[BenchRun]]:
    """A structured reader's result: a field of another type than its format's (a number where
    a list belongs, a list where an object does) is bad input, not a crash."""
    try:
        return read()
    except (TypeError, AttributeError, KeyError, IndexError) as exc:
        raise InputError(
            path, f"{origin} JSON with a field of an unexpected type ({exc})"
        ) from None


def read_bench(path: str | Path, *, deployment: str, start: datetime | None = None) -> BenchResult:
    """Read any supported client-result file: per-request rows, whole-run figures and caveats.

    `start`: when the earliest request was sent; re-anchors relative times (vllm bench) and
    shifts absolute ones (clock skew between client and server).
    """
    file = Path(path)
    name = str(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(name, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(name, f"cannot read as UTF-8 text: {exc}") from None
    notes: list[str] = []
    stripped = text.lstrip()
    runs: list[BenchRun] = []
    if file.suffix.lower() in (".yaml", ".yml"):
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            raise InputError(name, f"not YAML: {exc}", mark.line + 1 if mark else None) from None
        if not (isinstance(document, Mapping) and "benchmarks" in document):
            raise InputError(name, "YAML without a GuideLLM `benchmarks` list")
        frame, runs = _guarded(
            "GuideLLM", name, lambda: _read_guidellm(document, name, deployment, notes)
        )
        origin = "guidellm"
    elif stripped.startswith(("{", "[")):
        try:
            whole: Any = json.loads(text)
            documents = [(1, whole)]
        except json.JSONDecodeError:
            documents = list(_jsonl_records(text, name))  # JSON Lines or appended results
        first = documents[0][1] if documents else None
        if isinstance(first, Mapping) and "benchmarks" in first and len(documents) == 1:
            frame, runs = _guarded(
                "GuideLLM", name, lambda: _read_guidellm(first, name, deployment, notes)
            )
            origin = "guidellm"
        elif _is_vllm(first):
            for line, document in documents:
                if not _is_vllm(document):
                    raise InputError(name, "not a vllm bench serve result like the first", line)
            results = [d for _, d in documents]
            frame, runs = _guarded(
                "vllm bench", name, lambda: _read_vllm(results, name, deployment, notes)
            )
            origin = "vllm_bench"
        elif len(documents) == 1 and isinstance(first, list):
            frame = _read_records(iter(enumerate(first, start=1)), name, deployment)
            origin = "jsonl"
        else:
            frame = _read_records(iter(documents), name, deployment)
            origin = "jsonl"
    elif stripped:
        header = stripped.splitlines()[0]
        if "," not in header and "start" not in header:
            raise InputError(
                name,
                "not a recognised latency file: expected vllm bench serve JSON, GuideLLM "
                "benchmarks.json, or CSV/JSONL per-request rows (see docs/sources.md)",
                1,
            )
        frame = _read_csv(text, name, deployment)
        origin = "csv"
    else:
        raise InputError(name, "empty file")
    try:
        delta = _offset(frame, runs, start)
        frame = _shift(frame, start)
    except ValueError as exc:
        raise InputError(name, str(exc)) from None
    runs = [_moved(run, delta, start) for run in runs]
    if frame.is_empty() and not any(run.stats or run.requests for run in runs):
        raise InputError(
            name, f"no per-request latencies and no whole-run figures in this {origin} file"
        )
    if frame.is_empty() and runs:
        notes.append(
            "whole-run figures only (vllm bench serve without --save-detailed, or a summary): "
            "shown per run; per-window latency needs per-request rows"
        )
    return BenchResult(name, origin, frame, runs, notes)


def _offset(frame: pl.DataFrame, runs: Sequence[BenchRun], start: datetime | None) -> timedelta:
    """How far a given `start` moves the runs: as far as it moves the earliest request."""
    if start is None:
        return timedelta(0)
    if start.tzinfo is None:
        raise ValueError("start must be timezone-aware")
    if not frame.is_empty() and frame["start"].null_count() < frame.height:
        earliest: datetime = frame["start"].min()  # type: ignore[assignment]
        return start.astimezone(UTC) - earliest
    placed = [run.start for run in runs if run.start is not None]
    return start.astimezone(UTC) - min(placed) if placed else timedelta(0)


def _moved(run: BenchRun, delta: timedelta, start: datetime | None) -> BenchRun:
    """A run re-anchored by `delta`; a run that never said when it ran starts at `start`."""
    if run.start is not None:
        if not delta:
            return run
        end = run.end + delta if run.end is not None else None
        return replace(run, start=run.start + delta, end=end)
    if start is None:
        return run
    begin = start.astimezone(UTC)
    end = _after(begin, run.duration_s)
    return replace(run, start=begin, end=end)


def read_latencies(
    path: str | Path, *, deployment: str, start: datetime | None = None
) -> pl.DataFrame:
    """Per-request latencies (REQUEST_LATENCIES) from any supported client-result file.

    Raises InputError naming the file (and line) on anything unreadable, and when the file
    holds only whole-run figures (vllm bench without --save-detailed): use `read_bench`.
    """
    result = read_bench(path, deployment=deployment, start=start)
    if result.latencies.is_empty():
        hint = (
            " (rerun vllm bench serve with --save-detailed)"
            if result.origin == "vllm_bench"
            else ""
        )
        raise InputError(
            result.path, f"no per-request latencies in this {result.origin} file{hint}"
        )
    return result.latencies
