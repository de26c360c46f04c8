"""Gather inputs: logs, /metrics, bench results read and grouped into deployments.

Grouping is logic, so it lives below both the CLI (`preemptscope report`, `demo`) and the service
(`POST /api/report`); it imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl

from preemptscope.analysis.analyze import DeploymentInputs
from preemptscope.analysis.report import SourceSummary
from preemptscope.errors import ConfigError
from preemptscope.fleet import Fleet, join_local
from preemptscope.ingest import archive, bench, metrics
from preemptscope.ingest.logs import ParseOptions, iter_log_paths, parse_path
from preemptscope.ingest.schema import LogFrames
from preemptscope.k8s import name_from_log_path

SCRAPE_TIMEOUT_S = 10.0
_NAME = re.compile(r"^[\w.@:-]+$")
# Kubernetes names: namespace/pod (the fleet and kubelet log paths name deployments so).
_POD_NAME = re.compile(r"^[\w.@:-]+/[\w.@:-]+$")


def split_spec(spec: str) -> tuple[str, str | None]:
    """ "PATH=NAME" -> (PATH, NAME); a path or URL that itself contains "=" stays whole."""
    if "=" in spec and not Path(spec).exists():
        path, _, name = spec.rpartition("=")
        query = re.split(r"[?&]", path)[-1] if "?" in path else "="
        # In "http://h/metrics?x=1" the "=" belongs to the query, not to a NAME.
        if path and _NAME.match(name) and "/" not in name and "=" in query:
            return path, name
        if path and _POD_NAME.match(name) and Path(path).exists():
            return path, name
    return spec, None


def stem(path: str) -> str:
    """A deployment name from a path or URL: `namespace/pod` for a kubelet log path, else the
    file name without .gz/.log/.json/... suffixes (the host for a URL)."""
    if path == "-":
        return "stdin"
    pod = name_from_log_path(path)
    if pod is not None:  # a kubelet log path: namespace/pod, not "0"
        return pod
    if "://" in path:
        host = path.split("://", 1)[1].split("/", 1)[0]
        return host.replace(":", "_") or "metrics"
    name = Path(path.rstrip("/")).name or "deployment"
    for _ in range(3):
        head, dot, suffix = name.rpartition(".")
        known = ("gz", "log", "txt", "json", "jsonl", "csv", "prom")
        if dot and head and (suffix.lower() in known or suffix.isdigit()):  # vllm.log.1: rotated
            name = head
    return name


@dataclass
class LoadOptions:
    parse: ParseOptions = field(default_factory=ParseOptions)
    bench_start: datetime | None = None
    scrape_timeout_s: float = SCRAPE_TIMEOUT_S
    # The time range read from Parquet archives (`parse --out` directories); None: all.
    archive_start: datetime | None = None
    archive_end: datetime | None = None


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

    for path, name in named_logs:
        if name in archived and archived[name][0] == path:
            frames = archived[name][1]
            entry(name).logs.append(frames)
            entry(name).sources.append(archive_summary(frames, name))
            continue
        frames = parse_path(path, deployment=name, options=opts.parse)
        target = entry(name)
        target.logs.append(frames)
        target.sources.append(log_summary(frames, name))
    for kind, path, name in resolved:
        target = entry(name)
        if kind == "metrics":
            frame = _read_metrics(path, name, opts)
            metric_frames.setdefault(name, []).append(frame)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="metrics",
                    deployment=name,
                    records={
                        "samples": frame.height,
                        "scrapes": frame["timestamp"].n_unique() if frame.height else 0,
                    },
                )
            )
        else:
            result = bench.read_bench(path, deployment=name, start=opts.bench_start)
            if result.latencies.is_empty():
                # Whole-run figures cannot be placed in windows: say so instead of ignoring.
                bench.read_latencies(path, deployment=name, start=opts.bench_start)
            latency_frames.setdefault(name, []).append(result.latencies)
            target.sources.append(
                SourceSummary(
                    path=path,
                    kind="bench",
                    deployment=name,
                    records={"requests": result.latencies.height},
                    notes=list(result.notes),
                )
            )
    for name, parts in metric_frames.items():
        by_name[name].metrics = pl.concat(parts, how="vertical").sort(
            "timestamp", maintain_order=True
        )
    for name, parts in latency_frames.items():
        by_name[name].latencies = pl.concat(parts, how="vertical")
    return list(by_name.values())


def iter_inputs(
    log_specs: Sequence[str],
    metrics_specs: Sequence[str] = (),
    bench_specs: Sequence[str] = (),
    *,
    options: LoadOptions | None = None,
    fleet: Fleet | None = None,
) -> Iterator[DeploymentInputs]:
    """As load_inputs, plus every server of a Prometheus (`fleet`), read one at a time."""
    given = bool(log_specs or metrics_specs or bench_specs)
    if fleet is None or given:
        local = load_inputs(log_specs, metrics_specs, bench_specs, options=options)
    else:
        local = []
    yield from (join_local(fleet, local) if fleet is not None else local)


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
        return metrics.scrape_once(spec, timeout=opts.scrape_timeout_s, deployment=name)
    return metrics.read_metrics_path(spec, deployment=name)


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
