"""What a file that held no vLLM line looks like, so a slip gets a useful error, not a report.

Owns the one-line description of a non-log input (binary, bench JSON, config, `/metrics`).
Called only after parsing found no vLLM line in an input (a log damaged by NUL bytes or written
as JSON lines still parses), so a guess here never hides data. It never makes a record and
reads no more than a file's first HEAD_BYTES (and a directory's listing).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

from preemptscope.ingest._reader import open_binary
from preemptscope.ingest.logs import _NOT_LOGS  # the suffixes a directory's log walk skips

from preemptscope.errors import InputError

HEAD_BYTES = 64 * 1024
_MAGIC = (
    (b"\x89PNG", "PNG image"),
    (b"\xff\xd8\xff", "JPEG image"),
    (b"GIF8", "GIF image"),
    (b"%PDF", "PDF"),
    (b"PK\x03\x04", "zip archive"),
    (b"PAR1", "Parquet file"),
    (b"\x7fELF", "executable"),
)
# Keys of a Hugging Face model config (config.json), as the capacity calculator reads it.
_MODEL_KEYS = re.compile(
    rb'"(num_attention_heads|architectures|num_hidden_layers|hidden_size|model_type)"'
)
_PROM = re.compile(rb"^(# (HELP|TYPE) \S+|vllm:\w+(\{[^}\n]*\})? \S+)", re.MULTILINE)


def holds_vllm(records: Mapping[str, int]) -> bool:
    """Whether parsing found any vLLM record (per-kind counts as LogFrames.record_counts)."""
    return any(count > 0 for kind, count in records.items() if kind != "unrecognized")


def head(path: str) -> bytes:
    """The first HEAD_BYTES of a file (decompressed when gzip); b"" for stdin or unreadable."""
    if path == "-":
        return b""
    try:
        with open_binary(path) as handle:
            return handle.read(HEAD_BYTES)
    except (OSError, EOFError, InputError):
        return b""


def _binary(data: bytes) -> bool:
    if b"\x00" in data:
        return True
    text = data.decode("utf-8", "replace")
    odd = sum(1 for c in text if c == "\ufffd" or (c < " " and c not in "\t\r\n\f\v\x1b"))
    return odd > max(8, len(text) // 100)


def describe(data: bytes, lines: int, *, report: bool) -> str:
    """Why an input with no vLLM line is not a log, with what to pass instead.

    `data` is the file's head, `lines` the physical lines parsing counted; `report` says whether
    the hints may name `report`'s own flags (--bench, --metrics) or must name the command.
    """
    bench = "--bench" if report else "`preemptscope report --bench`"
    metrics = "--metrics" if report else "`preemptscope report --metrics`"
    for magic, kind in _MAGIC:
        if data.startswith(magic):
            return f"not a vLLM log: binary ({kind})"
    if lines == 0 and not data:
        return "not a vLLM log: the file is empty"
    if _binary(data):
        return "not a vLLM log: binary"
    stripped = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"[") and _json(stripped, whole=len(data) < HEAD_BYTES):
        if _MODEL_KEYS.search(data):
            return (
                "not a vLLM log: JSON, a model config.json? "
                "(`preemptscope capacity --config FILE` reads it)"
            )
        return f"not a vLLM log: JSON: did you mean {bench} FILE (client results)?"
    if _PROM.search(data):
        return f"not a vLLM log: a /metrics snapshot: pass it with {metrics} FILE"
    plural = "" if lines == 1 else "s"
    return f"not a vLLM log: no vLLM line among {lines} line{plural}"


# A head cut at HEAD_BYTES cannot parse whole; a parse that fails this far in read JSON
# up to there (text that only opens with a bracket, "[INFO] ...", fails at once).
_JSON_PREFIX = 1024


def _json(text: bytes, *, whole: bool) -> bool:
    """Whether text opening with { or [ is JSON: the whole head, or its first line (JSON
    Lines), parses; or, for a head cut short, the parse fails only past the first KiB."""
    decoded = text.decode("utf-8", "replace")
    first = decoded.split("\n", 1)[0]
    for candidate in (decoded, first) if whole else (first,):
        try:
            json.loads(candidate)
        except ValueError:
            continue
        return True
    if whole:
        return False
    try:
        json.loads(decoded)
    except json.JSONDecodeError as err:
        return err.pos >= _JSON_PREFIX
    return True


def describe_path(path: str, lines: int, *, report: bool) -> str:
    return describe(head(path), lines, report=report)


def metrics_only_dir(path: str) -> str | None:
    """For a directory with no log but /metrics snapshots (.prom), what to pass instead."""
    directory = Path(path)
    if not directory.is_dir():
        return None
    files = [p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(".")]
    snapshots = [p for p in files if p.suffix.lower() == ".prom"]
    # Only when no file would be read as a log (the log reader skips these suffixes too).
    if not snapshots or any(p.suffix.lower() not in _NOT_LOGS for p in files):
        return None
    plural = "" if len(snapshots) == 1 else "s"
    return (
        f"holds {len(snapshots)} /metrics snapshot{plural} (.prom) and no log: "
        f"pass it as --metrics {path}"
    )
