"""The live history on disk, so a restart keeps what the verdict is computed from.

The verdict and the window gauges come from the recent frames (`--history`), not from the
running totals. A kill -9 must not forget them, so each checkpoint first writes the frames
added since the previous one as a segment file, then names the segments in checkpoint.json
(exporter/state.py): frames, totals and offsets always agree, since a segment counts only
once the checkpoint naming it is written. Every COMPACT_AFTER segments the whole pruned
history is written as one segment and the older ones are deleted.

A segment file: MAGIC, an 8-byte big-endian header length, a JSON header, then the tables as
Polars IPC blobs (no pyarrow: Polars writes and reads IPC itself).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
from preemptscope.ingest.schema import (
    ARRIVALS,
    FRAME_SCHEMAS,
    JOINED,
    METRIC_SAMPLES,
    LineAccounting,
    LogFrames,
)

LOG = logging.getLogger("preemptscope.exporter.history")

MAGIC = b"PSHIST1\n"
DIRECTORY = "history"
# A full rewrite after this many incremental segments (about one a minute at one checkpoint
# a second): the journal never holds much more than the history itself.
COMPACT_AFTER = 60
_ACCOUNTING = ("lines", "parsed_lines", "unrecognized_lines", "blank_lines")


@dataclass
class HistorySegment:
    """Log batches (as LiveState keeps them) and scraped samples, per deployment."""

    logs: list[LogFrames] = field(default_factory=list)
    metrics: list[tuple[str, pl.DataFrame]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.logs or self.metrics)


class HistoryError(Exception):
    """A segment that cannot be read (damaged from outside, or of another format)."""


def _blob(frame: pl.DataFrame, blobs: list[bytes], offset: list[int]) -> list[int]:
    buffer = io.BytesIO()
    frame.write_ipc(buffer, compression="lz4")
    data = buffer.getvalue()
    blobs.append(data)
    where = [offset[0], len(data)]
    offset[0] += len(data)
    return where


def encode(segment: HistorySegment) -> bytes:
    blobs: list[bytes] = []
    offset = [0]
    logs = []
    for frames in segment.logs:
        logs.append(
            {
                "source": frames.source,
                "deployment": frames.deployment,
                "vllm_version": frames.vllm_version,
                "log_era": frames.log_era,
                "timezone": frames.timezone,
                "year_source": frames.year_source,
                "summarized": dict(frames.summarized),
                "accounting": {name: getattr(frames.accounting, name) for name in _ACCOUNTING},
                "frames": {
                    kind: _blob(frame, blobs, offset) for kind, frame in frames.frames.items()
                },
                "arrivals": None
                if frames.arrivals is None
                else _blob(frames.arrivals, blobs, offset),
                "joined": None if frames.joined is None else _blob(frames.joined, blobs, offset),
            }
        )
    metrics = [
        {"deployment": name, "samples": _blob(frame, blobs, offset)}
        for name, frame in segment.metrics
    ]
    header = json.dumps({"logs": logs, "metrics": metrics}).encode()
    return b"".join([MAGIC, len(header).to_bytes(8, "big"), header, *blobs])


def decode(data: bytes) -> HistorySegment:
    if not data.startswith(MAGIC) or len(data) < len(MAGIC) + 8:
        raise HistoryError("not a preemptscope history segment")
    start = len(MAGIC) + 8
    size = int.from_bytes(data[len(MAGIC) : start], "big")
    try:
        header = json.loads(data[start : start + size])
        body = memoryview(data)[start + size :]

        def table(where: list[int], schema: pl.Schema | None, name: str) -> pl.DataFrame:
            first, length = int(where[0]), int(where[1])
            if first < 0 or first + length > len(body):
                raise HistoryError("a table lies past the end of the segment")
            frame = pl.read_ipc(io.BytesIO(body[first : first + length]))
            # Written by another version of preemptscope: its tables would break the analysis.
            if schema is None or frame.schema != schema:
                raise HistoryError(f"table {name} has columns this version does not write")
            return frame

        segment = HistorySegment()
        for item in header["logs"]:
            frames = LogFrames(
                source=str(item["source"]),
                deployment=str(item["deployment"]),
                frames={
                    str(k): table(v, FRAME_SCHEMAS.get(str(k)), str(k))
                    for k, v in item["frames"].items()
                },
                accounting=LineAccounting(**{k: int(item["accounting"][k]) for k in _ACCOUNTING}),
                vllm_version=item["vllm_version"],
                log_era=item["log_era"],
                timezone=str(item["timezone"]),
                year_source=item["year_source"],
                summarized={str(k): int(v) for k, v in item["summarized"].items()},
                arrivals=None
                if item["arrivals"] is None
                else table(item["arrivals"], _without_source(ARRIVALS), "arrivals"),
                joined=None
                if item["joined"] is None
                else table(item["joined"], _without_source(JOINED), "joined"),
            )
            segment.logs.append(frames)
        for item in header["metrics"]:
            samples = table(item["samples"], METRIC_SAMPLES, "samples")
            segment.metrics.append((str(item["deployment"]), samples))
    except HistoryError:
        raise
    except Exception as exc:  # any damage reads as one reason, never a traceback
        raise HistoryError(f"damaged segment ({type(exc).__name__}: {exc})") from None
    return segment


def _without_source(schema: pl.Schema) -> pl.Schema:
    """The live state keeps one file per LogFrames: the reducer's `source` column is dropped."""
    return pl.Schema({name: dtype for name, dtype in schema.items() if name != "source"})


class HistoryJournal:
    """The segment files of one state directory (numbered; the checkpoint says which count)."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = state_dir / DIRECTORY

    def path(self, seq: int) -> Path:
        return self.directory / f"segment-{seq:012d}.bin"

    def write(self, seq: int, segment: HistorySegment) -> None:
        """Write one segment atomically and durably (before the checkpoint names it)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        payload = encode(segment)
        fd, tmp = tempfile.mkstemp(prefix=".segment-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path(seq))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def read(self, seqs: list[int]) -> list[HistorySegment]:
        """The named segments in order; raises HistoryError naming the first unreadable one."""
        out = []
        for seq in seqs:
            path = self.path(seq)
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise HistoryError(f"{path}: cannot read: {exc.strerror}") from None
            try:
                out.append(decode(data))
            except HistoryError as exc:
                raise HistoryError(f"{path}: {exc}") from None
        return out

    def keep_only(self, seqs: list[int]) -> None:
        """Delete segments the checkpoint no longer names (and leftovers of a crash)."""
        keep = {self.path(seq).name for seq in seqs}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return
        for name in names:
            if name not in keep and (name.startswith(("segment-", ".segment-"))):
                with contextlib.suppress(OSError):
                    os.unlink(self.directory / name)


def restore_info(data: Any) -> list[int]:
    """The segment numbers a checkpoint names ([] for checkpoints without a history)."""
    if not isinstance(data, dict):
        return []
    seqs = data.get("segments", [])
    return [int(s) for s in seqs] if isinstance(seqs, list) else []
