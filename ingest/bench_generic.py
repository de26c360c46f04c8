"""Generic per-request rows, CSV with a header or JSON Lines, into client rows.

Columns (GENERIC_COLUMNS): `start` (ISO 8601 or Unix seconds) and `e2e` seconds (or `e2e_ms`,
or `end`), optionally `request_id`, `ttft`, `tpot` (seconds or `_ms`), `prompt_tokens`,
`output_tokens`, `success`, `priority`. This module owns the columns and their checks: a bad
value is an InputError naming the file and line. It never opens a file.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import polars as pl
from preemptscope.ingest.bench_rows import _dated, _priority, _Rows
from preemptscope.ingest.schema import YEAR_RANGE

from preemptscope.errors import InputError

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

_TRUE = {"true", "1", "yes", "y", "ok", "t"}
_FALSE = {"false", "0", "no", "n", "f", "error", "failed"}


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
