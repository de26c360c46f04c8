"""Write frames as Parquet, hive-partitioned by deployment and UTC date, for DuckDB or Spark.

Layout: OUT/<kind>/deployment=<name>/date=<YYYY-MM-DD>/<part>.parquet. Rows without a
timestamp (e.g. uvicorn access lines, which carry none) go to date=__HIVE_DEFAULT_PARTITION__,
which DuckDB and Spark read as NULL. The partition columns are not repeated inside the files.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import polars as pl
from preemptscope.ingest.schema import LogFrames

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def write_frames(frames: LogFrames, out_dir: str | Path, part: str) -> list[Path]:
    """Write every non-empty frame of `frames`; `part` names the files (unique per chunk)."""
    root = Path(out_dir)
    written: list[Path] = []
    for kind, frame in frames.frames.items():
        if frame.height == 0:
            continue
        if "timestamp" in frame.columns:
            date = pl.col("timestamp").dt.date().cast(pl.String).fill_null(NULL_PARTITION)
        else:
            date = pl.lit(NULL_PARTITION)
        keyed = frame.with_columns(date.alias("_date"))
        for (deployment, day), group in keyed.group_by(
            ["deployment", "_date"], maintain_order=True
        ):
            folder = root / kind / f"deployment={quote(str(deployment), safe='')}" / f"date={day}"
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{part}.parquet"
            group.drop("deployment", "_date").write_parquet(target, statistics=True)
            written.append(target)
    return written
