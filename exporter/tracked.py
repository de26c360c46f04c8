"""What a followed file is: its incarnation's checkpoint, its read state, the chunks it yields.

Owns the checkpoint format (`FileCheckpoint`, `FollowerCheckpoint`, written by the service's
state file) and the per-file read state (`Tracked`). It opens, reads and watches nothing: the
follower (`exporter/follower.py`) and its rotation watch (`exporter/rotation.py`) do.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Literal

LOG = logging.getLogger("preemptscope.exporter.follower")

FINGERPRINT_BYTES = 1024
READ_CHUNK = 1 << 20
MAX_READ_PER_POLL = 16 << 20  # keep one busy file from starving the others
LOST_GRACE_S = 10.0  # how long a truncated file's copy may take to appear
FINISHED_KEPT = 10_000  # a safety cap; entries normally expire by age
# File timestamps come from the kernel's coarse clock (a jiffy behind time.time()), and some
# filesystems are coarser still: scans look this far before the previous one.
MTIME_SLACK = 1.0
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".zip")

RotationKind = Literal["rename", "copytruncate", "truncate", "missing"]


@dataclass(frozen=True)
class FileCheckpoint:
    """Where reading one file incarnation stopped: enough to find it again and resume."""

    dev: int
    inode: int
    offset: int  # bytes consumed up to the end of the last complete line
    line: int  # physical lines consumed
    fingerprint: str  # sha256 hex of the first fp_len bytes
    fp_len: int
    key: str = ""  # the incarnation id given to chunks, kept stable across restarts
    # Inside a line longer than MAX_LINE_BYTES that starts at `offset`: the bytes of it read
    # so far (0 when not inside one). A restart reads its head again and skips the rest.
    cut_read: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "dev": self.dev,
            "inode": self.inode,
            "offset": self.offset,
            "line": self.line,
            "fingerprint": self.fingerprint,
            "fp_len": self.fp_len,
            "key": self.key,
            "cut_read": self.cut_read,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FileCheckpoint:
        return cls(
            dev=int(data["dev"]),
            inode=int(data["inode"]),
            offset=int(data["offset"]),
            line=int(data["line"]),
            fingerprint=str(data["fingerprint"]),
            fp_len=int(data["fp_len"]),
            key=str(data.get("key", "")),
            cut_read=int(data.get("cut_read", 0)),
        )


@dataclass(frozen=True)
class FollowerCheckpoint:
    path: str
    current: FileCheckpoint | None
    draining: tuple[FileCheckpoint, ...] = ()
    # Wall-clock time of the checkpoint: rotated siblings modified later that match no
    # entry were born and rotated while we were down, and are read whole.
    saved_at: float = 0.0
    # Files recently read to the end (drained renames, recovered copies), so a restart
    # does not take them for unknown files and read them again.
    finished: tuple[FileCheckpoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "current": self.current.to_dict() if self.current else None,
            "draining": [c.to_dict() for c in self.draining],
            "saved_at": self.saved_at,
            "finished": [c.to_dict() for c in self.finished],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FollowerCheckpoint:
        current = data.get("current")
        return cls(
            path=str(data["path"]),
            current=FileCheckpoint.from_dict(current) if current else None,
            draining=tuple(FileCheckpoint.from_dict(c) for c in data.get("draining", [])),
            saved_at=float(data.get("saved_at", 0.0)),
            finished=tuple(FileCheckpoint.from_dict(c) for c in data.get("finished", [])),
        )


@dataclass(frozen=True)
class Chunk:
    """Complete lines read from one file incarnation, in order, without their newlines."""

    lines: list[str]
    first_line: int  # 1-based physical line number of lines[0] in that incarnation
    incarnation: str  # "dev:inode:fingerprint-of-first-bytes" at open; new value = new file
    new_incarnation: bool  # True for the first chunk of a file (reset any parser state)
    # line number -> real length of a line cut at MAX_LINE_BYTES (its text is the first bytes;
    # it comes once its newline has been read)
    cut: dict[int, int] = field(default_factory=dict)


@dataclass
class Tracked:
    fd: int
    dev: int
    inode: int
    offset: int  # bytes read from the file (including a held-back partial line)
    line: int  # complete lines emitted
    partial: bytes = b""
    head: bytes = b""  # the first bytes of this incarnation, as read (up to FINGERPRINT_BYTES)
    fp_hash: str = ""
    fp_len: int = 0
    fp_bytes: bytes = b""
    quiet_since: float = field(default_factory=time.monotonic)
    started: bool = False  # a chunk has been emitted for this incarnation
    key: str = ""
    # Inside a line cut at MAX_LINE_BYTES: `partial` holds its first MAX_LINE_BYTES and its
    # rest is read past until the newline (`skipped` bytes so far), so none of it is read
    # as lines of its own (a prompt's tail would otherwise start a "record").
    skipping: bool = False
    skipped: int = 0

    @property
    def committed(self) -> int:
        # After copytruncate a partial line carried over from the copy may be longer than
        # what was read of the new file; a restart then resumes at 0 (the fragment's start
        # stays in the copy).
        return max(0, self.offset - len(self.partial) - self.skipped)

    def checkpoint(self) -> FileCheckpoint:
        return FileCheckpoint(
            dev=self.dev,
            inode=self.inode,
            offset=self.committed,
            line=self.line,
            fingerprint=self.fp_hash,
            fp_len=self.fp_len,
            key=self.key,
            cut_read=self.offset - self.committed if self.skipping else 0,
        )


def fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pread_all(fd: int, size: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        block = os.pread(fd, size, offset)
        if not block:
            break
        parts.append(block)
        size -= len(block)
        offset += len(block)
    return b"".join(parts)
