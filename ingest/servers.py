"""Several servers under one name: told apart by their log's process families, KV sizes and
times, never summed.

Owns `group_servers` and the split of one deployment's inputs into its servers (each its own
DeploymentInputs, `group` set to the name). It reads no file; `ingest/inputs.py` calls it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl
from preemptscope.ingest.gathered import DeploymentInputs
from preemptscope.ingest.names import NAME_FORM, stem
from preemptscope.ingest.schema import LogFrames

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


def split_servers(by_name: dict[str, DeploymentInputs]) -> None:
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
    if len(set(stems)) == len(stems) and all(NAME_FORM.match(s) for s in stems):
        return stems
    return [f"server-{i}" for i in range(1, len(servers) + 1)]
