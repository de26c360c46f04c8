"""Follow a log file like `tail -F`, checkpointably, losing no line and counting none twice.

A file is identified by (device, inode) plus a fingerprint: the SHA-256 of its first bytes.
- Rename rotation: the path gets a new inode. The old file stays open ("draining") until it
  has been quiet for `drain_grace` seconds, since some writers keep appending to the renamed
  file until they reopen (logrotate `create` + signal).
- copytruncate: same inode, but the file shrank or its first bytes changed. The unread tail
  (from our offset to the end of the copy) is read from the copy, found next to the file by
  its fingerprint; then the truncated file is read from 0.
- A restart resumes from a checkpoint (`FollowerCheckpoint`): each tracked file is found
  again by inode (renamed) or fingerprint (copied) among the path and its rotated siblings.
- A partial last line is held back until its newline arrives; checkpoints store the offset
  of the last complete line, so a restart re-reads the partial line rather than losing it.
- A line longer than MAX_LINE_BYTES is cut: its first MAX_LINE_BYTES are held, the rest is
  read past (never kept, never read as lines of its own: a prompt's tail could forge a
  record), and the line is emitted once, with its real length, when its newline comes. A
  checkpoint inside it says how much of it was read (`cut_read`): a restart takes its head
  again and goes on skipping from there.
Pure polling (no inotify): portable, and `poll_interval` bounds the latency.

This module owns the reading (lines, the held-back partial line, the cut of long lines); which
file is which after a rotation is `exporter/rotation.py`'s, the checkpoint types are
`exporter/tracked.py`'s. It never parses a line.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from preemptscope.exporter.rotation import RotationWatch
from preemptscope.exporter.tracked import (
    COMPRESSED_SUFFIXES,
    FINGERPRINT_BYTES,
    FINISHED_KEPT,
    LOG,
    LOST_GRACE_S,
    MAX_READ_PER_POLL,
    MTIME_SLACK,
    READ_CHUNK,
    Chunk,
    FileCheckpoint,
    FollowerCheckpoint,
    RotationKind,
    Tracked,
    fingerprint,
    pread_all,
)
from preemptscope.ingest._reader import ReadLimits

# A "line" longer than this is cut, so memory stays bounded (PREEMPTSCOPE_MAX_LINE_BYTES).
# Defined where the reading uses it, so setting follower.MAX_LINE_BYTES changes the cut.
MAX_LINE_BYTES = ReadLimits.from_env().max_line_bytes

__all__ = [
    "COMPRESSED_SUFFIXES",
    "FINGERPRINT_BYTES",
    "FINISHED_KEPT",
    "LOG",
    "LOST_GRACE_S",
    "MAX_LINE_BYTES",
    "MAX_READ_PER_POLL",
    "MTIME_SLACK",
    "READ_CHUNK",
    "Chunk",
    "FileCheckpoint",
    "FileFollower",
    "FollowerCheckpoint",
    "RotationKind",
]


class FileFollower(RotationWatch):
    """Follows one path. `poll()` returns new complete lines; `checkpoint()` says where it is."""

    def __init__(
        self,
        path: str,
        checkpoint: FollowerCheckpoint | None = None,
        *,
        start_at: Literal["beginning", "end"] = "beginning",
        drain_grace: float = 2.0,
        on_rotation: Callable[[RotationKind], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._dir = Path(path).parent
        self._base = Path(path).name
        self._start_at = start_at
        self._drain_grace = drain_grace
        self._on_rotation = on_rotation
        self._clock = clock
        self._current: Tracked | None = None
        self._draining: list[Tracked] = []
        self._pending: list[Chunk] = []
        self._resume = checkpoint
        self._seen_before = checkpoint is not None
        self.gaps = 0  # copytruncate / truncation where the unread tail could not be found
        # Files read to the end and let go (drained renames, recovered copies): if one grows
        # again it is resumed where it was left, never re-read from 0.
        self._finished: dict[tuple[int, int], FileCheckpoint] = {}
        self._finished_at: dict[tuple[int, int], float] = {}  # wall time, for expiry
        self._last_scan_wall = 0.0
        self._scan_again = False
        # Siblings that looked like a copy of the current file being made (copytruncate in
        # flight); resolved once the current file's head changes.
        self._suspects: dict[tuple[int, int], tuple[str, bytes, float]] = {}
        # Truncations whose copy was not found (yet): (what we had read, when).
        self._lost: list[tuple[FileCheckpoint, float]] = []
        self._rotation_seen = False

    # -- public -------------------------------------------------------------------------

    def poll(self) -> list[Chunk]:
        """Read everything new; never raises for a missing or rotating file."""
        now = time.time()  # before any listing: a file changed after it shows next scan
        if self._resume is not None:
            checkpoint, self._resume = self._resume, None
            self._restore(checkpoint)
            self._last_scan_wall, self._scan_again = now, True
        self._rotation_seen = False
        self._check_current()
        blind = self._current is None or self._current.fp_len == 0
        triggered = self._rotation_seen or blind or bool(self._suspects) or bool(self._lost)
        if self._last_scan_wall == 0.0:
            self._last_scan_wall = now  # first poll: what came before is not ours
        elif triggered or self._scan_again:
            # Rotations faster than our polls: a file can be born and rotated in between,
            # and a copytruncate of a file we have read nothing of leaves no trace in it.
            # One more scan after a triggered one closes the race with its own listing.
            since, self._last_scan_wall = self._last_scan_wall, now
            self._adopt_unknown_siblings(since)
        self._scan_again = triggered
        self._expire_lost()
        for tracked in list(self._draining):
            self._read(tracked, final=False)
            if self._clock() - tracked.quiet_since >= self._drain_grace:
                self._read(tracked, final=True)
                self._finish(tracked)
                self._draining.remove(tracked)
        if self._current is not None:
            self._read(self._current, final=False)
        chunks, self._pending = self._pending, []
        return chunks

    def checkpoint(self) -> FollowerCheckpoint:
        if self._resume is not None:  # not polled since restore: keep what we were given
            return self._resume
        return FollowerCheckpoint(
            path=self.path,
            current=self._current.checkpoint() if self._current else None,
            draining=tuple(t.checkpoint() for t in self._draining),
            saved_at=time.time(),
            finished=tuple(self._finished.values()),
        )

    def close(self) -> None:
        for tracked in [*self._draining, *([self._current] if self._current else [])]:
            self._close(tracked)
        self._draining.clear()
        self._current = None

    # -- reading ------------------------------------------------------------------------

    def _open_fd(self, path: str) -> int | None:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            return None

    def _open(self, st: os.stat_result, offset: int, line: int) -> Tracked | None:
        fd = self._open_fd(self.path)
        if fd is None:
            return None
        real = os.fstat(fd)  # the path may have changed between stat and open
        return self._track(fd, real, min(offset, real.st_size), line, None)

    def _track(
        self, fd: int, st: os.stat_result, offset: int, line: int, entry: FileCheckpoint | None
    ) -> Tracked:
        tracked = Tracked(fd=fd, dev=st.st_dev, inode=st.st_ino, offset=offset, line=line)
        tracked.started = line > 0 or offset > 0
        tracked.head = pread_all(fd, min(offset, FINGERPRINT_BYTES), 0)
        if entry is not None and entry.fp_len:
            tracked.fp_len = entry.fp_len
            tracked.fp_bytes = pread_all(fd, entry.fp_len, 0)
            tracked.fp_hash = entry.fingerprint
        self._grow_fingerprint(tracked)
        tracked.key = entry.key if entry is not None and entry.key else self._key(tracked)
        if entry is not None and entry.cut_read > 0:
            self._resume_cut(tracked, entry.cut_read)
        return tracked

    @staticmethod
    def _resume_cut(tracked: Tracked, cut_read: int) -> None:
        """Go on inside a long line that the checkpoint was taken in: its head is read
        again, the `cut_read` bytes of it read before are not (the newline is after them)."""
        head = pread_all(tracked.fd, min(cut_read, MAX_LINE_BYTES), tracked.offset)
        if len(head) < min(cut_read, MAX_LINE_BYTES):
            return  # the file is shorter than it was: the truncation check takes it from here
        tracked.partial = head
        tracked.offset += cut_read
        tracked.skipped = cut_read - len(head)
        tracked.skipping = tracked.skipped > 0

    def _key(self, tracked: Tracked) -> str:
        return f"{tracked.dev}:{tracked.inode}:{tracked.fp_hash[:16]}"

    def _grow_fingerprint(self, tracked: Tracked) -> None:
        """Fingerprint the first complete lines read, up to FINGERPRINT_BYTES. A partial
        first line is left out: its start ("INFO 05-19 ...") may match the next file.
        Taken from the bytes already read, never re-read: the file may have changed."""
        want = min(FINGERPRINT_BYTES, tracked.committed, len(tracked.head))
        if want > tracked.fp_len:
            head = tracked.head[:want]
            tracked.fp_bytes, tracked.fp_len = head, len(head)
            tracked.fp_hash = fingerprint(head)

    def _read(self, tracked: Tracked, *, final: bool, retry: bool = True) -> None:
        size = os.fstat(tracked.fd).st_size
        if size > tracked.offset:
            end = min(size, tracked.offset + MAX_READ_PER_POLL)
            raw = pread_all(tracked.fd, end - tracked.offset, tracked.offset)
            if tracked is self._current and not self._fingerprint_matches(tracked):
                # Copytruncated between our check and this read: the bytes may belong to
                # the new file. Drop them, finish the old one from its copy, read again.
                self._truncated(tracked)
                if retry:
                    self._read(tracked, final=final, retry=False)
                return
            self._consume(tracked, raw, tracked.offset + len(raw), own=True)
            tracked.quiet_since = self._clock()
        if final and tracked.partial:
            # A renamed file that has gone quiet: its unterminated last line is complete.
            real = len(tracked.partial) + tracked.skipped
            self._emit(
                tracked, [tracked.partial], {tracked.line + 1: real} if tracked.skipping else None
            )
            tracked.partial, tracked.skipped, tracked.skipping = b"", 0, False

    def _emit_range(self, tracked: Tracked, fd: int, start: int, end: int) -> None:
        """Emit bytes [start, end) of another file holding this incarnation (its copy)."""
        self._consume(tracked, pread_all(fd, end - start, start), end, own=False)

    def _consume(self, tracked: Tracked, raw: bytes, end: int, *, own: bool) -> None:
        if own and len(tracked.head) == tracked.offset < FINGERPRINT_BYTES:
            tracked.head += raw[: FINGERPRINT_BYTES - len(tracked.head)]
        tracked.offset = end
        pieces: list[bytes] = []
        cut: dict[int, int] = {}
        if tracked.skipping:
            newline = raw.find(b"\n")
            if newline < 0:
                tracked.skipped += len(raw)
                return
            # The cut line ends here: its head stands for it, with its real length.
            cut[tracked.line + 1] = len(tracked.partial) + tracked.skipped + newline
            pieces.append(tracked.partial)
            tracked.partial, tracked.skipped, tracked.skipping = b"", 0, False
            raw = raw[newline + 1 :]
        lines = (tracked.partial + raw).split(b"\n")
        tracked.partial = lines.pop()
        pieces += lines
        if len(tracked.partial) > MAX_LINE_BYTES:
            # Too long to hold: keep its first MAX_LINE_BYTES, read past the rest.
            tracked.skipped = len(tracked.partial) - MAX_LINE_BYTES
            tracked.partial = tracked.partial[:MAX_LINE_BYTES]
            tracked.skipping = True
        if tracked.fp_len < FINGERPRINT_BYTES:
            self._grow_fingerprint(tracked)
            if not tracked.started:
                tracked.key = self._key(tracked)
        if pieces:
            self._emit(tracked, pieces, cut)

    def _emit(
        self, tracked: Tracked, pieces: list[bytes], cut: dict[int, int] | None = None
    ) -> None:
        lines = [piece.decode("utf-8", errors="replace") for piece in pieces]
        chunk = Chunk(
            lines=lines,
            first_line=tracked.line + 1,
            incarnation=tracked.key or self._key(tracked),
            new_incarnation=not tracked.started,
            cut=cut or {},
        )
        tracked.started = True
        tracked.line += len(lines)
        self._pending.append(chunk)

    def _finish(self, tracked: Tracked) -> None:
        self._remember_finished(tracked.checkpoint())
        self._close(tracked)

    def _remember_finished(self, entry: FileCheckpoint, at: float | None = None) -> None:
        ident = (entry.dev, entry.inode)
        self._finished[ident] = entry
        self._finished_at[ident] = time.time() if at is None else at
        # A scan only looks at files modified after (last scan - MTIME_SLACK): an entry
        # older than that can only matter if its file grows again, which is then resumed
        # as a new file. Expire those; keep a hard cap for safety.
        horizon = self._last_scan_wall - MTIME_SLACK - 5.0
        for old in [k for k, t in self._finished_at.items() if t < horizon]:
            del self._finished[old], self._finished_at[old]
        while len(self._finished) > FINISHED_KEPT:
            oldest = next(iter(self._finished))
            del self._finished[oldest], self._finished_at[oldest]

    def _close(self, tracked: Tracked) -> None:
        with contextlib.suppress(OSError):
            os.close(tracked.fd)
