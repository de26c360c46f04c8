"""`/metrics` read from where it lives: snapshot files (one, a directory, gzipped) and live
scrapes over HTTP, bounded in size and time.

Owns the snapshot's time (from its file name, else its mtime), the scrape's byte cap, decoding
and watchdog. Never parses the exposition itself: the text goes to
`metrics.parse_metrics_text`, whose names this module's callers also import from `metrics`.
"""

from __future__ import annotations

import contextlib
import gzip
import re
import socket
import threading
import time
import zlib
from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
from preemptscope.ingest.metrics import SNAPSHOT_SUFFIXES, parse_metrics_text

from preemptscope.errors import InputError, ScrapeError

if TYPE_CHECKING:  # imported where a scrape is made: every parse would pay ~0.1 s
    import httpx

# ISO 8601 extended (colons may be written as dashes in file names), ISO basic, or epoch.
_ISO_EXTENDED = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T_ ](?P<h>\d{2})[:\-](?P<m>\d{2})[:\-](?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<zone>Z|[+-]\d{2}:?\d{2})?"
)
_ISO_BASIC = re.compile(
    r"(?P<date>\d{8})T(?P<h>\d{2})(?P<m>\d{2})(?P<s>\d{2})(?:[.,](?P<frac>\d{1,9}))?"
    r"(?P<zone>Z|[+-]\d{4})?"
)
_EPOCH = re.compile(r"(?<!\d)(?P<epoch>\d{13}|\d{10}(?:\.\d{1,9})?)(?![\d])")


def timestamp_from_name(name: str) -> datetime | None:
    """The time written in a snapshot's file name (UTC when it names no zone), or None."""
    for pattern in (_ISO_EXTENDED, _ISO_BASIC):
        match = pattern.search(name)
        if match is None:
            continue
        date = match["date"].replace("-", "")
        frac = (match["frac"] or "0")[:6].ljust(6, "0")
        zone = match["zone"] or "Z"
        zone = "+00:00" if zone == "Z" else f"{zone[:3]}:{zone[-2:]}"
        text = (
            f"{date[:4]}-{date[4:6]}-{date[6:]}T{match['h']}:{match['m']}:{match['s']}.{frac}{zone}"
        )
        try:
            return datetime.fromisoformat(text).astimezone(UTC)
        except ValueError:
            continue
    match = _EPOCH.search(name)
    if match is not None:
        raw = match["epoch"]
        seconds = int(raw) / 1000 if len(raw) == 13 and "." not in raw else float(raw)
        return datetime.fromtimestamp(seconds, UTC)
    return None


def _read_text(path: Path) -> str:
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, gzip.BadGzipFile) as exc:
        raise InputError(str(path), f"cannot read: {exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(str(path), f"not UTF-8 text (byte {exc.start})") from exc


def _snapshot_time(path: Path) -> datetime:
    stem = path.name
    for suffix in SNAPSHOT_SUFFIXES:
        stem = stem.removesuffix(suffix)
    found = timestamp_from_name(stem)
    if found is not None:
        return found
    return datetime.fromtimestamp(path.stat().st_mtime, UTC)


def read_metrics_path(
    path: str | Path, *, deployment: str, metrics: Collection[str] | None = None
) -> pl.DataFrame:
    """One snapshot file, or every snapshot (`*.prom`, `*.txt`, `*.metrics`, gzipped too) in a dir.

    Scrape time: an ISO or epoch timestamp in the file name, else the file's mtime.
    Rows of a directory carry the directory as `source`, so each counter stays one series.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(str(root), "no such file or directory")
    if root.is_file():
        return parse_metrics_text(
            _read_text(root),
            timestamp=_snapshot_time(root),
            source=str(root),
            deployment=deployment,
            metrics=metrics,
        )
    files = sorted(
        entry
        for entry in root.iterdir()
        if entry.is_file()
        and not entry.name.startswith(".")
        and entry.name.endswith(SNAPSHOT_SUFFIXES)
    )
    if not files:
        raise InputError(
            str(root),
            f"no metrics snapshots here (expected files ending {', '.join(SNAPSHOT_SUFFIXES)})",
        )
    frames = []
    for file in files:
        frame = parse_metrics_text(
            _read_text(file),
            timestamp=_snapshot_time(file),
            source=str(file),  # errors name the file ...
            deployment=deployment,
            metrics=metrics,
        )
        frames.append(frame.with_columns(source=pl.lit(str(root))))  # ... rows the directory
    return pl.concat(frames, how="vertical").sort("timestamp", maintain_order=True)


# A vLLM /metrics body is well under 1 MiB; far beyond that is a broken or hostile target.
MAX_SCRAPE_BYTES = 16 * 1024 * 1024
_DECODERS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def fetch_metrics_text(
    url: str,
    *,
    timeout: float,
    client: httpx.Client | None = None,
    max_bytes: int = MAX_SCRAPE_BYTES,
) -> str:
    """GET a /metrics endpoint; ScrapeError on any failure (network, HTTP status, encoding).

    A target is not trusted: no redirect is followed (it could point at another local
    service), the body is capped at `max_bytes` AFTER decompression (a gzip bomb), and
    `timeout` is a deadline for the whole scrape, not per read (a body trickled a byte at a
    time): when it passes, the connection's socket is shut down, which ends a read blocked
    on it. (A connection reused from a caller's `client` pool is not seen connecting; there the
    deadline is checked between reads, each bounded by `timeout`.)
    """
    import httpx

    deadline = time.monotonic() + timeout
    watchdog = _Watchdog(timeout)
    own = client is None
    session = httpx.Client() if client is None else client
    try:
        with session.stream(
            "GET",
            url,
            timeout=httpx.Timeout(timeout),
            follow_redirects=False,
            headers={"Accept-Encoding": "gzip", "Accept": "text/plain"},
            extensions={"trace": watchdog.trace},
        ) as response:
            if response.is_redirect:
                where = response.headers.get("location", "?")
                raise ScrapeError(
                    url,
                    f"HTTP {response.status_code} redirect to {where} not followed"
                    " (scrape the final URL)",
                )
            if response.status_code != 200:
                raise ScrapeError(url, f"HTTP {response.status_code} {response.reason_phrase}")
            body = _read_capped(response, url, deadline=deadline, timeout=timeout, cap=max_bytes)
            if watchdog.fired:  # the shutdown can read as the end of a close-delimited body
                raise ScrapeError(url, f"timed out after {timeout:g} s (deadline)")
    except httpx.TimeoutException:
        raise ScrapeError(url, f"timed out after {timeout:g} s") from None
    except httpx.HTTPError as exc:
        if watchdog.fired:
            raise ScrapeError(url, f"timed out after {timeout:g} s (deadline)") from None
        raise ScrapeError(url, f"{type(exc).__name__}: {exc}") from None
    finally:
        watchdog.cancel()
        if own:
            session.close()
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(url, f"body is not UTF-8 text (byte {exc.start})") from None


class _Watchdog:
    """Shuts the scrape's socket down when the deadline passes: a read blocked on it returns
    at once (a per-read timeout alone lets a trickling target hold a scrape for ever)."""

    def __init__(self, timeout: float) -> None:
        self.fired = False
        self._socket: Any = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        # httpcore reports each new TCP connection; its stream knows the socket.
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            with self._lock:
                self._socket = stream.get_extra_info("socket") if stream is not None else None
            if self.fired:
                self._fire()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            sock = self._socket
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: the scrape ended on its own
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _read_capped(
    response: httpx.Response, url: str, *, deadline: float, timeout: float, cap: int
) -> bytes:
    """The decoded body, refusing more than `cap` bytes and stopping at `deadline`."""
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "", *_DECODERS):
        raise ScrapeError(url, f"unsupported Content-Encoding {encoding!r}")
    decoder = zlib.decompressobj(_DECODERS[encoding]) if encoding in _DECODERS else None
    parts: list[bytes] = []
    size = 0

    def take(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > cap:
            raise ScrapeError(url, f"body larger than {cap} bytes (decompressed); not read")
        parts.append(data)

    for raw in response.iter_raw():  # as received (a chunk size would wait to fill it)
        if time.monotonic() > deadline:
            raise ScrapeError(url, f"timed out after {timeout:g} s (body still arriving)")
        if decoder is None:
            take(raw)
            continue
        try:
            # max_length bounds what one compressed chunk may expand to (a bomb expands
            # 1000-fold); the rest waits in unconsumed_tail.
            data = decoder.decompress(raw, cap + 1 - size)
            take(data)
            while decoder.unconsumed_tail:
                take(decoder.decompress(decoder.unconsumed_tail, cap + 1 - size))
        except zlib.error as exc:
            raise ScrapeError(url, f"broken {encoding} body: {exc}") from None
    if decoder is not None:
        take(decoder.flush())
    return b"".join(parts)


def scrape_once(
    url: str,
    *,
    timeout: float,
    deployment: str,
    now: datetime | None = None,
    max_bytes: int = MAX_SCRAPE_BYTES,
) -> pl.DataFrame:
    """Scrape one /metrics URL into METRIC_SAMPLES; ScrapeError when it cannot be read or parsed."""
    stamp = now if now is not None else datetime.now(UTC)
    text = fetch_metrics_text(url, timeout=timeout, max_bytes=max_bytes)
    try:
        return parse_metrics_text(text, timestamp=stamp, source=url, deployment=deployment)
    except InputError as exc:
        where = f"line {exc.line}: " if exc.line is not None else ""
        raise ScrapeError(url, f"{where}{exc.reason}") from exc
