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
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from preemptscope.ingest._reader import ReadLimits

LOG = logging.getLogger("preemptscope.exporter.follower")

FINGERPRINT_BYTES = 1024
READ_CHUNK = 1 << 20
MAX_READ_PER_POLL = 16 << 20  # keep one busy file from starving the others
# A "line" longer than this is cut, so memory stays bounded (PREEMPTSCOPE_MAX_LINE_BYTES).
MAX_LINE_BYTES = ReadLimits.from_env().max_line_bytes
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
class _Tracked:
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


def _fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    parts: list[bytes] = []
    while size > 0:
        block = os.pread(fd, size, offset)
        if not block:
            break
        parts.append(block)
        size -= len(block)
        offset += len(block)
    return b"".join(parts)


class FileFollower:
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
        self._current: _Tracked | None = None
        self._draining: list[_Tracked] = []
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

    # -- detection ----------------------------------------------------------------------

    def _stat_path(self) -> os.stat_result | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return st if stat.S_ISREG(st.st_mode) else None

    def _check_current(self) -> None:
        current = self._current
        # Truncation first: the file may have been copytruncated and then renamed away
        # between two polls; its old content must come from the copy.
        if current is not None and (
            os.fstat(current.fd).st_size < current.offset or not self._fingerprint_matches(current)
        ):
            self._truncated(current)
        st = self._stat_path()
        if current is None:
            if st is not None:
                at_end = self._start_at == "end" and not self._seen_before
                self._current = self._open(st, st.st_size if at_end else 0, 0)
                self._seen_before = True
            return
        if st is None or (st.st_dev, st.st_ino) != (current.dev, current.inode):
            # Renamed away (or deleted): keep draining the old file; the new one starts at 0.
            # A rename rotation leaves the path missing until the writer reopens it; the old
            # file still has a name (a link) then, a deleted one has none.
            renamed = st is not None or os.fstat(current.fd).st_nlink > 0
            self._rotated("rename" if renamed else "missing")
            current.quiet_since = self._clock()
            self._draining.append(current)
            self._current = self._open(st, 0, 0) if st is not None else None

    @staticmethod
    def _known_head(tracked: _Tracked) -> bytes:
        """The first bytes we have read: fingerprinted lines, or a held-back first line."""
        return tracked.fp_bytes or (tracked.partial if tracked.committed == 0 else b"")

    def _fingerprint_matches(self, tracked: _Tracked) -> bool:
        head = self._known_head(tracked)
        return not head or _pread_all(tracked.fd, len(head), 0) == head

    def _truncated(self, current: _Tracked) -> None:
        """copytruncate (or a plain truncation): finish the old content, restart at 0."""
        # What we know of the old head: the fingerprinted lines, or (nothing complete read
        # yet) the held-back partial line itself.
        head = self._known_head(current)
        copy = self._find_copy(len(head), head, current.offset, current.inode)
        if copy is not None:
            self._rotated("copytruncate")
            fd, size = copy
            self._emit_range(current, fd, current.offset, size)
            copied = os.fstat(fd)
            self._remember_finished(
                FileCheckpoint(
                    dev=copied.st_dev,
                    inode=copied.st_ino,
                    offset=size,
                    line=current.line,
                    fingerprint=current.fp_hash,
                    fp_len=current.fp_len,
                    key=current.key,
                )
            )
            os.close(fd)
        else:
            self._rotated("truncate")
            if head:
                # The copy may still show up (a rotation in flight): remember what we had
                # read, and call it a gap only if it does not appear within LOST_GRACE_S.
                lost = FileCheckpoint(
                    dev=current.dev,
                    inode=current.inode,
                    offset=current.offset,
                    line=current.line,
                    fingerprint=_fingerprint(head),
                    fp_len=len(head),
                    key=current.key,
                )
                self._lost.append((lost, self._clock()))
        # An O_APPEND writer continues a held-back partial line in the truncated file.
        current.offset, current.line, current.started = 0, 0, False
        current.fp_len, current.fp_bytes, current.fp_hash, current.head = 0, b"", "", b""
        current.key = ""

    def _rotated(self, kind: RotationKind) -> None:
        self._rotation_seen = True
        LOG.info("%s: rotation detected (%s)", self.path, kind)
        if self._on_rotation is not None:
            self._on_rotation(kind)

    def _candidates(self) -> Iterator[tuple[str, os.stat_result]]:
        """Rotated siblings: same directory, name starting with the base name, uncompressed,
        freshest first. Listed until two passes agree, since logrotate may be shifting
        a.log.1 -> a.log.2 -> ... right now and a file could slip between names."""
        union: dict[tuple[int, int], tuple[float, str, os.stat_result]] = {}
        previous: set[tuple[int, int]] | None = None
        for attempt in range(10):
            seen: set[tuple[int, int]] = set()
            for item in self._list_siblings():
                ident = (item[2].st_dev, item[2].st_ino)
                seen.add(ident)
                union[ident] = item  # the latest name wins
            if seen == previous:
                break
            previous = seen
            if attempt:
                time.sleep(0.001)
        for _, full, st in sorted(union.values(), key=lambda item: item[0], reverse=True):
            yield full, st

    def _list_siblings(self) -> list[tuple[float, str, os.stat_result]]:
        try:
            names = os.listdir(self._dir)
        except OSError:
            return []
        base, cut = self._base, len(self._base)
        found: list[tuple[float, str, os.stat_result]] = []
        for name in names:
            # a.log.1, a.log-20250101, a.log_old: not a.log2, which is another log.
            if not name.startswith(base) or name[cut : cut + 1] not in (".", "-", "_"):
                continue
            if name.endswith(COMPRESSED_SUFFIXES):
                continue
            full = str(self._dir / name)
            try:
                st = os.stat(full)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((st.st_mtime, full, st))
        return found

    def _find_copy(
        self, fp_len: int, fp_bytes: bytes, min_size: int, exclude_inode: int
    ) -> tuple[int, int] | None:
        """Open the copy of a file whose first bytes we know (copytruncate): (fd, size).
        Looks a few times: logrotate may be renaming the siblings right now."""
        if fp_len == 0:
            return None
        for attempt in range(3):
            if attempt:
                time.sleep(0.01)
            for full, st in self._candidates():
                if st.st_ino == exclude_inode or st.st_size < max(min_size, fp_len):
                    continue
                try:
                    fd = os.open(full, os.O_RDONLY)
                except OSError:
                    continue
                size = os.fstat(fd).st_size
                if size >= min_size and _pread_all(fd, fp_len, 0) == fp_bytes:
                    return fd, size
                os.close(fd)
        return None

    def _expire_lost(self) -> None:
        now = self._clock()
        for entry, since in list(self._lost):
            if now - since >= LOST_GRACE_S:
                self._lost.remove((entry, since))
                self.gaps += 1
                LOG.warning(
                    "%s was truncated and no copy of it was found next to it; lines written"
                    " between the last read and the truncation may be missing",
                    self.path,
                )

    def _claim_lost(self, fd: int, size: int) -> FileCheckpoint | None:
        """A late copy of a truncated file: the entry to resume it from, if it is one."""
        for entry, since in self._lost:
            if size >= entry.offset and self._head_matches(fd, entry):
                self._lost.remove((entry, since))
                return entry
        return None

    # -- restore ------------------------------------------------------------------------

    def _restore(self, checkpoint: FollowerCheckpoint) -> None:
        """Find every file of the checkpoint again (older ones first), then files born since."""
        for done in checkpoint.finished:
            self._remember_finished(done, at=checkpoint.saved_at)
        st = self._stat_path()
        entries = [*checkpoint.draining, *([checkpoint.current] if checkpoint.current else [])]
        for entry in entries:
            if (
                self._current is None
                and st is not None
                and (st.st_dev, st.st_ino)
                == (
                    entry.dev,
                    entry.inode,
                )
            ):
                fd = self._open_fd(self.path)
                if fd is not None and self._head_matches(fd, entry):
                    self._current = self._track(fd, st, entry.offset, entry.line, entry)
                    continue
                if fd is not None:
                    os.close(fd)
                    # Same inode, different head: copytruncate while we were down.
                    self._recover_copy(entry)
                    continue
            if not self._reopen_renamed(entry):
                self._recover_copy(entry)
        if self._current is None and st is not None:
            self._current = self._open(st, 0, 0)
        if checkpoint.saved_at > 0:
            self._adopt_unknown_siblings(checkpoint.saved_at)

    def _known(self) -> set[tuple[int, int]]:
        tracked = [*self._draining, *([self._current] if self._current else [])]
        return {(t.dev, t.inode) for t in tracked}

    def _adopt_unknown_siblings(self, since: float) -> None:
        """A file both born and rotated since `since` (the checkpoint, or the previous poll)
        was never seen, but is a sibling modified after it. Read such files whole."""
        known = self._known()
        fresh = [
            (full, st)
            for full, st in self._candidates()
            if st.st_mtime > since - MTIME_SLACK or (st.st_dev, st.st_ino) in self._suspects
        ]
        for full, st in sorted(fresh, key=lambda item: item[1].st_mtime):
            ident = (st.st_dev, st.st_ino)
            if ident in known or st.st_size == 0:
                self._suspects.pop(ident, None)
                continue
            done = self._finished.get(ident)
            if done is not None and st.st_size <= done.offset:
                self._suspects.pop(ident, None)
                continue
            fd = self._open_fd(full)
            if fd is None:
                continue
            if os.fstat(fd).st_ino != st.st_ino:  # renamed under us; the next scan finds it
                os.close(fd)
                continue
            lost = self._claim_lost(fd, os.fstat(fd).st_size)
            if lost is not None:
                tracked = self._track(fd, os.fstat(fd), lost.offset, lost.line, lost)
                tracked.quiet_since = self._clock()
                self._draining.append(tracked)
                known.add((tracked.dev, tracked.inode))
                self._rotated("copytruncate")
                continue
            head = self._copy_in_progress(fd)
            if head is not None:
                # Not yet truncated: its lines still come through the current file.
                self._suspects.setdefault(ident, (full, head, time.time()))
                os.close(fd)
                continue
            self._suspects.pop(ident, None)
            if done is not None and self._head_matches(fd, done):
                tracked = self._track(fd, os.fstat(fd), done.offset, done.line, done)
                del self._finished[ident], self._finished_at[ident]
            else:
                # Never read (any part of it we had read was claimed by _truncated).
                tracked = self._track(fd, os.fstat(fd), 0, 0, None)
            LOG.debug("%s: adopting %s, born and rotated between two polls", self.path, full)
            tracked.quiet_since = self._clock()
            self._draining.append(tracked)
            known.add((tracked.dev, tracked.inode))
            self._rotated("rename")
        cutoff = time.time() - 600
        for ident, (_, _, noted) in list(self._suspects.items()):
            if noted < cutoff:  # a lookalike that never turned out to be a copy
                del self._suspects[ident]

    def _copy_in_progress(self, fd: int) -> bytes | None:
        """A copy of the current incarnation (same first bytes as the file now, or as what
        we read of it): its lines come through the current file, and once the truncation
        shows, `_truncated` reads the rest from the copy. Returns the copy's head."""
        current = self._current
        if current is None:
            return None
        head = _pread_all(fd, FINGERPRINT_BYTES, 0)
        if not head:
            return None
        known = self._known_head(current)
        if known and head[: len(known)] == known[: len(head)]:
            return head
        return head if _pread_all(current.fd, len(head), 0) == head else None

    def _head_matches(self, fd: int, entry: FileCheckpoint) -> bool:
        if entry.fp_len == 0:
            return True
        return _fingerprint(_pread_all(fd, entry.fp_len, 0)) == entry.fingerprint

    def _reopen_renamed(self, entry: FileCheckpoint) -> bool:
        for full, st in self._candidates():
            if (st.st_dev, st.st_ino) != (entry.dev, entry.inode):
                continue
            fd = self._open_fd(full)
            if fd is None:
                return False
            if not self._head_matches(fd, entry):
                os.close(fd)
                return False
            tracked = self._track(fd, st, entry.offset, entry.line, entry)
            tracked.quiet_since = self._clock()
            self._draining.append(tracked)
            self._rotated("rename")
            return True
        return False

    def _recover_copy(self, entry: FileCheckpoint) -> None:
        known = self._known()
        for full, st in self._candidates():
            if st.st_size < max(entry.offset, entry.fp_len) or entry.fp_len == 0:
                continue
            if (st.st_dev, st.st_ino) in known:
                continue
            fd = self._open_fd(full)
            if fd is None:
                continue
            if self._head_matches(fd, entry):
                tracked = self._track(fd, st, entry.offset, entry.line, entry)
                tracked.quiet_since = self._clock()
                self._draining.append(tracked)
                self._rotated("copytruncate")
                return
            os.close(fd)
        if entry.offset > 0:
            self.gaps += 1
            self._rotated("missing")
            LOG.warning(
                "%s: the file read up to byte %d before the restart is gone (rotated and"
                " compressed or deleted?); its unread tail, if any, is lost",
                self.path,
                entry.offset,
            )

    # -- reading ------------------------------------------------------------------------

    def _open_fd(self, path: str) -> int | None:
        try:
            return os.open(path, os.O_RDONLY)
        except OSError:
            return None

    def _open(self, st: os.stat_result, offset: int, line: int) -> _Tracked | None:
        fd = self._open_fd(self.path)
        if fd is None:
            return None
        real = os.fstat(fd)  # the path may have changed between stat and open
        return self._track(fd, real, min(offset, real.st_size), line, None)

    def _track(
        self, fd: int, st: os.stat_result, offset: int, line: int, entry: FileCheckpoint | None
    ) -> _Tracked:
        tracked = _Tracked(fd=fd, dev=st.st_dev, inode=st.st_ino, offset=offset, line=line)
        tracked.started = line > 0 or offset > 0
        tracked.head = _pread_all(fd, min(offset, FINGERPRINT_BYTES), 0)
        if entry is not None and entry.fp_len:
            tracked.fp_len = entry.fp_len
            tracked.fp_bytes = _pread_all(fd, entry.fp_len, 0)
            tracked.fp_hash = entry.fingerprint
        self._grow_fingerprint(tracked)
        tracked.key = entry.key if entry is not None and entry.key else self._key(tracked)
        if entry is not None and entry.cut_read > 0:
            self._resume_cut(tracked, entry.cut_read)
        return tracked

    @staticmethod
    def _resume_cut(tracked: _Tracked, cut_read: int) -> None:
        """Go on inside a long line that the checkpoint was taken in: its head is read
        again, the `cut_read` bytes of it read before are not (the newline is after them)."""
        head = _pread_all(tracked.fd, min(cut_read, MAX_LINE_BYTES), tracked.offset)
        if len(head) < min(cut_read, MAX_LINE_BYTES):
            return  # the file is shorter than it was: the truncation check takes it from here
        tracked.partial = head
        tracked.offset += cut_read
        tracked.skipped = cut_read - len(head)
        tracked.skipping = tracked.skipped > 0

    def _key(self, tracked: _Tracked) -> str:
        return f"{tracked.dev}:{tracked.inode}:{tracked.fp_hash[:16]}"

    def _grow_fingerprint(self, tracked: _Tracked) -> None:
        """Fingerprint the first complete lines read, up to FINGERPRINT_BYTES. A partial
        first line is left out: its start ("INFO 05-19 ...") may match the next file.
        Taken from the bytes already read, never re-read: the file may have changed."""
        want = min(FINGERPRINT_BYTES, tracked.committed, len(tracked.head))
        if want > tracked.fp_len:
            head = tracked.head[:want]
            tracked.fp_bytes, tracked.fp_len = head, len(head)
            tracked.fp_hash = _fingerprint(head)

    def _read(self, tracked: _Tracked, *, final: bool, retry: bool = True) -> None:
        size = os.fstat(tracked.fd).st_size
        if size > tracked.offset:
            end = min(size, tracked.offset + MAX_READ_PER_POLL)
            raw = _pread_all(tracked.fd, end - tracked.offset, tracked.offset)
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

    def _emit_range(self, tracked: _Tracked, fd: int, start: int, end: int) -> None:
        """Emit bytes [start, end) of another file holding this incarnation (its copy)."""
        self._consume(tracked, _pread_all(fd, end - start, start), end, own=False)

    def _consume(self, tracked: _Tracked, raw: bytes, end: int, *, own: bool) -> None:
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
        self, tracked: _Tracked, pieces: list[bytes], cut: dict[int, int] | None = None
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

    def _finish(self, tracked: _Tracked) -> None:
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

    def _close(self, tracked: _Tracked) -> None:
        with contextlib.suppress(OSError):
            os.close(tracked.fd)
