"""The running service: follow threads, scrape threads, the analysis loop and checkpoints.

Threads, not asyncio: file reads and the analyzer block, and the HTTP handlers only ever
read the immutable snapshot that the analysis loop swaps in, so /metrics stays fast.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from preemptscope.analysis.params import AnalysisParams
from preemptscope.exporter.follower import Chunk, FileFollower, FollowerCheckpoint, RotationKind
from preemptscope.exporter.history import COMPACT_AFTER, HistoryError, HistoryJournal, restore_info
from preemptscope.exporter.live import LiveState, Snapshot
from preemptscope.exporter.promsource import PrometheusSource
from preemptscope.exporter.state import StateStore
from preemptscope.ingest.logs import ParseOptions, ParseState, parse_lines
from preemptscope.ingest.scrape import scrape_once

from preemptscope.errors import PreemptscopeError
from preemptscope.settings import LogTarget, ScrapeTarget, ServeSettings

LOG = logging.getLogger("preemptscope.exporter.service")

CHECKPOINT_EVERY_S = 1.0
# Recompute at least this often without new data: "now" moves on, so an episode can end.
ANALYSIS_MAX_IDLE_S = 5.0
ANALYSIS_PAUSE_FACTOR = 4.0
PARSE_STATE_IDLE_S = 60.0
WRAP_WAIT_S = 0.25
# The parser costs ~25 ms per call whatever the batch size: parse twice a second, so 1,000
# lines/s cost ~5 % of a core and a line still shows on /metrics well within a second.
PARSE_EVERY_S = 0.5
PARSE_MAX_LINES = 50_000
WARMUP_INTERVAL_S = 1.0
STAMP_RESOLUTION_S = 1.0  # vLLM's log stamps are whole seconds
# The first analysis waits (this long at most) for the first parse of the logs: until then
# no window of a followed log counts as complete, so the gauges would start empty.
FIRST_PARSE_WAIT_S = 10.0


_NOTHING_READ = datetime.min.replace(tzinfo=UTC)


def _log_key(target: LogTarget) -> str:
    """A followed log's key among the live state's input marks."""
    return f"log\t{target.path}"


@dataclass
class _Followed:
    target: LogTarget
    follower: FileFollower
    states: dict[str, tuple[ParseState, float]]  # incarnation -> (parse state, last use)
    buffer: list[Chunk] = field(default_factory=list)  # read, not yet parsed


class Service:
    """Owns the state directory, the followers, the scrapers and the live analysis."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.store = StateStore(settings.state_dir)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._followed: list[_Followed] = []
        self._analysis_params = {
            "min_episode_s": settings.min_episode,
            "stale_after_s": settings.resolve_after,
        }
        self._started = False
        self._ready = threading.Event()
        self._logs_parsed = threading.Event()  # every log is read once, nothing held back
        self._logs_marked: set[str] = set()
        # Held while lines are parsed and while a checkpoint is taken: a checkpoint sees the
        # follower offsets of exactly the lines its totals and history hold.
        self._checkpoint_lock = threading.RLock()
        self.journal = HistoryJournal(settings.state_dir)
        self._segments: list[int] = []  # history segments the last checkpoint names
        self._full_history = True  # the next checkpoint rewrites the whole history
        self._parsed_marks: dict[str, FollowerCheckpoint] = {}
        self._checkpointed_changes = -1
        self._last_checkpoint = 0.0
        self.live: LiveState | None = None
        self._saved: dict[str, Any] | None = None
        self.errors: list[str] = []
        # Monotonic time of the last line read or successful scrape (start time before any).
        self._last_input = time.monotonic()

    # -- lifecycle -----------------------------------------------------------------------

    def open(self) -> None:
        """Take the state directory and load the checkpoint; raises ConfigError (a clear
        message before the server starts) when the directory is in use or damaged."""
        if self._saved is None:
            self._saved = self.store.open()

    def start(self) -> None:
        self.open()
        saved = self._saved or {}
        deployments = [t.deployment for t in self.settings.logs] + [
            t.deployment for t in self.settings.scrapes
        ]
        self.live = LiveState(
            deployments,
            window_s=self.settings.window,
            history_s=self.settings.history,
            params=self._analysis_params,
            saved=saved.get("totals"),
            clock=self.settings.clock,
        )
        self._restore_history(saved.get("history"))
        followers = saved.get("followers", {})
        for target in self.settings.logs:
            data = followers.get(target.path)
            checkpoint = FollowerCheckpoint.from_dict(data) if data else None
            follower = FileFollower(
                target.path,
                checkpoint,
                start_at="end" if self.settings.start_at == "end" else "beginning",
                on_rotation=self._rotation_handler(target.deployment),
            )
            self._followed.append(_Followed(target, follower, {}))
            # Nothing of the file is read yet: none of its windows is complete.
            self.live.mark_input(_log_key(target), target.deployment, _NOTHING_READ)
            if checkpoint is not None:
                # Until the first parse, a checkpoint keeps where the last run stopped (a file
                # without one stays absent: a restart then starts it as --start-at says).
                self._parsed_marks[target.path] = checkpoint
        self._spawn("follow", self._follow_loop)
        for scrape in self.settings.scrapes:
            self._spawn(f"scrape {scrape.url}", self._scrape_loop, scrape)
        if self.settings.prometheus:
            self._spawn("prometheus", self._prometheus_loop, PrometheusSource(self.settings))
        self._spawn("analysis", self._analysis_loop)
        self._started = True

    def stop(self) -> None:
        """Stop the threads, flush held-back records, write the final checkpoint."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        if self._started:
            with self._checkpoint_lock:
                self._flush_parsers()
                self._mark_parsed()
            self.checkpoint()
            for followed in self._followed:
                followed.follower.close()
        self.store.close()

    def ready(self) -> bool:
        """The first analysis is done (the start-up half of readiness)."""
        return self._ready.is_set()

    def note_input(self) -> None:
        """Something was read (a log line, a successful scrape, a Prometheus query): /readyz
        counts the inputs as alive. Every input loop calls this on success."""
        self._last_input = time.monotonic()

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        """What /readyz reports: ready when the first analysis is done, the last analysis is
        recent (the loop is not stuck) and some input (a log line, a successful scrape) was
        read within --ready-after (the inputs have not gone quiet)."""
        limit = self.settings.ready_after
        if not self.ready() or self.live is None:
            return False, {"reason": "the first analysis has not finished"}
        analysed_at = self.live.snapshot().analysed_at
        analysis_age = None if analysed_at is None else max(0.0, time.time() - analysed_at)
        input_age = time.monotonic() - self._last_input
        checks = {
            "analysis_age_seconds": analysis_age,
            # Rounded up: an age past --ready-after never shows as equal to it.
            "input_age_seconds": math.ceil(input_age * 1000) / 1000,
            "ready_after_seconds": limit,
        }
        # The loop analyses at least every ANALYSIS_MAX_IDLE_S (longer when analyses are slow).
        if analysis_age is None or analysis_age > max(limit, 4 * ANALYSIS_MAX_IDLE_S):
            return False, {**checks, "reason": "no analysis has finished for too long"}
        if input_age > limit:
            return False, {
                **checks,
                "reason": f"nothing read from any log or scrape target for {input_age:.0f} s",
            }
        return True, checks

    def snapshot(self) -> Snapshot:
        assert self.live is not None, "service not started"
        return self.live.snapshot()

    def _spawn(self, name: str, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _rotation_handler(self, deployment: str) -> Any:
        def handler(kind: RotationKind) -> None:
            if self.live is not None:
                self.live.add_rotation(deployment, kind)

        return handler

    # -- following -----------------------------------------------------------------------

    def _follow_loop(self) -> None:
        _name_os_thread("ps-follow")
        last_parse = 0.0
        while not self._stop.is_set():
            started, began = time.monotonic(), datetime.now(UTC)
            for followed in self._followed:
                try:
                    self.read_once(followed)
                except Exception:  # one bad file must not stop the others, nor the service
                    LOG.exception("following %s failed; retrying", followed.target.path)
            buffered = sum(len(c.lines) for f in self._followed for c in f.buffer)
            if started - last_parse >= PARSE_EVERY_S or buffered >= PARSE_MAX_LINES:
                # Offsets and totals are in step only right after a parse: the marks a
                # checkpoint (of any thread) writes are taken here, under its lock.
                with self._checkpoint_lock:
                    self.parse_buffered()
                    self._mark_parsed()
                self._mark_logs_read(began)
                last_parse = started
                self.maybe_checkpoint()
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, self.settings.poll_interval - elapsed))

    def _mark_logs_read(self, began: datetime) -> None:
        """Every line written before `began` is a record now, unless held back as a possible
        wrap half. Stamps are whole seconds, so a line written later can carry the second
        before: its window counts as complete a second after its end."""
        assert self.live is not None
        for followed in self._followed:
            if not any(state.pending for state, _ in followed.states.values()):
                self.live.mark_input(
                    _log_key(followed.target),
                    followed.target.deployment,
                    began - timedelta(seconds=STAMP_RESOLUTION_S),
                )
                self._logs_marked.add(followed.target.path)
        if len(self._logs_marked) == len(self._followed):
            self._logs_parsed.set()

    def read_once(self, followed: _Followed) -> None:
        """Read what is new in one followed file into its buffer."""
        assert self.live is not None
        gaps_before = followed.follower.gaps
        chunks = followed.follower.poll()
        if chunks:
            self.note_input()
        followed.buffer.extend(chunks)
        if followed.follower.gaps > gaps_before:
            self.live.add_gaps(followed.target.deployment, followed.follower.gaps - gaps_before)

    def parse_buffered(self) -> bool:
        """Parse every buffered chunk (the parser has a fixed cost per call, so lines are
        parsed a few times a second, not on every poll); True when anything was parsed."""
        parsed = False
        for followed in self._followed:
            chunks, followed.buffer = _merge_chunks(followed.buffer), []
            for chunk in chunks:
                try:
                    self._parse_chunk(followed, chunk)
                except Exception:
                    # Never expected (the parser reports what it cannot read as unrecognized
                    # lines); say it loudly rather than stop following.
                    LOG.exception(
                        "parsing lines %d-%d of %s failed; they are not counted",
                        chunk.first_line,
                        chunk.first_line + len(chunk.lines) - 1,
                        followed.target.path,
                    )
                parsed = True
            self._expire_states(followed)
        return parsed

    def _parse_chunk(self, followed: _Followed, chunk: Chunk) -> None:
        assert self.live is not None
        now = time.monotonic()
        if chunk.new_incarnation or chunk.incarnation not in followed.states:
            followed.states[chunk.incarnation] = (ParseState(), now)
        state, _ = followed.states[chunk.incarnation]
        followed.states[chunk.incarnation] = (state, now)
        frames = parse_lines(
            chunk.lines,
            source=followed.target.path,
            deployment=followed.target.deployment,
            first_line=chunk.first_line,
            options=self._parse_options(),
            state=state,
            final=False,
            cut_lengths=chunk.cut,
        )
        self.live.add_log_batch(frames)

    def _expire_states(self, followed: _Followed, *, everything: bool = False) -> None:
        """A line held back as the possible first half of a wrapped record is parsed on its
        own once the file has been quiet for WRAP_WAIT_S (wrap halves are written together);
        parser states of files gone quiet for long are dropped."""
        assert self.live is not None
        now = time.monotonic()
        for key, (state, used) in list(followed.states.items()):
            idle = now - used
            if state.pending and (everything or idle >= WRAP_WAIT_S):
                frames = parse_lines(
                    [],
                    source=followed.target.path,
                    deployment=followed.target.deployment,
                    options=self._parse_options(),
                    state=state,
                    final=True,
                )
                self.live.add_log_batch(frames)
            if everything or idle > PARSE_STATE_IDLE_S:
                del followed.states[key]

    def _parse_options(self) -> ParseOptions:
        # The file's naive timestamps are read in the configured zone; "now" anchors the
        # missing year (a live log is current).
        return ParseOptions(tz=self.settings.log_timezone, reference_time=datetime.now(UTC))

    def _flush_parsers(self) -> None:
        self.parse_buffered()
        for followed in self._followed:
            try:
                self._expire_states(followed, everything=True)
            except PreemptscopeError:
                LOG.exception("flushing the parser of %s failed", followed.target.path)

    def _mark_parsed(self) -> None:
        for followed in self._followed:
            self._parsed_marks[followed.target.path] = followed.follower.checkpoint()

    def maybe_checkpoint(self) -> None:
        """Checkpoint when anything changed and the last one is CHECKPOINT_EVERY_S old."""
        if self.live is None or time.monotonic() - self._last_checkpoint < CHECKPOINT_EVERY_S:
            return
        if self.live.changes != self._checkpointed_changes:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Offsets, totals and the history segments in one atomic write, so they agree:
        the new history segment is written first and counts once checkpoint.json names it."""
        if self.live is None:
            return
        with self._checkpoint_lock:
            self._last_checkpoint = time.monotonic()
            changes = self.live.changes
            full = self._full_history or len(self._segments) >= COMPACT_AFTER
            segment, totals = self.live.take_history(full=full)
            segments = list(self._segments)
            try:
                if segment or full:
                    seq = max(segments, default=0) + 1
                    self.journal.write(seq, segment)
                    segments = [seq] if full else [*segments, seq]
                data = {
                    "followers": {
                        path: mark.to_dict() for path, mark in self._parsed_marks.items()
                    },
                    "totals": totals,
                    "history": {"segments": segments},
                }
                self.store.save(data)
            except OSError as exc:
                # Keep serving; the next checkpoint retries, writing the whole history (what
                # was taken for this one is in no segment). Say it loudly.
                self._full_history = True
                LOG.error("cannot write checkpoint in %s: %s", self.store.directory, exc)
                return
            self._segments, self._full_history = segments, False
            self._checkpointed_changes = changes
            if full:
                self.journal.keep_only(segments)

    def _restore_history(self, saved: Any) -> None:
        """The last run's history back into the live state (the verdict survives a restart).
        A history that cannot be read is a warning, not a refusal: the totals and offsets
        are intact and the history fills again."""
        assert self.live is not None
        seqs = restore_info(saved)
        try:
            segments = self.journal.read(seqs)
        except HistoryError as exc:
            LOG.warning("the history of the last run is lost (%s); it fills again", exc)
            return
        self.live.restore_history(segments)
        self._segments = seqs

    # -- scraping ------------------------------------------------------------------------

    def _scrape_loop(self, target: ScrapeTarget) -> None:
        assert self.live is not None
        # The verdict needs min_samples scrapes: the first ones come WARMUP_INTERVAL_S apart
        # (then --scrape-interval), so the first verdict follows the first scrape within
        # seconds instead of after min_samples intervals (bench/bench_first_verdict.py).
        warmup = AnalysisParams().min_samples
        succeeded = 0
        while not self._stop.is_set():
            started = time.monotonic()
            succeeded += self.scrape_once(target)
            interval = self.settings.scrape_interval
            if 0 < succeeded < warmup:
                interval = min(interval, WARMUP_INTERVAL_S)
            elapsed = time.monotonic() - started
            self._stop.wait(max(0.0, interval - elapsed))

    def scrape_once(self, target: ScrapeTarget) -> bool:
        """Scrape one target into the live state; True when the scrape succeeded."""
        assert self.live is not None
        started = time.perf_counter()
        # The samples are stamped when the scrape starts: until it ends, this deployment's
        # windows after that moment can still change.
        key = f"scrape\t{target.url}"
        self.live.mark_input(key, target.deployment, datetime.now(UTC))
        try:
            return self._scrape(target, started)
        finally:
            self.live.unmark_input(key)

    def _scrape(self, target: ScrapeTarget, started: float) -> bool:
        assert self.live is not None
        try:
            samples = scrape_once(
                target.url,
                timeout=self.settings.scrape_timeout,
                deployment=target.deployment,
                max_bytes=self.settings.scrape_max_size,
            )
        except PreemptscopeError as exc:
            self.live.add_scrape(
                target.url,
                target.deployment,
                None,
                duration_s=time.perf_counter() - started,
                error=str(exc),
            )
            LOG.warning("scrape of %s failed: %s", target.url, exc)
            return False
        except Exception as exc:  # a scrape never takes the service down
            self.live.add_scrape(
                target.url,
                target.deployment,
                None,
                duration_s=time.perf_counter() - started,
                error=f"{type(exc).__name__}: {exc}",
            )
            LOG.exception("scrape of %s failed unexpectedly", target.url)
            return False
        self.note_input()
        self.live.add_scrape(
            target.url, target.deployment, samples, duration_s=time.perf_counter() - started
        )
        return True

    def _prometheus_loop(self, source: PrometheusSource) -> None:
        assert self.live is not None
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    if source.poll(self.live):
                        self._last_input = time.monotonic()
                except Exception:  # a failed poll never takes the service down
                    LOG.exception("reading %s failed unexpectedly", source.url)
                elapsed = time.monotonic() - started
                self._stop.wait(max(0.0, self.settings.prometheus_interval - elapsed))
        finally:
            source.close()

    # -- analysis ------------------------------------------------------------------------

    def _analysis_loop(self) -> None:
        assert self.live is not None
        _name_os_thread("ps-analysis")
        last = 0.0
        pause = self.settings.analysis_interval
        if self._followed:
            self._logs_parsed.wait(FIRST_PARSE_WAIT_S)
        while not self._stop.is_set():
            dirty = self.live.take_dirty()
            if dirty or time.monotonic() - last >= ANALYSIS_MAX_IDLE_S or not self.ready():
                started = time.monotonic()
                try:
                    self.live.analyze_now()
                    self._ready.set()
                except Exception:
                    LOG.exception("live analysis failed; keeping the previous report")
                last = time.monotonic()
                # A long history of a busy log makes the analysis slow: keep its share of
                # the CPU bounded (about a fifth of a core at most) by pausing accordingly.
                pause = max(
                    self.settings.analysis_interval, ANALYSIS_PAUSE_FACTOR * (last - started)
                )
            # Scrapes (and Prometheus reads) change the state without a parse: checkpointed
            # here, at most once a CHECKPOINT_EVERY_S like the follow loop's.
            self.maybe_checkpoint()
            self._stop.wait(pause)


def _merge_chunks(chunks: list[Chunk]) -> list[Chunk]:
    """Join consecutive chunks of one file incarnation into one parse call."""
    merged: list[Chunk] = []
    for chunk in chunks:
        last = merged[-1] if merged else None
        if (
            last is not None
            and last.incarnation == chunk.incarnation
            and not chunk.new_incarnation
            and last.first_line + len(last.lines) == chunk.first_line
        ):
            merged[-1] = replace(last, lines=[*last.lines, *chunk.lines])
        else:
            merged.append(chunk)
    return merged


def _name_os_thread(name: str) -> None:
    """Name the OS thread (Linux), so per-thread CPU shows in /proc and top -H."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
