"""Every local source read and grouped into deployments: logs, archives, /metrics, bench results.

Owns `load_inputs`: which reader each input goes to and how the results join into one
DeploymentInputs per deployment. Names come from `ingest/names.py`, the split of several
servers under one name from `ingest/servers.py` (both re-exported here). It reads through the
other ingest modules and never judges what it read; the CLI and the service
(`POST /api/report`) both call `load_inputs`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl
from preemptscope.ingest import archive, bench, metrics, scrape, sniff
from preemptscope.ingest.gathered import DeploymentInputs, SourceSummary
from preemptscope.ingest.logs import ParseOptions, iter_log_paths
from preemptscope.ingest.names import split_spec, stem
from preemptscope.ingest.reduce import reduce_paths
from preemptscope.ingest.schema import LogFrames
from preemptscope.ingest.servers import KV_SIZE_TOLERANCE, Pieces, group_servers, split_servers

from preemptscope.errors import ConfigError, InputError

__all__ = [
    "KV_SIZE_TOLERANCE",
    "SCRAPE_TIMEOUT_S",
    "LoadOptions",
    "Pieces",
    "archive_summary",
    "group_servers",
    "load_inputs",
    "log_summary",
    "split_spec",
    "stem",
]


SCRAPE_TIMEOUT_S = 10.0


@dataclass
class LoadOptions:
    parse: ParseOptions = field(default_factory=ParseOptions)
    bench_start: datetime | None = None
    scrape_timeout_s: float = SCRAPE_TIMEOUT_S
    # The time range read from Parquet archives (`parse --out` directories); None: all.
    archive_start: datetime | None = None
    archive_end: datetime | None = None
    # Told about each log input left out because it holds no vLLM line (sniff.describe says why).
    on_skip: Callable[[SourceSummary], None] | None = None


def _resolve_names(
    logs: list[tuple[str, str | None]],
    others: list[tuple[str, str, str | None]],
) -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    """Unnamed metrics/bench join the only log deployment; with several, they must be named."""
    named_logs = [(path, name or stem(path)) for path, name in logs]
    log_names = list(dict.fromkeys(name for _, name in named_logs))
    resolved: list[tuple[str, str, str]] = []
    for kind, path, name in others:
        if name is None:
            if len(log_names) > 1:
                raise ConfigError(
                    f"{path}: several deployments ({', '.join(log_names)}); say which this "
                    f"{kind} belongs to with {path}=NAME"
                )
            # Without logs, everything unnamed is one deployment named after the first input.
            name = log_names[0] if log_names else resolved[0][2] if resolved else stem(path)
        resolved.append((kind, path, name))
    return named_logs, resolved


def load_inputs(
    log_specs: Sequence[str],
    metrics_specs: Sequence[str] = (),
    bench_specs: Sequence[str] = (),
    *,
    options: LoadOptions | None = None,
) -> list[DeploymentInputs]:
    """Read everything and group it by deployment (PATH=NAME; default: the log's stem).

    Logs, /metrics snapshots (file, directory or URL) and client results of one deployment are
    joined on time into ONE DeploymentInputs. Raises InputError/ConfigError/ScrapeError.
    """
    opts = options or LoadOptions()
    # A directory is one deployment (its rotated files together), named after the directory.
    specs = []
    archives: list[tuple[str, str | None]] = []
    for spec in log_specs:
        path, name = split_spec(spec)
        if archive.is_archive(path):  # written by `parse --out`: read back, not parsed
            archives.append((path, name))
            continue
        if (hint := sniff.metrics_only_dir(path)) is not None:
            raise InputError(path, hint)
        specs.append(f"{path}={stem(path)}" if name is None and Path(path).is_dir() else spec)
    logs = list(iter_log_paths(specs)) if specs else []
    archived = _read_archives(archives, opts)
    logs += [(path, name) for name, (path, _) in archived.items()]
    others = [("metrics", *split_spec(s)) for s in metrics_specs]
    others += [("bench", *split_spec(s)) for s in bench_specs]
    named_logs, resolved = _resolve_names(logs, others)
    if not named_logs and not resolved:
        raise ConfigError("nothing to analyze: give log files, --metrics or --bench")

    by_name: dict[str, DeploymentInputs] = {}
    metric_frames: dict[str, list[pl.DataFrame]] = {}
    latency_frames: dict[str, list[pl.DataFrame]] = {}

    def entry(name: str) -> DeploymentInputs:
        return by_name.setdefault(name, DeploymentInputs(name))

    skipped: list[tuple[str, SourceSummary]] = []  # (why, its summary)
    # Each deployment's files are read through one reducer (ingest/reduce.py): no request
    # row is kept, and a request is joined across its rotated files.
    to_parse: dict[str, list[str]] = {}
    for path, name in named_logs:
        if not (name in archived and archived[name][0] == path):
            to_parse.setdefault(name, []).append(path)
    parsed: dict[tuple[str, str], LogFrames] = {}
    for name, paths in to_parse.items():
        for path, frames in zip(
            paths, reduce_paths(paths, deployment=name, options=opts.parse), strict=True
        ):
            parsed[(name, path)] = frames
    for path, name in named_logs:
        if name in archived and archived[name][0] == path:
            frames = archived[name][1]
            entry(name).logs.append(frames)
            entry(name).sources.append(archive_summary(frames, name))
            continue
        frames = parsed[(name, path)]
        if not sniff.holds_vllm(frames.record_counts()):
            skipped.append(_skipped(frames, name, path))
            continue
        target = entry(name)
        target.logs.append(frames)
        target.sources.append(log_summary(frames, name))
    if skipped and not by_name and not resolved:
        more = len(skipped) - 1
        also = f" ({more} more input{'s' if more > 1 else ''} without a vLLM line)" if more else ""
        raise InputError(skipped[0][1].path, skipped[0][0] + also)
    for why, source in skipped:
        source.notes.append(f"{why}; left out of the analysis")
        if opts.on_skip is not None:
            opts.on_skip(source)
    for kind, path, name in resolved:
        target = entry(name)
        if kind == "metrics":
            frame = _read_metrics(path, name, opts)
            notes = metrics.snapshot_notes(frame)
            kept = frame
            empty = metrics.no_vllm_sample(frame)
            if empty is not None:
                if len(resolved) == 1 and not named_logs:
                    raise InputError(path, empty)  # nothing else to analyze
                notes = [empty]
                kept = frame.clear()  # other exporters' scrapes are no vLLM record
            metric_frames.setdefault(name, []).append(kept)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="metrics",
                    deployment=name,
                    records={
                        "samples": frame.height,
                        "scrapes": frame["timestamp"].n_unique() if frame.height else 0,
                    },
                    notes=notes,
                )
            )
        else:
            # A summary-only result (no per-request rows) is a run-level source, not an error.
            result = bench.read_bench(path, deployment=name, start=opts.bench_start)
            latency_frames.setdefault(name, []).append(result.latencies)
            target.runs.extend((path, run) for run in result.runs)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="bench",
                    deployment=name,
                    records={"requests": result.latencies.height, "runs": len(result.runs)},
                    notes=list(result.notes),
                )
            )
    split_servers(by_name)
    for name, parts in metric_frames.items():
        by_name[name].metrics = pl.concat(parts, how="vertical").sort(
            "timestamp", maintain_order=True
        )
    for name, parts in latency_frames.items():
        by_name[name].latencies = pl.concat(parts, how="vertical")
    return list(by_name.values())


def _read_archives(
    archives: Sequence[tuple[str, str | None]], opts: LoadOptions
) -> dict[str, tuple[str, LogFrames]]:
    """Per deployment: (archive path, its frames); ARCHIVE=NAME reads only NAME's partitions."""
    found: dict[str, tuple[str, LogFrames]] = {}
    for path, name in archives:
        frames = archive.read_archive(
            path,
            deployments=[name] if name is not None else None,
            start=opts.archive_start,
            end=opts.archive_end,
        )
        for deployment, item in frames.items():
            if deployment in found:
                raise ConfigError(f"{path}: deployment {deployment} is in two archives")
            found[deployment] = (path, item)
    return found


def archive_summary(frames: LogFrames, name: str) -> SourceSummary:
    return SourceSummary(
        path=frames.source,
        kind="log",
        deployment=name,
        records=frames.record_counts(),
        vllm_version=frames.vllm_version,
        log_era=frames.log_era,
        notes=["read back from a Parquet archive (parse --out): its line counts are not stored"],
    )


def _read_metrics(spec: str, name: str, opts: LoadOptions) -> pl.DataFrame:
    if spec.startswith(("http://", "https://")):
        return scrape.scrape_once(spec, timeout=opts.scrape_timeout_s, deployment=name)
    return scrape.read_metrics_path(spec, deployment=name)


def _skipped(frames: LogFrames, name: str, path: str) -> tuple[str, SourceSummary]:
    """A log input with no vLLM line: what it looks like, and its summary."""
    why = sniff.describe_path(path, frames.accounting.lines, report=True)
    return why, log_summary(frames, name)


def log_summary(frames: LogFrames, name: str) -> SourceSummary:
    acc = frames.accounting
    return SourceSummary(
        path=frames.source,
        kind="log",
        deployment=name,
        lines=acc.lines,
        unrecognized_lines=acc.unrecognized_lines,
        records=frames.record_counts(),
        vllm_version=frames.vllm_version,
        log_era=frames.log_era,
        timezone=frames.timezone,
    )
