"""The state directory: one JSON checkpoint written atomically, guarded by a lock file.

The checkpoint holds file offsets AND the exported running totals together, so after any
stop (clean or kill -9) offsets and totals agree: lines after the checkpoint are read again
and counted again from totals that never included them. Writes go to a temporary file in
the same directory, are fsync'ed, then renamed over the old file (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from preemptscope.errors import ConfigError

STATE_VERSION = 1
CHECKPOINT_NAME = "checkpoint.json"
LOCK_NAME = "lock"


class StateStore:
    """Owns a state directory for the lifetime of one service."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / CHECKPOINT_NAME
        self._lock_fd: int | None = None

    def open(self) -> dict[str, Any]:
        """Create the directory, take the lock and return the last checkpoint (or {})."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise ConfigError(f"{self.directory}: cannot use state directory: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(
                f"{self.directory}: state directory is in use by another preemptscope serve;"
                " give each instance its own --state-dir"
            ) from None
        self._lock_fd = fd
        return self.load()

    def load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise ConfigError(f"{self.path}: cannot read checkpoint: {exc}") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            # Writes are atomic, so this is damage from outside; refuse rather than
            # silently restart from zero (which would double-count every line).
            raise ConfigError(
                f"{self.path}: checkpoint is not valid JSON ({exc}); move it away to start afresh"
            ) from None
        version = data.get("version") if isinstance(data, dict) else None
        if not isinstance(data, dict) or version != STATE_VERSION:
            raise ConfigError(
                f"{self.path}: checkpoint version {version} is not {STATE_VERSION};"
                " move it away to start afresh"
            )
        return data

    def save(self, data: dict[str, Any]) -> None:
        payload = json.dumps({**data, "version": STATE_VERSION}, sort_keys=True, indent=1)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint-", dir=self.directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(payload)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        # Make the rename itself durable.
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def close(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
