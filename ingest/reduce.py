"""Reduce log chunks, as they stream, to what the analysis reads.

`report` and `serve` never hold a deployment's request, access or other rows: each chunk's
request lines go through one RequestJoin (ingest/lifecycle.py) per deployment, which keeps only
the requests still open and gives one ARRIVALS row per request and one JOINED row per request
with both ends logged. Of the request rows themselves a few stay, those that mark activity
(the first and last of a chunk, the first after each startup line: what restart detection
reads); the rest are counted in `LogFrames.summarized`, so record counts stay exact. The kinds
the analysis reads whole (stats, preemption warnings, config, KV sizing) are small and kept;
of the unrecognised lines the first UNRECOGNIZED_KEPT rows per source are kept (the counts
are exact whatever the number).
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta

import polars as pl
from preemptscope.ingest.lifecycle import RequestJoin
from preemptscope.ingest.logs import REDUCED, ParseOptions, ReadLimits, iter_parse_path
from preemptscope.ingest.schema import ARRIVALS, FRAME_SCHEMAS, JOINED, LogFrames, empty

__all__ = ["UNRECOGNIZED_KEPT", "LogReducer", "reduce_paths"]

UNRECOGNIZED_KEPT = 1_000
COMPACT_EVERY = 16  # chunks between two compactions of what is kept
_DROPPED = ("access", "other")  # counted, never read by the analysis


class LogReducer:
    """One deployment's reduction: feed its LogFrames batches in time order with `add`."""

    def __init__(self) -> None:
        self.join = RequestJoin()
        self._unrecognized: dict[str, int] = {}  # source -> rows kept so far

    def add(self, part: LogFrames) -> tuple[LogFrames, pl.DataFrame, pl.DataFrame]:
        """The reduced batch, and the join's ARRIVALS and JOINED rows (with `source`) so far."""
        requests = part["requests"]
        arrivals, joined = self.join.add(requests, part.prompts)
        # The prompts are on the join's rows now (kept, they would grow with the file).
        out = dataclasses.replace(
            part, frames=dict(part.frames), summarized=dict(part.summarized), prompts=None
        )
        if requests.height:
            markers = activity_markers(requests, part["config"])
            out.frames["requests"] = markers
            out.summarized["requests"] = (
                out.summarized.get("requests", 0) + requests.height - markers.height
            )
        for kind in _DROPPED:
            frame = out.frames[kind]
            if frame.height:
                out.summarized[kind] = out.summarized.get(kind, 0) + frame.height
                out.frames[kind] = frame.clear()
        unrec = out.frames["unrecognized"]
        if unrec.height:
            kept = self._unrecognized.get(part.source, 0)
            room = max(0, UNRECOGNIZED_KEPT - kept)
            if unrec.height > room:
                out.summarized["unrecognized"] = (
                    out.summarized.get("unrecognized", 0) + unrec.height - room
                )
                out.frames["unrecognized"] = unrec.head(room)
            self._unrecognized[part.source] = kept + min(room, unrec.height)
        return out, arrivals, joined

    def close(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """ARRIVALS and JOINED rows (with `source`) of the requests still open at the end."""
        return self.join.close()


def activity_markers(requests: pl.DataFrame, config: pl.DataFrame) -> pl.DataFrame:
    """The request rows that say when a log was active: the first and last of the batch and
    the first after each startup line (events.py tells restarts apart by them)."""
    lines = requests["line"]
    picks = {0, requests.height - 1}
    starts = config.filter(pl.col("key") == "vllm_version")["line"].drop_nulls()
    if starts.len():
        after = lines.search_sorted(starts, side="right")
        picks |= {int(i) for i in after.to_list() if int(i) < requests.height}
    return requests.gather(sorted(picks))


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def reduce_paths(
    paths: Sequence[str],
    *,
    deployment: str,
    options: ParseOptions | None = None,
    limits: ReadLimits | None = None,
) -> list[LogFrames]:
    """Parse and reduce the files of one deployment (one LogFrames per file, in `paths` order).

    Files are read oldest first (by mtime: rotated files before the live one), so a request
    received in `vllm.log.1` and finished in `vllm.log` is joined.
    """
    options = options or ParseOptions()
    reducer = LogReducer()
    results: dict[str, LogFrames] = {}
    # Per file, the ARRIVALS and the JOINED rows of the requests that started in it (a join
    # may settle a request in a later file); JOINED rows are kept in start order as they
    # settle (what the analysis reads).
    kept_arrivals: dict[str, _Kept] = {}
    kept_joined: dict[str, _InStartOrder] = {}
    kept_frames: dict[str, dict[str, _Kept]] = {}  # path -> kind -> its rows

    def add(part: LogFrames) -> tuple[LogFrames, pl.DataFrame, pl.DataFrame, datetime | None]:
        # In the join's thread, right after the chunk: what no later JOINED row starts before.
        piece, arrivals, joined = reducer.add(part)
        return piece, arrivals, joined, _watermark(reducer.join, part["requests"])

    def route(arrivals: pl.DataFrame, joined: pl.DataFrame) -> None:
        for source, part in _by_source(arrivals):
            kept_arrivals.setdefault(source, _Kept()).add(part)
        for source, part in _by_source(joined):
            kept_joined.setdefault(source, _InStartOrder()).add(part)

    # The join runs in its own thread, one chunk behind the dating of the next (Polars
    # releases the GIL): both are sequential, neither waits for the other. At most two
    # chunks wait for it, so memory stays flat.
    with ThreadPoolExecutor(max_workers=1) as joiner:
        pending: deque[
            tuple[str, Future[tuple[LogFrames, pl.DataFrame, pl.DataFrame, datetime | None]]]
        ] = deque()

        def collect(limit: int) -> None:
            while len(pending) > limit:
                path, future = pending.popleft()
                piece, arrivals, joined, watermark = future.result()
                route(arrivals, joined)
                if watermark is not None:
                    for kept in kept_joined.values():
                        kept.release(watermark)
                # The rows go to blocks (_Kept), the counts and names to the file's LogFrames:
                # regrowing one frame per kind copied it whole at each compaction, and the
                # copies left holes the next chunks could not fill (RSS grew with the file).
                kinds = kept_frames.setdefault(path, {})
                for kind, frame in piece.frames.items():
                    if frame.height:
                        kinds.setdefault(kind, _Kept()).add(frame)
                piece.frames = {}
                if path in results:
                    results[path].extend(piece)
                else:
                    results[path] = piece

        for path in sorted(dict.fromkeys(paths), key=lambda p: (_mtime(p), p)):
            for part in iter_parse_path(
                path, deployment=deployment, options=options, keep=REDUCED, limits=limits
            ):
                pending.append((path, joiner.submit(add, part)))
                collect(2)
            collect(0)
            if path not in results:
                results[path] = LogFrames(source=path, deployment=deployment, timezone=options.tz)
    route(*reducer.close())
    for path, frames in results.items():
        kinds = kept_frames.get(path, {})
        frames.frames = {
            kind: kinds[kind].frame(schema) if kind in kinds else empty(kind)
            for kind, schema in FRAME_SCHEMAS.items()
        }
        frames.arrivals = kept_arrivals.get(path, _Kept()).frame(ARRIVALS)
        frames.joined = kept_joined.get(path, _InStartOrder()).frame(JOINED)
    return [results[p] for p in dict.fromkeys(paths)]


def _by_source(frame: pl.DataFrame) -> Iterator[tuple[str, pl.DataFrame]]:
    """The rows of each source (file) a join's output holds, without the column."""
    if frame.height == 0:
        return
    sources = frame["source"]
    if sources.n_unique() == 1:  # the usual case: the file being read
        yield str(sources[0]), frame.drop("source")
        return
    for (source,), part in frame.group_by("source"):
        yield str(source), part.drop("source")


class _Kept:
    """Rows kept as they settle: small parts, every COMPACT_EVERY of them made one block.

    Small frames kept between the big ones each chunk allocates and frees pin their pages;
    blocks are never copied again (regrowing one frame would hold it twice at each compaction).
    """

    def __init__(self) -> None:
        self.blocks: list[pl.DataFrame] = []
        self.recent: list[pl.DataFrame] = []

    def add(self, part: pl.DataFrame) -> None:
        self.recent.append(part)
        if len(self.recent) >= COMPACT_EVERY:
            self.blocks.append(_block(self.recent))
            self.recent = []

    def frame(self, schema: pl.Schema) -> pl.DataFrame:
        """The rows, in the order they settled (readers sort). Not made contiguous: a copy
        would hold them twice at the end of the biggest files."""
        if self.recent:  # a block too: blocks' constant columns concatenate as constants
            self.blocks.append(_block(self.recent))
            self.recent = []
        parts = self.blocks
        return pl.concat(parts, rechunk=False) if parts else pl.DataFrame(schema=schema)


def _block(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The parts as one contiguous frame, a column of one value (a file's pid, source and
    deployment, a kind's unused fields) held as that value once: 4 of the 29 bytes of a
    request's JOINED row, and what blocks of the same constants concatenate to."""
    block = pl.concat(parts, rechunk=True)
    constants = []
    for name in block.columns:
        column = block[name]
        nulls = column.null_count()
        if nulls == column.len() or (nulls == 0 and column.n_unique() == 1):
            constants.append(pl.lit(column.head(1)).first().alias(name))
    return block.with_columns(constants) if constants else block


# How long before the newest time read a request not yet read may still start (lines of
# several processes arrive out of order). A guess only: when a log's clock goes back further,
# its rows are left unmarked and the analysis sorts them (rows of one start may then come in
# another order than the order they settled in).
_MARGIN = timedelta(minutes=10)


def _watermark(join: RequestJoin, requests: pl.DataFrame) -> datetime | None:
    """A time no JOINED row settled from now on should start before: the oldest open
    request's start, and a margin before the newest time of this chunk."""
    newest = requests["timestamp"].max() if requests.height else None
    if not isinstance(newest, datetime):
        return None
    oldest = join.oldest_open_start()
    mark = newest - _MARGIN
    return mark if oldest is None else min(mark, oldest)


class _InStartOrder:
    """JOINED rows kept sorted by start as they settle, so the analysis need not sort them
    (at 4 GB the sort's copy was the report's peak memory).

    Settled rows wait until the watermark passes them, then are sorted (stably: ties in the
    order they settled) and kept. While each kept batch starts strictly after the last one
    ended, the rows are exactly the stable sort of all of them by start, and `frame()` marks
    them sorted; otherwise (a clock that went back) they are left for the analysis to sort.
    """

    def __init__(self) -> None:
        self.kept = _Kept()
        self.pending: list[pl.DataFrame] = []
        self.last: datetime | None = None
        self.in_order = True

    def add(self, part: pl.DataFrame) -> None:
        self.pending.append(part)

    def release(self, watermark: datetime) -> None:
        if not self.pending:
            return
        rows = pl.concat(self.pending) if len(self.pending) > 1 else self.pending[0]
        early = rows["start"] < watermark
        ready = rows.filter(early)
        rest = rows.filter(~early)
        self.pending = [rest] if rest.height else []
        if ready.height:
            self._keep(ready)

    def _keep(self, rows: pl.DataFrame) -> None:
        rows = rows.sort("start", maintain_order=True)
        first, last = rows["start"][0], rows["start"][-1]
        if self.last is not None and not first > self.last:
            self.in_order = False
        self.last = last
        self.kept.add(rows)

    def frame(self, schema: pl.Schema) -> pl.DataFrame:
        if self.pending:
            self._keep(pl.concat(self.pending))
            self.pending = []
        frame = self.kept.frame(schema)
        if self.in_order and frame.height:
            frame = frame.with_columns(pl.col("start").set_sorted())
        return frame
