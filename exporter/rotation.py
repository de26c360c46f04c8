"""Rotation detection for the follower: rename, copytruncate, truncation, files gone or born.

A file is identified by (device, inode) plus a fingerprint: the SHA-256 of its first bytes.
A rename gives the path a new inode (the old file drains); a copytruncate keeps the inode
but shrinks the file or changes its first bytes (the unread tail comes from the copy, found
by its fingerprint). A restart finds every checkpointed file again by inode or fingerprint.
This module decides which file is which; it never reads lines (`exporter/follower.py` does).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from preemptscope.exporter.tracked import (
    COMPRESSED_SUFFIXES,
    FINGERPRINT_BYTES,
    LOG,
    LOST_GRACE_S,
    MTIME_SLACK,
    FileCheckpoint,
    FollowerCheckpoint,
    RotationKind,
    Tracked,
    fingerprint,
    pread_all,
)


class RotationWatch:
    """The follower's detection and restore steps; `FileFollower` adds the reading."""

    path: str
    gaps: int
    _dir: Path
    _base: str
    _start_at: Literal["beginning", "end"]
    _on_rotation: Callable[[RotationKind], None] | None
    _clock: Callable[[], float]
    _current: Tracked | None
    _draining: list[Tracked]
    _seen_before: bool
    _finished: dict[tuple[int, int], FileCheckpoint]
    _finished_at: dict[tuple[int, int], float]
    _suspects: dict[tuple[int, int], tuple[str, bytes, float]]
    _lost: list[tuple[FileCheckpoint, float]]
    _rotation_seen: bool

    if TYPE_CHECKING:
        # The reading side (FileFollower) provides these.
        def _open_fd(self, path: str) -> int | None: ...
        def _open(self, st: os.stat_result, offset: int, line: int) -> Tracked | None: ...
        def _emit_range(self, tracked: Tracked, fd: int, start: int, end: int) -> None: ...
        def _remember_finished(self, entry: FileCheckpoint, at: float | None = None) -> None: ...
        def _track(
            self, fd: int, st: os.stat_result, offset: int, line: int, entry: FileCheckpoint | None
        ) -> Tracked: ...

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
    def _known_head(tracked: Tracked) -> bytes:
        """The first bytes we have read: fingerprinted lines, or a held-back first line."""
        return tracked.fp_bytes or (tracked.partial if tracked.committed == 0 else b"")

    def _fingerprint_matches(self, tracked: Tracked) -> bool:
        head = self._known_head(tracked)
        return not head or pread_all(tracked.fd, len(head), 0) == head

    def _truncated(self, current: Tracked) -> None:
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
                    fingerprint=fingerprint(head),
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
                if size >= min_size and pread_all(fd, fp_len, 0) == fp_bytes:
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
        head = pread_all(fd, FINGERPRINT_BYTES, 0)
        if not head:
            return None
        known = self._known_head(current)
        if known and head[: len(known)] == known[: len(head)]:
            return head
        return head if pread_all(current.fd, len(head), 0) == head else None

    def _head_matches(self, fd: int, entry: FileCheckpoint) -> bool:
        if entry.fp_len == 0:
            return True
        return fingerprint(pread_all(fd, entry.fp_len, 0)) == entry.fingerprint

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
