"""Timestamps: vLLM's year-less local times, container timestamps, JSON asctime → UTC.

Priority for the year: the container (wrapper) timestamp of the line > a JSON/foreign asctime
(which carries its own year) > --year / --start > the file's mtime > now. The first timestamped
record anchors the year; a month going back by six or more (Dec → Jan) starts the next year.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import polars as pl
from preemptscope.ingest.schema import TIMESTAMP


@dataclass
class YearState:
    """What spans batches: the anchored year, rollovers seen so far, the last month."""

    base_year: int | None = None
    rollovers: int = 0
    last_month: int | None = None
    last_year: int | None = None  # year of the last record (a wrapper's may differ from base)
    source: str | None = None


def _anchor_year(
    mon: int,
    day: int,
    hms: str,
    options_year: int | None,
    start: datetime | None,
    reference: datetime | None,
    tz: str,
) -> tuple[int, str]:
    if options_year is not None:
        return options_year, "option"
    if start is not None:
        local = start.astimezone(ZoneInfo(tz)) if start.tzinfo else start
        # The year that puts the first record closest to --start.
        best = min(
            (local.year - 1, local.year, local.year + 1),
            key=lambda y: abs((_safe(y, mon, day) - local.replace(tzinfo=None)).total_seconds()),
        )
        return best, "option"
    source = "mtime" if reference is not None else "now"
    ref = reference if reference is not None else datetime.now(UTC)
    local = ref.astimezone(ZoneInfo(tz)) if ref.tzinfo else ref
    year = local.year
    # The first record cannot be later than the file's last write.
    if (mon, day, hms) > (local.month, local.day, local.strftime("%H:%M:%S")):
        year -= 1
    return year, source


def _safe(year: int, mon: int, day: int) -> datetime:
    try:
        return datetime(year, mon, day)
    except ValueError:
        return datetime(year, mon, 28)


# Up to this many rows, per-row expressions cost less than deduplicating and joining back
# (a Polars query costs ~0.1 ms whatever its size; live batches are small).
SMALL_FRAME = 512

_EMPTY_YEARS = {"line": pl.Int64, "_year": pl.Int32, "_m": pl.Int32}


def line_years(
    marks: pl.DataFrame,
    state: YearState,
    *,
    tz: str,
    year: int | None,
    start: datetime | None,
    reference: datetime | None,
) -> pl.DataFrame:
    """The year of every timestamped line: columns line, _year (Int32).

    `marks` holds one row per line with a vLLM timestamp (line, _mon, _day, _hms, _wts),
    sorted by line.
    """
    if marks.height == 0:
        return pl.DataFrame(schema=_EMPTY_YEARS)
    months = marks["_mon"].cast(pl.Int32, strict=False)
    if state.base_year is None:
        first = marks.row(0, named=True)
        mon = int(months[0] or 1)
        if first["_wts"] is not None:
            y = int(first["_wts"][:4])
            if mon == 12 and first["_wts"][5:7] == "01":
                y -= 1
            state.base_year, state.source = y, "wrapper"
        else:
            state.base_year, state.source = _anchor_year(
                mon,
                int(first["_day"] or 1),
                first["_hms"] or "00:00:00",
                year,
                start,
                reference,
                tz,
            )
    previous = months.shift(1)
    if state.last_month is not None:
        previous = previous.fill_null(state.last_month)
    drops = ((previous - months) >= 6).fill_null(False).cast(pl.Int32)
    roll = drops.cum_sum() + state.rollovers
    state.rollovers = int(roll[-1])
    state.last_month = int(months[-1]) if months[-1] is not None else state.last_month
    wts = marks["_wts"]
    wts_year = wts.str.slice(0, 4).cast(pl.Int32, strict=False)
    wts_month = wts.str.slice(5, 2).cast(pl.Int32, strict=False)
    adjust = (
        pl.select(
            pl.when((months == 12) & (wts_month == 1))
            .then(-1)
            .when((months == 1) & (wts_month == 12))
            .then(1)
            .otherwise(0)
        )
        .to_series()
        .cast(pl.Int32)
    )
    years = (wts_year + adjust).fill_null(roll + state.base_year)
    state.last_year = int(years[-1]) if years[-1] is not None else state.last_year
    return pl.DataFrame(
        {"line": marks["line"], "_year": years.cast(pl.Int32), "_m": months.cast(pl.Int32)}
    )


def anchor_first(rows: pl.DataFrame, state: YearState, **anchor: object) -> None:
    """Anchor the year on the first timestamped row (any kind) if nothing has yet."""
    if state.base_year is not None or rows.height == 0:
        return
    first = rows.row(0, named=True)
    mon = int(first["_mon"]) if str(first["_mon"]).isdigit() else 1
    if first["_wts"] is not None:
        y = int(first["_wts"][:4])
        if mon == 12 and first["_wts"][5:7] == "01":
            y -= 1
        state.base_year, state.source = y, "wrapper"
        return
    day = int(first["_day"]) if str(first["_day"]).isdigit() else 1
    state.base_year, state.source = _anchor_year(
        mon,
        day,
        first["_hms"] or "00:00:00",
        anchor["year"],  # type: ignore[arg-type]
        anchor["start"],  # type: ignore[arg-type]
        anchor["reference"],  # type: ignore[arg-type]
        str(anchor["tz"]),
    )


def bulk_years(
    rows: pl.DataFrame, marks: pl.DataFrame, before: tuple[int, int | None]
) -> pl.DataFrame:
    """Years of bulk rows (line, _mon, _wts), from the last record before them.

    `marks` are this batch's records with their years; `before` is (year, month) of the last
    record of earlier batches. Between two records the year changes only if the month jumps
    back by six or more. Only earlier records count, so batches give the same years as one go.
    """
    if rows.height == 0:
        return pl.DataFrame(schema=_EMPTY_YEARS)
    month = rows["_mon"].cast(pl.Int32, strict=False)
    rows = rows.select("line", "_wts").with_columns(month.alias("_m"))
    year0, month0 = before
    if marks.height:
        rows = rows.join_asof(
            marks.sort("line").rename({"_year": "_yb", "_m": "_mb"}),
            on="line",
            strategy="backward",
        )
    else:
        rows = rows.with_columns(
            pl.lit(None, dtype=pl.Int32).alias("_yb"), pl.lit(None, dtype=pl.Int32).alias("_mb")
        )
    previous_year = pl.col("_yb").fill_null(year0)
    previous_month = pl.col("_mb").fill_null(month0 if month0 is not None else 0)
    year_expr = previous_year + ((previous_month - pl.col("_m")) >= 6).cast(pl.Int32)
    wts_year = pl.col("_wts").str.slice(0, 4).cast(pl.Int32, strict=False) + (
        pl.when((pl.col("_m") == 12) & (pl.col("_wts").str.slice(5, 2) == "01"))
        .then(-1)
        .when((pl.col("_m") == 1) & (pl.col("_wts").str.slice(5, 2) == "12"))
        .then(1)
        .otherwise(0)
    )
    return rows.select(
        pl.col("line"),
        pl.coalesce(wts_year, year_expr).cast(pl.Int32).alias("_year"),
        pl.col("_m").cast(pl.Int32),
    )


def _wrapper_utc(wts: pl.Expr) -> pl.Expr:
    """RFC3339 container timestamps (any fraction length, Z or an offset) as UTC."""
    return (
        wts.str.replace(r"(\.\d{6})\d+", "$1")
        .str.replace(r"Z$", "+00:00")
        .str.replace(",", ".", literal=True)
        .str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_unit="us")
        .dt.convert_time_zone("UTC")
    )


def stamp(frame: pl.DataFrame, years: pl.DataFrame, tz: str) -> pl.DataFrame:
    """Replace the helper columns (_mon, _day, _hms, _wts, _ats) by a UTC `timestamp`.

    Local times repeat (many lines per second): each distinct one is parsed once. Container
    timestamps are all distinct: the usual `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` form is cut and
    parsed directly, only other forms go through the general RFC3339 path.
    """
    frame = frame.join(years.select("line", "_year"), on="line", how="left").with_row_index("_row")
    local_text = pl.concat_str(
        [
            pl.col("_year").cast(pl.String).str.zfill(4),
            pl.lit("-"),
            pl.col("_mon"),
            pl.lit("-"),
            pl.col("_day"),
            pl.lit(" "),
            pl.col("_hms"),
        ]
    )
    absolute = pl.col("_ats").str.replace(",", ".", literal=True)
    local = pl.coalesce(absolute, local_text)

    def local_utc(text: pl.Expr) -> pl.Expr:
        return (
            text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
            .dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
            .dt.convert_time_zone("UTC")
            .alias("_local_utc")
        )

    wts = pl.col("_wts")
    zulu = (
        pl.when(wts.str.ends_with("Z") & (wts.str.len_bytes() >= 27))
        .then(wts.str.slice(0, 26))
        .str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_unit="us")
        .dt.replace_time_zone("UTC")
    )
    if frame.height <= SMALL_FRAME:
        # A live batch: parse every row in one query (the same values, fewer queries).
        frame = frame.with_columns(local.alias("_local"), local_utc(local), zulu.alias("_wrapper"))
    else:
        frame = frame.with_columns(local.alias("_local"))
        distinct = frame.select(pl.col("_local").unique()).with_columns(local_utc(pl.col("_local")))
        frame = frame.join(
            distinct, on="_local", how="left", nulls_equal=True, maintain_order="left"
        )
        frame = frame.with_columns(zulu.alias("_wrapper"))
    general_rows = frame["_wrapper"].is_null() & frame["_wts"].is_not_null()
    if general_rows.any():
        other = frame.filter(general_rows)
        general = other.select(pl.col("_row"), _wrapper_utc(wts).alias("_general"))
        frame = frame.join(general, on="_row", how="left", maintain_order="left").with_columns(
            pl.coalesce("_wrapper", "_general").alias("_wrapper")
        )
    timestamp = pl.coalesce(pl.col("_wrapper"), pl.col("_local_utc")).cast(TIMESTAMP)
    keep = [c for c in frame.columns if not c.startswith("_")]
    return frame.select(*keep, timestamp.alias("timestamp"))
