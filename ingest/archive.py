"""Read back the Parquet archive `parse --out` writes (ingest/parquet.py), lazily.

Layout: ROOT/<kind>/deployment=<name>/date=<YYYY-MM-DD>/<part>.parquet. The deployment and date
filters prune partition folders (files elsewhere are never opened); the exact time filter is a
lazy scan's predicate, pushed to the row groups (their statistics). Rows without a timestamp
(date=__HIVE_DEFAULT_PARTITION__) belong to no date and are always kept.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote

import polars as pl
from preemptscope.ingest.parquet import NULL_PARTITION
from preemptscope.ingest.schema import FRAME_SCHEMAS, LogFrames

from preemptscope.errors import InputError

__all__ = ["archive_deployments", "is_archive", "read_archive"]


def _kind_dirs(root: Path) -> list[Path]:
    return [root / kind for kind in FRAME_SCHEMAS if (root / kind).is_dir()]


def is_archive(path: str | Path) -> bool:
    """A directory holding `<kind>/deployment=...` folders, as `parse --out` writes them."""
    root = Path(path)
    if not root.is_dir():
        return False
    return any(
        child.is_dir() and child.name.startswith("deployment=")
        for kind in _kind_dirs(root)
        for child in kind.iterdir()
    )


def _deployment_dirs(kind: Path) -> dict[str, Path]:
    return {
        unquote(child.name.removeprefix("deployment=")): child
        for child in kind.iterdir()
        if child.is_dir() and child.name.startswith("deployment=")
    }


def archive_deployments(path: str | Path) -> list[str]:
    """The deployments an archive holds, in name order (from the folder names alone)."""
    return sorted({name for kind in _kind_dirs(Path(path)) for name in _deployment_dirs(kind)})


def _files(folder: Path, start: datetime | None, end: datetime | None) -> list[Path]:
    """The Parquet files of one deployment's date folders that can hold [start, end)."""
    first = start.astimezone(UTC).date().isoformat() if start is not None else None
    last = end.astimezone(UTC).date().isoformat() if end is not None else None
    files: list[Path] = []
    for day_dir in sorted(folder.iterdir()):
        day = day_dir.name.removeprefix("date=")
        if day != NULL_PARTITION and (
            (first is not None and day < first) or (last is not None and day > last)
        ):
            continue  # pruned: never opened
        files += sorted(day_dir.glob("*.parquet"))
    return files


def read_archive(
    path: str | Path,
    *,
    deployments: Collection[str] | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, LogFrames]:
    """Frames per deployment, for the deployments asked (all by default) and [start, end).

    Raises InputError when a deployment asked for is not in the archive or a file is unreadable.
    """
    root = Path(path)
    if not is_archive(root):
        raise InputError(str(root), "not a Parquet archive written by parse --out")
    known = archive_deployments(root)
    wanted = sorted(deployments) if deployments is not None else known
    missing = [name for name in wanted if name not in known]
    if missing:
        raise InputError(
            str(root), f"no deployment {', '.join(missing)} in the archive ({', '.join(known)})"
        )
    result = {name: LogFrames(source=str(root), deployment=name) for name in wanted}
    for folder in _kind_dirs(root):
        kind = folder.name
        schema = FRAME_SCHEMAS[kind]
        for name, directory in _deployment_dirs(folder).items():
            if name not in result:
                continue  # pruned: another deployment's files are never opened
            files = _files(directory, start, end)
            if not files:
                continue
            lazy = pl.scan_parquet(files)
            if "timestamp" in schema and (start is not None or end is not None):
                inside = pl.col("timestamp").is_null()  # undated rows belong to no range
                span = pl.lit(True)
                if start is not None:
                    span &= pl.col("timestamp") >= start
                if end is not None:
                    span &= pl.col("timestamp") < end
                lazy = lazy.filter(inside | span)
            try:
                frame = lazy.collect()
            except (pl.exceptions.PolarsError, OSError) as exc:
                raise InputError(str(directory), f"cannot read the archive: {exc}") from None
            frame = frame.with_columns(deployment=pl.lit(name, dtype=pl.String))
            rows = frame.select(list(schema)).cast(dict(schema))  # type: ignore[arg-type]
            if "line" in schema:
                rows = rows.sort(["source", "line"], maintain_order=True)
            result[name].frames[kind] = rows
    for frames in result.values():
        versions = frames["config"].filter(pl.col("key") == "vllm_version")["value"]
        frames.vllm_version = versions[-1] if len(versions) else None
        eras = frames["scheduler_stats"]["era"].drop_nulls().unique().to_list()
        frames.log_era = eras[0] if len(eras) == 1 else "mixed" if eras else None
    return result
