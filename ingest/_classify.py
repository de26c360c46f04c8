"""A message against the catalogue rows: its kind and its columns, or None.

The second step of the per-line path (ingest/_lines.py), after the envelope (_envelope.py).
Owns the catalogue rows matched at the message start (or behind a lead a bare line may have),
the stats fields, config pairs and KV-sizing quantities converted as the column-wise path
(ingest/_extract.py) converts them, so both paths give the same rows, and whether a record's
numbers fit their columns (one bad line costs one line). Never finds an envelope.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any

import polars as pl
import regex
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest._envelope import FLAGS, Env, envelope, json_line, to_int, to_num

STATS_BUDGET = 4096  # a stats record is a few hundred bytes; its fields come first
# Real engine-config lines are 1-4 KB with the capacity keys in their first KB; the pairs
# after 16 KiB are not read, so a huge config-like line costs no more than a real one.
CONFIG_BUDGET = 16 * 1024
ROW_RES = [
    (row, regex.compile(row.pattern, FLAGS))
    for row in cat.ALL_ROWS
    if row.kind not in ("access", "scheduler_stats")
]
# Per row: its pattern, its literal when that is not ASCII (the logo's; in every match:
# tests/ingest/test_hostile_lines.py), whether it may stand bare, whether it is KV sizing. A
# literal that is not ASCII is not in an ASCII message, which `in` answers at once, where the
# logo patterns' own search for it reads the whole message.
_ROW_CHECKS = [
    (
        row,
        pattern,
        None if row.literal.isascii() else row.literal,
        row.bare_ok,
        row.kind == "kv_capacity",
    )
    for row, pattern in ROW_RES
]
ACCESS_RE = regex.compile(cat.ACCESS_ROW.pattern, FLAGS)
STATS_START_RE = regex.compile(cat.STATS_RECORD_START, FLAGS)
STATS_FIELD_RES = [(name, regex.compile(pattern, FLAGS)) for name, pattern in cat.STATS_FIELDS]
STATS_KNOWN_RE = regex.compile(cat.STATS_KNOWN_FIELDS, FLAGS)


def _fraction(percent: str | None) -> float | None:
    """A percentage as a fraction, computed as Polars does (x * 0.01) so both paths agree."""
    value = to_num(percent)
    return None if value is None else value * 0.01


def _commas(text: str) -> str:
    """Runs of commas and the whitespace around them as one `, ` (the vectorised path's
    `(?:\\s*,\\s*)+` replace, without a regex that backtracks on long whitespace runs; its
    `\\s`, cat.SPACES, not str.strip()'s, which holds U+001C-U+001F too)."""
    if "," not in text:
        return text
    pieces = text.split(",")
    spaces = cat.SPACES
    kept = [
        piece.strip(spaces) if 0 < i < len(pieces) - 1 else piece for i, piece in enumerate(pieces)
    ]
    first, last = kept[0].rstrip(spaces), kept[-1].lstrip(spaces)
    middle = [piece for piece in kept[1:-1] if piece]
    return ", ".join([first, *middle, last]) if len(pieces) > 1 else text


def stats_fields(message: str) -> dict[str, Any]:
    """Known fields of one stats record (fractions for percentages); the rest kept as `extra`."""
    found: dict[str, str | None] = {}
    for name, pattern in STATS_FIELD_RES:
        match = pattern.search(message)
        found[name] = match.group(1) if match else None
    pending = found.pop("pending_marker") is not None
    era: str | None = None
    if pending or found["swapped"] is not None:
        era = "v0"
    elif found["waiting"] is not None or found["engine"] is not None:
        era = "v1"
    gpu = _fraction(found["gpu_kv_cache_usage"])
    cpu = _fraction(found["cpu_kv_cache_usage"]) if era == "v0" else None
    generation = to_num(found["generation_throughput"])
    if generation is None:
        generation = to_num(found["throughput_v01"])
    ints, floats = cat.STATS_INT_FIELDS, cat.STATS_FLOAT_FIELDS
    # A field whose text is there but is no number of its column (`1.2.3`, 400 digits):
    # out_of_range makes the line unrecognised, as the vectorised path does.
    invalid = next(
        (
            name
            for name in (*ints, *floats)
            if found[name] is not None
            and (to_int(found[name]) if name in ints else to_num(found[name])) is None
        ),
        None,
    )
    return {
        "_invalid": invalid,
        "era": era,
        "engine": to_int(found["engine"]),
        "prompt_throughput": to_num(found["prompt_throughput"]),
        "generation_throughput": generation,
        "running": to_int(found["running"]),
        "waiting": to_int(found["waiting"]),
        "swapped": to_int(found["swapped"]),
        "deferred": to_int(found["deferred"]),
        "preemptions": to_int(found["preemptions"]),
        "kv_device": found["kv_device"],
        "gpu_kv_cache_usage": gpu,
        "cpu_kv_cache_usage": cpu,
        "prefix_cache_hit_rate": _fraction(found["prefix_cache_hit_rate"]),
        "external_prefix_cache_hit_rate": _fraction(found["external_prefix_cache_hit_rate"]),
        "mm_cache_hit_rate": _fraction(found["mm_cache_hit_rate"]),
        # The rest after the known fields: computed for a batch's rows at once (fill_rests).
        "extra": _Rest(message),
    }


@dataclass(frozen=True)
class _Rest:
    """A stats record's text whose `extra` (what is left after the known fields) is due."""

    text: str


# Above this many bytes of stats text in one batch, Polars removes the known fields (a cost
# per call, then little a byte); below, the `regex` module does (cheap a record, but its
# alternation of fields is tried at every position).
_REST_IN_POLARS = 32 * 1024


def fill_rests(stats_rows: list[dict[str, Any]]) -> None:
    """Set `extra` of the stats rows of a batch, with the vectorised path's steps, so both
    paths give the same `extra`."""
    rows = [row for row in stats_rows if isinstance(row["extra"], _Rest)]
    if not rows:
        return
    texts = [row["extra"].text for row in rows]
    if sum(len(text) for text in texts) > _REST_IN_POLARS:
        known = pl.Series(texts, dtype=pl.String).str.replace_all(cat.STATS_KNOWN_FIELDS, "")
        rests = known.to_list()
    else:
        rests = [STATS_KNOWN_RE.sub("", text) for text in texts]
    for row, rest in zip(rows, rests, strict=True):
        row["extra"] = _commas(rest).strip(" ,.") or None


def stats_complete(fields: dict[str, Any]) -> bool:
    return all(fields[k] is not None for k in ("running", "waiting", "gpu_kv_cache_usage"))


# `\b`: a key is tried once per word, not at every letter of it; quoted values are bounded,
# so an unclosed quote costs 4 KiB, not the rest of the line, per key.
# stdlib `re`: the same matches as `regex`, a faster findall, linear in both.
_PAIR_RE = re.compile(
    r"\b(?P<key>[A-Za-z_]\w{0,80})="
    r"(?P<value>'(?:[^'\\]|\\.){0,4096}'|\"(?:[^\"\\]|\\.){0,4096}\"|\[[^\]]{0,4096}\]|[^,\s)]{1,4096})"
)


# The same for the `'key': value` items of a dict literal (non-default args). Not
# ast.literal_eval of the whole payload (slow a byte): only a capacity key's short value is
# evaluated.
_DICT_PAIR_RE = re.compile(
    r"'(?P<key>[A-Za-z_]\w{0,80})': "
    r"(?P<value>'(?:[^'\\]|\\.){0,4096}'|\"(?:[^\"\\]|\\.){0,4096}\"|\[[^\]]{0,4096}\]|[^,}\s]{1,4096})"
)
_EVAL_MAX = 1024


def _dict_value(text: str) -> str:
    """One value of a dict literal as str(): a one-item list as its item."""
    if len(text) > _EVAL_MAX:
        return text.strip("'\"")
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text.strip("'\"")
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    return str(value)


def config_pairs(origin: str, payload: str) -> dict[str, str]:
    """Capacity settings out of `key=value, ...` lists or a Python dict literal."""
    values: dict[str, str] = {}
    if origin == "non_default_args":
        last: dict[str, str] = {}  # the last one wins, as in the dict; evaluated once
        pairs = _DICT_PAIR_RE.findall(payload[:CONFIG_BUDGET])
        for key, text in [pair for pair in pairs if pair[0] in cat.CONFIG_KEYS]:
            name = cat.CONFIG_KEYS[key]
            last.pop(name, None)  # keeps the dict's order of the last occurrences
            last[name] = text
        return {name: _dict_value(text) for name, text in last.items()}
    # findall builds the (key, value) pairs in C and a comprehension drops the keys of no
    # interest (no Match object per pair).
    pairs = _PAIR_RE.findall(payload[:CONFIG_BUDGET])
    for key, value in [pair for pair in pairs if pair[0] in cat.CONFIG_KEYS]:
        name = cat.CONFIG_KEYS[key]
        if name not in values:
            value = value.strip("'\"")
            if value not in ("None", ""):
                values[name] = value
    return values


def classify(message: str, env: Env) -> tuple[str, dict[str, Any]] | None:
    """Kind and columns of one message; None when no catalogue row fits."""
    message = message.rstrip("\r\n")
    if env.file == "uvicorn":
        # uvicorn's loggers print its own messages and access lines, never a vLLM record: a
        # stats start behind `INFO:` is an access line's client (X-Forwarded-For). Its access
        # logger writes at INFO only (the router claims `INFO:` lines).
        match = ACCESS_RE.match(message) if env.level == "INFO" else None
        if match is not None:
            return "access", {
                "client": match.group("client"),
                "method": match.group("method"),
                "path": match.group("path"),
                "http_version": match.group("http_version"),
                "status": int(match.group("status")),
            }
        return None
    if STATS_START_RE.match(message) or message.startswith("Throughput: "):
        return "scheduler_stats", stats_fields(message[:STATS_BUDGET])
    # Where a record may start in a message without an envelope, past position 0: found once
    # for every row, not per row.
    starts = [] if env.known else _bare_starts(message)
    # vLLM's startup refusal raises its sizing line as an exception's message (`ValueError:
    # Free memory on device ...`). Sizing only: no count or verdict rests on it, so an
    # exception that echoes a user's text cannot forge one.
    exception = None if env.known else _EXCEPTION_LEAD.match(message)
    for row, pattern, literal, bare_ok, sizing in _ROW_CHECKS:
        if literal is not None and literal not in message:
            continue
        if row.kind == "requests" and not env.known:
            # vLLM's request logger always writes its header: a request line without a
            # known envelope is what a hard-wrapped prompt's tail looks like (the router
            # reads request rows behind a header only).
            continue
        match = pattern.match(message)
        if match is None:
            for start in starts if bare_ok else ():
                match = pattern.match(message, start)
                if match is not None:
                    break
            if match is None and sizing and exception is not None:
                match = pattern.match(message, exception.end())
            if match is None:
                continue
        return row.kind, _row_columns(row, match)
    for start in starts:
        if STATS_START_RE.match(message, start) is not None:
            return "scheduler_stats", stats_fields(message[start:][:STATS_BUDGET])
    return None


# What may stand in front of a message on a line without an envelope: a few symbols (a quote
# bar, `# `), or an elided header (`INFO ... [gpu_worker.py:489] `). Not a sentence: text
# written after a word (an exception's message, a user's text) never starts a record.
BARE_LEADS = (
    regex.compile(r"[^\w\n]{1,8}", FLAGS),
    regex.compile(
        r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) )?[^\w\n\[]{0,16}\[?[\w.-]{1,80}:[0-9]{1,9}\] ?",
        FLAGS,
    ),
)


_EXCEPTION_LEAD = regex.compile(r"[A-Z]\w{0,60}(?:Error|Exception): ", FLAGS)


def _bare_starts(message: str) -> list[int]:
    """Where a record may start right after a lead that BARE_LEADS allow, in their order."""
    return [lead.end() for lead_re in BARE_LEADS if (lead := lead_re.match(message)) is not None]


def _row_columns(row: cat.LineFormat, match: regex.Match[str]) -> dict[str, Any]:
    groups = match.groupdict()
    if row.kind == "preemption_warning":
        return {
            "request_id": groups["request_id"],
            "mode": groups["mode"],
            "cumulative": to_int(groups.get("cumulative")),
        }
    if row.kind == "kv_capacity":
        device = groups.get("device")
        context = to_int(groups.get("context"))
        quantities = []
        for group, kind, unit in row.quantities:
            value = to_num(groups.get(group))
            if value is None:
                continue
            if unit == "GB" and groups.get("unit") == "GiB":
                unit = "GiB"
            if groups.get(f"{group}_unit") == "bytes":
                value /= 1024**3  # printed in bytes (v0.10.2 – v0.11.x); the row is in GiB
            quantities.append(
                {
                    "kind": kind,
                    "value": value,
                    "unit": unit,
                    "context_tokens": context if kind == "max_concurrency" else None,
                    "device": device if kind not in ("cpu_blocks",) else "CPU",
                }
            )
        return {"_many": quantities}
    if row.kind == "config":
        pairs: dict[str, str] = {}
        if row.config_origin in ("engine_config", "non_default_args", "args_namespace"):
            pairs.update(config_pairs(row.config_origin, groups.get("payload") or ""))
        for key in (
            "vllm_version",
            "engine_version",
            "model",
            "max_num_batched_tokens",
            "max_model_len",
        ):
            if groups.get(key):
                pairs[key] = groups[key]
        if groups.get("key") and groups.get("value"):
            pairs[groups["key"]] = groups["value"]
        return {
            "_many": [
                {"key": key, "value": value, "origin": row.config_origin}
                for key, value in pairs.items()
            ]
        }
    if row.kind == "requests":
        # The id as the row delimits it: the sentence's one dot (`Added request %s.`) is
        # outside the group, and a client's own trailing dots (`req.`) are its id's.
        return {"event": row.constants["event"], "request_id": groups["request_id"]}
    raise AssertionError(row.kind)


def record(
    text: str, read: tuple[Env, str] | None = None
) -> tuple[Env, str, tuple[str, dict[str, Any]] | None]:
    """Envelope, message and kind of one record's text; `read`: envelope(text), when known."""
    decoded = json_line(text) if text.startswith("{") else None
    if decoded is None:
        decoded = read if read is not None else envelope(text)
    env, message = decoded
    return env, message, classify(message, env)


_INT64 = (-(1 << 63), (1 << 63) - 1)


def out_of_range(env: Env, found: tuple[str, dict[str, Any]] | None) -> str | None:
    """Why a record cannot be stored (a number that does not fit its column), or None."""
    columns: dict[str, Any] = {"pid": env.pid, "logger_line": env.lineno}
    if found is not None:
        kind, values = found
        items = values.get("_many")
        for item in items if items is not None else [values]:
            columns.update({f"{kind}.{k}": v for k, v in item.items()})
    for name, value in columns.items():
        if name.endswith("._invalid") and value is not None:
            return f"number not valid: {name.removesuffix('._invalid')}.{value}"
        if isinstance(value, bool) or value is None or isinstance(value, str):
            continue
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            return f"number out of range: {name} does not fit in 64 bits"
        if isinstance(value, float) and not math.isfinite(value):
            return f"number out of range: {name} is not finite"
    return None
