"""The live state: recent frames per deployment, running totals, and the current Report.

Gauges (verdict, KV usage, waiting, latency) come from `analyze()` run over the last
`history` seconds of data, exactly the batch analyzer. Counters (preemptions, lines read)
cannot come from a sliding window, so they are running totals kept here and persisted in
the checkpoint; they only count what the frames say (a V0 warning's cumulative counter, a
V1 `Preemptions:` field, vLLM's own counter), with restarts of vLLM detected as counter
resets (the value went down), never as negative increments.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Report, SourceSummary
from preemptscope.exporter.history import HistorySegment
from preemptscope.ingest.reduce import LogReducer
from preemptscope.ingest.schema import ARRIVALS, FRAME_SCHEMAS, JOINED, LogFrames
from preemptscope.ingest.versions import v0_warns_preemption

LOG = logging.getLogger("preemptscope.exporter.live")

# Kinds whose rows describe the deployment rather than a moment: kept however old they are
# (the startup lines give KV capacity and max_num_seqs for the advice), but bounded.
STICKY_KINDS = ("config", "kv_capacity")
STICKY_ROWS = 500
# Kinds analyze() does not read are counted (lines, records) but not kept in memory.
UNUSED_KINDS = ("access", "other", "unrecognized")
# Memory and analysis time stay bounded on very busy logs: the newest rows per kind win.
MAX_ROWS_PER_KIND = 200_000
PREEMPTION_SOURCES = ("metrics_counter", "v1_stats_field", "v0_warning_counter")


@dataclass
class DeploymentTotals:
    """Monotonic running totals of one deployment, persisted across restarts."""

    lines: int = 0
    unrecognized_lines: int = 0
    # Only sources that exist for this deployment have a key: no count is no series, never 0.
    preemptions: dict[str, int] = field(default_factory=dict)
    rotations: dict[str, int] = field(default_factory=dict)
    gaps: int = 0
    last_event: dict[str, float] = field(default_factory=dict)  # "log"/"metrics" -> epoch s

    def to_dict(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "unrecognized_lines": self.unrecognized_lines,
            "preemptions": dict(self.preemptions),
            "rotations": dict(self.rotations),
            "gaps": self.gaps,
            "last_event": dict(self.last_event),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, sources_known: bool = True) -> DeploymentTotals:
        """`sources_known`: every key of `preemptions` is a source that exists (checkpoints
        written before that held a 0 for every source, present or not)."""
        totals = cls(
            lines=int(data.get("lines", 0)),
            unrecognized_lines=int(data.get("unrecognized_lines", 0)),
            rotations={str(k): int(v) for k, v in data.get("rotations", {}).items()},
            gaps=int(data.get("gaps", 0)),
            last_event={str(k): float(v) for k, v in data.get("last_event", {}).items()},
        )
        for source, value in data.get("preemptions", {}).items():
            # From an older checkpoint drop the zeros (a real one comes back as soon as its
            # source is seen again).
            if sources_known or int(value) > 0:
                totals.preemptions[str(source)] = int(value)
        return totals


@dataclass
class ScrapeStatus:
    url: str
    deployment: str
    up: bool = False
    duration_s: float | None = None
    last_success: float | None = None  # epoch seconds
    last_error: str | None = None
    scrapes: int = 0
    failures: int = 0


@dataclass(frozen=True)
class Snapshot:
    """What /metrics and the API read: immutable, swapped in whole."""

    report: Report | None
    totals: dict[str, DeploymentTotals]
    scrapes: dict[str, ScrapeStatus]
    analysis_seconds: float | None
    analysed_at: float | None  # epoch seconds
    model_names: dict[str, str]
    version: int = 0  # changes whenever anything in the snapshot may have changed


def counter_delta(previous: float | None, current: float) -> float:
    """Increase of a cumulative counter; a drop means the producer restarted from 0."""
    if previous is None:
        return 0.0
    return current - previous if current >= previous else current


class LiveState:
    """Thread-safe holder of recent frames and totals; `analyze_now()` builds the Report."""

    def __init__(
        self,
        deployments: Sequence[str],
        *,
        window_s: float,
        history_s: float,
        params: Mapping[str, Any] | None = None,
        saved: Mapping[str, Any] | None = None,
        clock: str = "wall",
    ) -> None:
        self._clock = clock
        self._latest_data: datetime | None = None  # newest record time seen (clock="data")
        self._lock = threading.Lock()
        self._window_s = window_s
        self._history_s = history_s
        self._params = dict(params or {})
        self._order = list(dict.fromkeys(deployments))
        saved = saved or {}
        known = bool(saved.get("preemption_sources_known"))
        self.totals: dict[str, DeploymentTotals] = {
            name: DeploymentTotals.from_dict(data, sources_known=known)
            for name, data in saved.get("deployments", {}).items()
        }
        for name in self._order:
            self.totals.setdefault(name, DeploymentTotals())
        # Last raw counter values, so a restart of preemptscope does not lose or re-add
        # what vLLM counted meanwhile: "deployment\tsource" -> last V0 cumulative value,
        # "deployment\turl\tmodel\tengine" -> last num_preemptions value.
        self._v0_last: dict[str, int] = {k: int(v) for k, v in saved.get("v0_last", {}).items()}
        self._counter_last: dict[str, float] = {
            k: float(v) for k, v in saved.get("counter_last", {}).items()
        }
        self._logs: dict[tuple[str, str], list[LogFrames]] = {}
        self._reducers: dict[tuple[str, str], LogReducer] = {}
        # "deployment\tsource" -> vLLM version printed (the banner is read once, at the start)
        self._versions: dict[str, str] = {
            str(k): str(v) for k, v in saved.get("versions", {}).items()
        }
        self._metrics: dict[str, list[pl.DataFrame]] = {}
        self._scrapes: dict[str, ScrapeStatus] = {}
        self._model_names: dict[str, str] = {}
        # Per input, its deployment and the earliest stamp anything it adds later can carry:
        # a deployment's window that ends at or before all its marks has all its records.
        self._marks: dict[str, tuple[str, datetime]] = {}
        latest = saved.get("latest_data")
        if isinstance(latest, (int, float)):
            self._latest_data = datetime.fromtimestamp(float(latest), UTC)
        # Added since the last checkpoint: the next history segment (exporter/history.py).
        self._unsaved = HistorySegment()
        self._dirty = True
        self._version = 0
        self._changes = 0  # inputs taken (what a checkpoint holds), not analyses
        self._snapshot = Snapshot(None, self._copy_totals(), {}, None, None, {})
        self._served: Snapshot = self._snapshot

    # -- input ---------------------------------------------------------------------------

    def add_log_batch(self, frames: LogFrames) -> None:
        name = frames.deployment
        warnings = frames["preemption_warning"]
        stats = frames["scheduler_stats"]
        # Everything computed before anything is changed: a batch counts whole or not at all.
        cumulative = [int(v) for v in warnings["cumulative"].drop_nulls().to_list()]
        counted = stats["preemptions"].drop_nulls()
        v1_count = int(counted.sum()) if counted.len() else 0
        v0_stats = stats.height > 0 and bool((stats["era"] == "v0").any())
        stamps = [
            value
            for value in (warnings["timestamp"].max(), stats["timestamp"].max())
            if isinstance(value, datetime)
        ]
        with self._lock:
            totals = self.totals.setdefault(name, DeploymentTotals())
            totals.lines += frames.accounting.lines
            totals.unrecognized_lines += frames.accounting.unrecognized_lines
            key = f"{name}\t{frames.source}"
            if frames.vllm_version is not None:
                self._versions[key] = frames.vllm_version  # the banner is in the first batch
            if cumulative or (v0_stats and v0_warns_preemption(self._versions.get(key))):
                # V0 warnings are a source here (v0.4.3+, or seen): 0 is a true lower bound.
                totals.preemptions.setdefault("v0_warning_counter", 0)
            for value in cumulative:
                # The V0 counter is printed at 1, 51, 101, ...: a lower bound. A smaller
                # value than the last one means vLLM restarted.
                last = self._v0_last.get(key)
                step = value - last if last is not None and value >= last else value
                totals.preemptions["v0_warning_counter"] += step
                self._v0_last[key] = value
            if counted.len():
                totals.preemptions["v1_stats_field"] = (
                    totals.preemptions.get("v1_stats_field", 0) + v1_count
                )
            if stamps:
                newest = max(stamps)
                if self._latest_data is None or newest > self._latest_data:
                    self._latest_data = newest
                latest = newest.timestamp()
                totals.last_event["log"] = max(totals.last_event.get("log", 0.0), latest)
            # Request lines go through the batch path's reducer: only open requests and one
            # row per request are kept (ingest/reduce.py). It counts the rows it drops.
            reducer = self._reducers.setdefault((name, frames.source), LogReducer())
            frames, arrivals, joined = reducer.add(frames)
            for kind in UNUSED_KINDS:
                if kind in frames.frames and frames.frames[kind].height:
                    _count_dropped(frames.summarized, kind, frames.frames[kind].height)
                    frames.frames[kind] = frames.frames[kind].clear()
            frames.arrivals, frames.joined = arrivals.drop("source"), joined.drop("source")
            self._logs.setdefault((name, frames.source), []).append(frames)
            self._unsaved.logs.append(frames)
            self._dirty = True
            self._version += 1
            self._changes += 1

    def add_rotation(self, deployment: str, kind: str) -> None:
        with self._lock:
            totals = self.totals.setdefault(deployment, DeploymentTotals())
            totals.rotations[kind] = totals.rotations.get(kind, 0) + 1
            self._version += 1
            self._changes += 1

    def add_gaps(self, deployment: str, gaps: int) -> None:
        with self._lock:
            self.totals.setdefault(deployment, DeploymentTotals()).gaps += gaps
            self._version += 1
            self._changes += 1

    def add_scrape(
        self,
        url: str,
        deployment: str,
        samples: pl.DataFrame | None,
        *,
        duration_s: float,
        error: str | None = None,
        now: float | None = None,
    ) -> None:
        at = time.time() if now is None else now
        with self._lock:
            status = self._scrapes.setdefault(url, ScrapeStatus(url, deployment))
            status.scrapes += 1
            status.duration_s = duration_s
            self._version += 1
            self._changes += 1
            if samples is None:
                status.up, status.last_error = False, error
                status.failures += 1
                return
            status.up, status.last_success, status.last_error = True, at, None
            totals = self.totals.setdefault(deployment, DeploymentTotals())
            counters = samples.filter(
                (pl.col("metric") == "num_preemptions") & (pl.col("sample") == "value")
            )
            for row in counters.iter_rows(named=True):
                key = f"{deployment}\t{url}\t{row['model_name']}\t{row['engine']}"
                value = float(row["value"])
                step = counter_delta(self._counter_last.get(key), value)
                totals.preemptions["metrics_counter"] = totals.preemptions.get(
                    "metrics_counter", 0
                ) + round(step)
                self._counter_last[key] = value
            models = samples["model_name"].drop_nulls()
            if models.len():
                self._model_names[deployment] = str(models[0])
            totals.last_event["metrics"] = at
            scraped = datetime.fromtimestamp(at, UTC)
            if self._latest_data is None or scraped > self._latest_data:
                self._latest_data = scraped
            self._metrics.setdefault(deployment, []).append(samples)
            self._unsaved.metrics.append((deployment, samples))
            self._dirty = True
            self._version += 1
            self._changes += 1

    # -- how far the inputs are read ---------------------------------------------------

    def mark_input(self, key: str, deployment: str, earliest: datetime) -> None:
        """Input `key` of `deployment` may still add records stamped at `earliest` or later,
        none before."""
        with self._lock:
            self._marks[key] = (deployment, earliest)

    def unmark_input(self, key: str) -> None:
        """Input `key` is idle: what it adds next is stamped after the analysis that reads it."""
        with self._lock:
            self._marks.pop(key, None)

    # -- analysis ------------------------------------------------------------------------

    def take_dirty(self) -> bool:
        with self._lock:
            dirty, self._dirty = self._dirty, False
            return dirty

    def analyze_now(self, now: datetime | None = None) -> Report:
        """Prune to the history, run the batch analyzer, publish a new snapshot."""
        moment = now or self._now()
        cutoff = moment - timedelta(seconds=self._history_s)
        started = time.perf_counter()
        with self._lock:
            for key, batches in self._logs.items():
                self._logs[key] = [_prune_logs(batches, cutoff)] if batches else []
            for name, parts in self._metrics.items():
                self._metrics[name] = [_prune_metrics(parts, cutoff)] if parts else []
            logs = {key: list(batches) for key, batches in self._logs.items()}
            # Open requests count as the batch path's close() gives them at the end of a
            # file: arrived, and with the end seen so far when one was logged (a streamed
            # response's last delta, an abort).
            for key, batches in logs.items():
                reducer = self._reducers.get(key)
                if reducer is None or not batches or reducer.join.open_requests == 0:
                    continue
                last = batches[-1]
                arrivals, joined = reducer.join.provisional()
                batches[-1] = dataclasses.replace(
                    last,
                    arrivals=_appended(last.arrivals, arrivals),
                    joined=_appended(last.joined, joined),
                )
            metrics = {name: list(parts) for name, parts in self._metrics.items()}
            names = list(dict.fromkeys([*self._order, *self.totals]))
            # Taken with the frames: the windows these frames complete.
            complete_before: dict[str, datetime] = {}
            for owner, earliest in self._marks.values():
                complete_before[owner] = min(earliest, complete_before.get(owner, moment), moment)
        inputs = []
        for name in names:
            frames = [b for (dep, _), batches in logs.items() if dep == name for b in batches]
            parts = metrics.get(name, [])
            metric_frame = pl.concat(parts, how="vertical_relaxed") if parts else None
            inputs.append(
                DeploymentInputs(
                    name=name,
                    logs=frames,
                    metrics=metric_frame,
                    sources=[_log_source(f) for f in frames],
                )
            )
        params = AnalysisParams(window_s=self._window_s, now=moment, **self._params)
        report = analyze(inputs, params)
        report = _with_time(report, moment, complete_before)
        elapsed = time.perf_counter() - started
        with self._lock:
            models = dict(self._model_names)
            for deployment in report.deployments:
                if deployment.capacity.model and deployment.name not in models:
                    models[deployment.name] = deployment.capacity.model
            self._snapshot = Snapshot(
                report=report,
                totals=self._copy_totals(),
                scrapes={k: _copy_status(v) for k, v in self._scrapes.items()},
                analysis_seconds=elapsed,
                analysed_at=moment.timestamp(),
                model_names=models,
            )
            self._version += 1
        return report

    def _now(self) -> datetime:
        with self._lock:
            if self._clock == "data" and self._latest_data is not None:
                return self._latest_data
        return datetime.now(UTC)

    def snapshot(self) -> Snapshot:
        """The last analysis with current totals (counters move between analyses)."""
        with self._lock:
            if self._served.version == self._version:
                return self._served  # nothing changed: no copy (hot path under load)
            snap = self._snapshot
            self._served = Snapshot(
                report=snap.report,
                totals=self._copy_totals(),
                scrapes={k: _copy_status(v) for k, v in self._scrapes.items()},
                analysis_seconds=snap.analysis_seconds,
                analysed_at=snap.analysed_at,
                model_names=dict(snap.model_names),
                version=self._version,
            )
            return self._served

    @property
    def changes(self) -> int:
        """Moves whenever anything a checkpoint holds may have changed (not on analyses)."""
        with self._lock:
            return self._changes

    def take_history(self, *, full: bool) -> tuple[HistorySegment, dict[str, Any]]:
        """What the next checkpoint writes, taken at one moment: the frames added since the
        last call (or, `full`, the whole history held), with the totals that count them."""
        with self._lock:
            if full:
                segment = HistorySegment(
                    logs=[b for batches in self._logs.values() for b in batches],
                    metrics=[(n, p) for n, parts in self._metrics.items() for p in parts],
                )
            else:
                segment = self._unsaved
            self._unsaved = HistorySegment()
            return segment, self._saved_state()

    def restore_history(self, segments: Sequence[HistorySegment]) -> None:
        """Put the frames of the last run's history back (read from the state directory):
        the verdict and the gauges are what they were; totals are not touched (the checkpoint
        holds them)."""
        with self._lock:
            for segment in segments:
                for frames in segment.logs:
                    self._logs.setdefault((frames.deployment, frames.source), []).append(frames)
                    if frames.vllm_version is not None:
                        key = f"{frames.deployment}\t{frames.source}"
                        self._versions.setdefault(key, frames.vllm_version)
                for name, samples in segment.metrics:
                    self._metrics.setdefault(name, []).append(samples)
            self._dirty = True
            self._version += 1
            self._changes += 1

    def saved_state(self) -> dict[str, Any]:
        """The totals part of the checkpoint (see exporter/state.py)."""
        with self._lock:
            return self._saved_state()

    def _saved_state(self) -> dict[str, Any]:
        latest = None if self._latest_data is None else self._latest_data.timestamp()
        return {
            "latest_data": latest,
            "deployments": {name: t.to_dict() for name, t in self.totals.items()},
            "v0_last": dict(self._v0_last),
            "counter_last": dict(self._counter_last),
            "versions": dict(self._versions),
            "preemption_sources_known": True,
        }

    def _copy_totals(self) -> dict[str, DeploymentTotals]:
        return {name: DeploymentTotals.from_dict(t.to_dict()) for name, t in self.totals.items()}


def _copy_status(status: ScrapeStatus) -> ScrapeStatus:
    return ScrapeStatus(**vars(status))


def _with_time(report: Report, moment: datetime, complete_before: dict[str, datetime]) -> Report:
    """The report at `moment`; `complete_before` holds, for each deployment whose inputs are
    not read up to `moment`, the time they are read up to."""
    cut = {name: at.isoformat() for name, at in sorted(complete_before.items()) if at < moment}
    parameters = {**report.parameters, "complete_before": cut}
    return dataclasses.replace(report, generated_at=moment, parameters=parameters)


def _log_source(frames: LogFrames) -> SourceSummary:
    return SourceSummary(
        path=frames.source,
        kind="log",
        deployment=frames.deployment,
        lines=frames.accounting.lines,
        unrecognized_lines=frames.accounting.unrecognized_lines,
        records=frames.record_counts(),
        vllm_version=frames.vllm_version,
        log_era=frames.log_era,
        timezone=frames.timezone,
    )


def _prune_logs(batches: list[LogFrames], cutoff: datetime) -> LogFrames:
    """Merge the batches of one source and drop rows older than the history."""
    first = batches[0]
    merged = LogFrames(
        source=first.source,
        deployment=first.deployment,
        timezone=first.timezone,
        vllm_version=first.vllm_version,
        log_era=first.log_era,
        year_source=first.year_source,
    )
    for batch in batches:
        merged.vllm_version = merged.vllm_version or batch.vllm_version
        merged.log_era = batch.log_era or merged.log_era
        for name in ("lines", "parsed_lines", "unrecognized_lines", "blank_lines"):
            setattr(
                merged.accounting,
                name,
                getattr(merged.accounting, name) + getattr(batch.accounting, name),
            )
        # Rows counted, not kept (the reducer's): totals since the start, as the line counts.
        for kind, count in batch.summarized.items():
            merged.summarized[kind] = merged.summarized.get(kind, 0) + count
    for kind in FRAME_SCHEMAS:
        parts = [b.frames[kind] for b in batches if kind in b.frames and b.frames[kind].height]
        if not parts:
            continue
        frame = pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]
        if kind in STICKY_KINDS:
            kept = frame.tail(STICKY_ROWS)
        elif "timestamp" in frame.columns:
            # Rows without a time of their own cannot be placed in a window: dropped here
            # (they are counted in the line totals all the same).
            kept = frame.filter(pl.col("timestamp") >= cutoff).tail(MAX_ROWS_PER_KIND)
        else:
            kept = frame.tail(STICKY_ROWS)
        # What a source's records say is every row since the start, as its line counts.
        _count_dropped(merged.summarized, kind, frame.height - kept.height)
        merged.frames[kind] = kept
    for name, schema, column in (("arrivals", ARRIVALS, "timestamp"), ("joined", JOINED, "start")):
        rows = [getattr(b, name) for b in batches if getattr(b, name) is not None]
        kept = pl.concat(rows) if rows else pl.DataFrame(schema=schema)
        setattr(merged, name, kept.filter(pl.col(column) >= cutoff).tail(MAX_ROWS_PER_KIND))
    return merged


def _count_dropped(summarized: dict[str, int], kind: str, rows: int) -> None:
    """Count `rows` of `kind` no longer kept as records all the same (LogFrames.summarized)."""
    if rows:
        summarized[kind] = summarized.get(kind, 0) + rows


def _appended(kept: pl.DataFrame | None, rows: pl.DataFrame) -> pl.DataFrame | None:
    """`kept` with the join's `rows` (their `source` dropped: a LogFrames is one file)."""
    if rows.is_empty():
        return kept
    rows = rows.drop("source")
    return rows if kept is None else pl.concat([kept, rows])


def _prune_metrics(parts: list[pl.DataFrame], cutoff: datetime) -> pl.DataFrame:
    frame = pl.concat(parts, how="vertical_relaxed") if len(parts) > 1 else parts[0]
    return frame.filter(pl.col("timestamp") >= cutoff)
