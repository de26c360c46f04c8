"""Every local source read and grouped into deployments: logs, archives, /metrics, bench results.

Owns the PATH=NAME specs, the naming of deployments (file stem, kubelet path) and the telling
apart of several servers under one name. It reads through the other ingest modules and never
judges what it read; the CLI and the service (`POST /api/report`) both call `load_inputs`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import polars as pl
from preemptscope.ingest import archive, bench, metrics, sniff
from preemptscope.ingest.gathered import DeploymentInputs, SourceSummary
from preemptscope.ingest.k8s import name_from_log_path
from preemptscope.ingest.logs import ParseOptions, iter_log_paths
from preemptscope.ingest.reduce import reduce_paths
from preemptscope.ingest.schema import LogFrames

from preemptscope.errors import ConfigError, InputError

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
    _split_servers(by_name)
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


# -------------------------------------------------------------------------------------------
# Several servers under one name: tell them apart, never sum their running counts.

# Two KV sizes (blocks or tokens) further apart than this are two engines, not one.
KV_SIZE_TOLERANCE = 0.01


@dataclass
class _Server:
    logs: list[LogFrames]
    families: set[str]
    kv: set[float]
    first: datetime | None
    last: datetime | None


def _stats_span(frames: LogFrames) -> tuple[datetime | None, datetime | None]:
    times = frames["scheduler_stats"]["timestamp"].drop_nulls()
    if times.is_empty():
        return None, None
    low, high = times.min(), times.max()
    assert isinstance(low, datetime) and isinstance(high, datetime)
    return low, high


def _end(server: _Server, default: datetime) -> float:
    return (server.last or default).timestamp()


# Pieces of one file written by different servers (see _split_file): id(piece) -> its pid,
# for one grouping call (the pieces are alive, so their ids are unique meanwhile).
Pieces = dict[int, int]


def _family(frames: LogFrames, pieces: Pieces) -> str:
    """One file and its rotations (vllm.log, vllm.log.1, vllm.log.2.gz) share a family;
    the pieces of a file that two servers wrote to do not."""
    family = str(Path(frames.source).parent / stem(frames.source))
    pid = pieces.get(id(frames))
    return family if pid is None else f"{family}#pid{pid}"


def _split_file(frames: LogFrames, pieces_of: Pieces) -> list[LogFrames]:
    """One file that several servers wrote to at the same time, split by server.

    Stats lines of two processes (pids) running at the same time are two servers (one server
    logs its stats from one API server, whatever its engine count). Every other row goes with
    the server of the stats line before it (the startup lines before the first stats with the
    first server that follows). A file whose stats come from one pid at a time is returned whole.
    """
    stats = frames["scheduler_stats"].filter(
        pl.col("pid").is_not_null() & pl.col("timestamp").is_not_null()
    )
    if stats.is_empty():
        return [frames]
    spans = (
        stats.group_by("pid")
        .agg(first=pl.col("timestamp").min(), last=pl.col("timestamp").max(), n=pl.len())
        .filter(pl.col("n") >= 2)
        .sort("first")
        .rows()
    )
    concurrent = {
        a[0]
        for a in spans
        for b in spans
        if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]  # both running at once
    }
    if len(concurrent) < 2:
        return [frames]
    anchors = (
        stats.filter(pl.col("pid").is_in(list(concurrent)))
        .select(pl.col("line"), pl.col("pid").alias("owner"))
        .unique("line")
        .sort("line")
    )
    # Engine processes (EngineCore, workers) have pids of their own. Those that start before
    # any stats line pair with the servers in order of appearance when their numbers match
    # (server A's engine starts first, so A's stats come first); otherwise their rows go with
    # the stats line before or after them, as all other rows do.
    first_line = int(anchors["line"].min())  # type: ignore[arg-type]
    order = anchors.group_by("owner").agg(pl.col("line").min()).sort("line")["owner"].to_list()
    by_first: dict[int, int] = {}
    for kind_frame in frames.frames.values():
        if "pid" in kind_frame.columns and "line" in kind_frame.columns:
            rows = kind_frame.filter(
                pl.col("pid").is_not_null()
                & ~pl.col("pid").is_in(list(concurrent))
                & (pl.col("line") < first_line)
            )
            for pid, line in rows.group_by("pid").agg(pl.col("line").min()).iter_rows():
                by_first[int(pid)] = min(int(line), by_first.get(int(pid), int(line)))
    startups = sorted(by_first, key=lambda pid: by_first[pid])
    paired = dict(zip(startups, order, strict=True)) if len(startups) == len(order) else {}
    pieces: dict[int, dict[str, pl.DataFrame]] = {pid: {} for pid in order}
    derived = {"_arrivals": frames.arrivals, "_joined": frames.joined}
    every = {**frames.frames, **{k: v for k, v in derived.items() if v is not None}}
    for kind, frame in every.items():
        if frame.is_empty() or "line" not in frame.columns:
            for pid in pieces:
                pieces[pid][kind] = frame.clear()
            continue
        own = frame.with_columns(
            own=pl.when(pl.col("pid").is_in(list(concurrent)))
            .then(pl.col("pid"))
            .otherwise(pl.col("pid").replace_strict(paired, default=None, return_dtype=pl.Int64))
            if "pid" in frame.columns
            else pl.lit(None, dtype=pl.Int64)
        ).with_row_index("_order")
        located = (
            own.sort("line")
            .join_asof(anchors, on="line", strategy="backward")
            .join_asof(anchors.rename({"owner": "after"}), on="line", strategy="forward")
            .with_columns(owner=pl.coalesce("own", "owner", "after"))
            .sort("_order")
        )
        for pid in pieces:
            pieces[pid][kind] = located.filter(pl.col("owner") == pid).select(frame.columns)
    out = []
    for number, (pid, parts) in enumerate(pieces.items()):
        arrivals, joined = parts.pop("_arrivals", None), parts.pop("_joined", None)
        piece = LogFrames(
            source=frames.source,
            deployment=frames.deployment,
            frames=parts,
            # The file's line totals stay with its first piece, so they are counted once.
            accounting=frames.accounting if number == 0 else type(frames.accounting)(),
            vllm_version=frames.vllm_version,
            log_era=frames.log_era,
            timezone=frames.timezone,
            year_source=frames.year_source,
            summarized=dict(frames.summarized) if number == 0 else {},
            arrivals=arrivals,
            joined=joined,
        )
        pieces_of[id(piece)] = pid
        out.append(piece)
    return out


def _kv_sizes(frames: LogFrames) -> set[float]:
    """The KV sizes an engine start printed: GPU blocks and KV tokens (either tells)."""
    kv = frames["kv_capacity"].filter(
        pl.col("kind").is_in(["gpu_blocks", "kv_cache_tokens"]) & pl.col("value").is_not_null()
    )
    return {float(v) for v in kv["value"].to_list()}


def _kv_conflict(a: set[float], b: set[float]) -> bool:
    if not a or not b:
        return False
    return not any(abs(x - y) <= KV_SIZE_TOLERANCE * max(x, y) for x in a for y in b)


def group_servers(logs: Sequence[LogFrames], pieces: Pieces | None = None) -> list[list[LogFrames]]:
    """The log files of one name, grouped by the server that wrote them.

    Two files are one server's when they are rotations of one file (vllm.log, vllm.log.1),
    or when their stats never overlap in time (restarts) and their engines' KV sizes agree;
    files whose stats run at the same time are different servers. Files without
    stats (a startup alone) join the server of their family, else of the same KV size, else
    the only server.
    """
    pieces = {} if pieces is None else pieces
    logs = [piece for lf in logs for piece in _split_file(lf, pieces)]
    servers: list[_Server] = []
    timed = sorted(
        (lf for lf in logs if _stats_span(lf)[0] is not None),
        key=lambda lf: _stats_span(lf)[0],  # type: ignore[arg-type,return-value]
    )
    for lf in timed:
        first, last = _stats_span(lf)
        assert first is not None and last is not None
        family, kv = _family(lf, pieces), _kv_sizes(lf)
        fits = [
            server
            for server in servers
            # Rotations of one file are one server's history, whatever their times say;
            # other files join a server only after it (no overlap) with the same KV size.
            if family in server.families
            or (server.last is not None and server.last < first and not _kv_conflict(server.kv, kv))
        ]
        fits.sort(key=lambda srv: (family not in srv.families, -_end(srv, first)))
        if fits:
            server = fits[0]
            server.logs.append(lf)
            server.families.add(family)
            server.kv |= kv
            server.last = max(server.last or last, last)
        else:
            servers.append(_Server([lf], {family}, kv, first, last))
    for lf in logs:
        if _stats_span(lf)[0] is not None:
            continue
        family, kv = _family(lf, pieces), _kv_sizes(lf)
        home = next((srv for srv in servers if family in srv.families), None)
        home = home or next((srv for srv in servers if kv and not _kv_conflict(srv.kv, kv)), None)
        if home is None and len(servers) == 1:
            home = servers[0]
        if home is None:
            servers.append(_Server([lf], {family}, kv, None, None))
        else:
            home.logs.append(lf)
            home.kv |= kv
    return [sorted(srv.logs, key=lambda lf: lf.source) for srv in servers]


def _split_servers(by_name: dict[str, DeploymentInputs]) -> None:
    """Replace each name that holds several servers by one deployment per server (its group).

    /metrics and client results given for the name stay with it when one server is found;
    with several they cannot be told apart, so they form the group's own member, NAME.
    """
    for name, target in list(by_name.items()):
        pieces: Pieces = {}
        servers = group_servers(target.logs, pieces)
        if len(servers) < 2:
            continue
        labels = _server_labels(servers, pieces)
        order = list(by_name)
        members: dict[str, DeploymentInputs] = {}
        listed: set[str] = set()
        for label, logs in zip(labels, servers, strict=True):
            member = f"{name}/{label}"
            # A file split between servers is listed once, with the first server that has it.
            paths = {lf.source for lf in logs} - listed
            listed |= paths
            members[member] = DeploymentInputs(
                member,
                logs=logs,
                sources=[
                    dataclasses.replace(src, deployment=member)
                    for src in target.sources
                    if src.kind == "log" and src.path in paths
                ],
                group=name,
            )
        rest = [src for src in target.sources if src.kind != "log"]
        if rest:
            members[name] = DeploymentInputs(name, sources=rest, runs=target.runs, group=name)
        at = order.index(name)
        rebuilt = {k: by_name[k] for k in order[:at]} | members
        rebuilt |= {k: by_name[k] for k in order[at + 1 :]}
        by_name.clear()
        by_name.update(rebuilt)


def _server_labels(servers: Sequence[Sequence[LogFrames]], pieces: Pieces) -> list[str]:
    """A readable, unique label per server: its file's stem, else server-1, server-2, ..."""

    def label(frames: LogFrames) -> str:
        pid = pieces.get(id(frames))
        return stem(frames.source) + (f"-pid{pid}" if pid is not None else "")

    stems = ["+".join(dict.fromkeys(label(lf) for lf in logs)) for logs in servers]
    if len(set(stems)) == len(stems) and all(_NAME.match(s) for s in stems):
        return stems
    return [f"server-{i}" for i in range(1, len(servers) + 1)]


def _read_metrics(spec: str, name: str, opts: LoadOptions) -> pl.DataFrame:
    if spec.startswith(("http://", "https://")):
        return metrics.scrape_once(spec, timeout=opts.scrape_timeout_s, deployment=name)
    return metrics.read_metrics_path(spec, deployment=name)


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
