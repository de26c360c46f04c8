"""Timestamps: vLLM's year-less local times, container timestamps, JSON asctime → UTC.

Priority for the year: times the data carries — a container (wrapper) timestamp of the line,
else of any line of the first batch, then a JSON/foreign asctime (which carries its own year)
— > --year / --start > a date in the file name > the file's mtime > now. The year is fixed for
the first timestamped record (counting back over the Dec → Jan rollovers before a carried
time); a month going back by six or more starts the next year.

Owns the year, the zone and the timestamp column of every row; never reads a line's text
(the envelope's time columns come in) and never opens a file (its name and mtime are given).
"""

from __future__ import annotations

import re
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


# A date in a log's file name (`vllm-2025-07-10.log`, `server_20250710_1230.log`); vLLM was
# first released in 2023, so earlier years (or other digit runs) are not dates of its logs.
_NAME_DATE = re.compile(r"(?<![0-9])(20[2-9][0-9])[-_.]?([01][0-9])[-_.]?([0-3][0-9])(?![0-9])")


def time_from_name(name: str) -> datetime | None:
    """The date written in a file name (its last path part), or None."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    for match in _NAME_DATE.finditer(base):
        try:
            return datetime(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            continue
    return None


def _closest_year(mon: int, day: int, when: datetime, tz: str) -> int:
    local = when.astimezone(ZoneInfo(tz)) if when.tzinfo else when
    return min(
        (local.year - 1, local.year, local.year + 1),
        key=lambda y: abs((_safe(y, mon, day) - local.replace(tzinfo=None)).total_seconds()),
    )


def _anchor_year(
    mon: int,
    day: int,
    hms: str,
    options_year: int | None,
    start: datetime | None,
    reference: datetime | None,
    tz: str,
    name_time: datetime | None = None,
) -> tuple[int, str]:
    if options_year is not None:
        return options_year, "option"
    if start is not None:
        # The year that puts the first record closest to --start.
        return _closest_year(mon, day, start, tz), "option"
    if name_time is not None:
        # A file named by date is named when it starts (or is rotated): closest, as --start.
        return _closest_year(mon, day, name_time, tz), "name"
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


def _year_near(year: int, month: int, vllm_month: int) -> int:
    """The year of a vLLM month next to a time that carries (year, month): Dec/Jan aware."""
    if vllm_month - month >= 6:
        return year - 1
    if month - vllm_month >= 6:
        return year + 1
    return year


def carried_base_year(rows: pl.DataFrame, carried: tuple[int, str, str] | None) -> int | None:
    """The year of the first timestamped row implied by a time the data carries elsewhere.

    `rows` are the rows with a vLLM month (line, _mon), sorted by line; `carried` is (line,
    ISO time with year, source) of the first row with a wrapper or JSON time. The year is
    carried to the nearest vLLM row, then back over the rollovers between it and the first.
    """
    if carried is None or rows.height == 0:
        return None
    line, text, _source = carried
    try:
        year, month = int(text[:4]), int(text[5:7])
    except ValueError:
        return None
    months = rows["_mon"].cast(pl.Int32, strict=False).fill_null(strategy="forward")
    months = months.fill_null(strategy="backward")
    if months.null_count():
        return None
    lines = rows["line"]
    # The nearest vLLM row at or before the carried line, else the first one after it.
    at = max(int(lines.search_sorted(line, side="right")) - 1, 0)
    near_year = _year_near(year, month, int(months[at]))
    drops = ((months.shift(1) - months) >= 6).fill_null(False).cast(pl.Int32)
    return near_year - int(drops.head(at + 1).sum())


def anchor_first(
    rows: pl.DataFrame,
    state: YearState,
    *,
    carried: tuple[int, str, str] | None = None,
    **anchor: object,
) -> None:
    """Anchor the year on the first timestamped row (any kind) if nothing has yet.

    `carried` (line, ISO time, "wrapper" | "json") is the first time with a year that the
    batch's data holds: it wins over --year, --start, the file name and the mtime.
    """
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
    from_data = carried_base_year(rows, carried)
    if from_data is not None and carried is not None:
        state.base_year, state.source = from_data, carried[2]
        return
    day = int(first["_day"]) if str(first["_day"]).isdigit() else 1
    name_time = anchor.get("name_time")
    state.base_year, state.source = _anchor_year(
        mon,
        day,
        first["_hms"] or "00:00:00",
        anchor["year"],  # type: ignore[arg-type]
        anchor["start"],  # type: ignore[arg-type]
        anchor["reference"],  # type: ignore[arg-type]
        str(anchor["tz"]),
        name_time if isinstance(name_time, datetime) else None,
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


def constant_bulk_year(
    bulk: list[pl.Series], marks: pl.DataFrame, before: tuple[int, int | None]
) -> int | None:
    """The year `bulk_years` gives every bulk row, when it is one year for all (else None),
    found without joining each row to the record before it.

    `bulk` holds the bulk rows' `_mon` texts (rows without a container time), `marks` and
    `before` are `bulk_years`'s. Every row then takes the year of a record before it (or
    `before`'s): when all of those are one year and no row's month is six or more below any
    of their months, no row steps into the next year.
    """
    year0, month0 = before
    if marks["_year"].drop_nulls().ne(year0).any():
        return None
    high = max(int(marks["_m"].max() or 0), month0 or 0)  # type: ignore[arg-type]
    for mon in bulk:
        months = mon.cast(pl.Int32, strict=False)
        low = months.min()
        if months.null_count() or not isinstance(low, int) or high - low >= 6:
            return None
    return year0


def _wrapper_utc(wts: pl.Expr) -> pl.Expr:
    """RFC3339 container timestamps (any fraction length, Z or an offset) as UTC."""
    return (
        wts.str.replace(r"(\.\d{6})\d+", "$1")
        .str.replace(r"Z$", "+00:00")
        .str.replace(",", ".", literal=True)
        .str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%:z", strict=False, time_unit="us")
        .dt.convert_time_zone("UTC")
    )


def stamp(
    frame: pl.DataFrame, years: pl.DataFrame | None, tz: str, batch_year: int | None
) -> pl.DataFrame:
    """Replace the helper columns (_mon, _day, _hms, _wts, _ats) by a UTC `timestamp`.

    `years` (line, _year) holds the year of the frame's timestamped lines, or is None when
    every one of them is `batch_year`; `batch_year` is the one year of the whole batch's
    timestamped lines, None when they have several (or none).
    Local times repeat (many lines per second): each distinct one is parsed once. Container
    timestamps are all distinct: the usual `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` form is cut and
    parsed directly, only other forms go through the general RFC3339 path.
    """

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
    # No container time on any row (the usual log): no wrapper column to parse.
    no_wts = frame["_wts"].null_count() == frame.height
    if (
        frame.height > SMALL_FRAME
        and batch_year is not None
        and frame["_ats"].null_count() == frame.height
    ):
        # The usual batch: one year, no JSON times. Rows in line order repeat their local time
        # (many lines a second): each run of one (month, day, time) is parsed once and spread
        # back over its rows by the run's number, with no join and no string per row. Rows
        # without a time of their own (`_mon` null) get none.
        year = batch_year
        text = pl.concat_str(
            [pl.lit(f"{year:04d}-"), pl.col("_mon"), pl.lit("-"), pl.col("_day"), pl.lit(" "),
             pl.col("_hms")]
        )  # fmt: skip
        runs = frame.select(pl.struct("_mon", "_day", "_hms").rle_id()).to_series()
        # A run starts where its number changes (the numbers only grow); its text needs the
        # three time columns only.
        starts = runs.ne_missing(runs.shift(1))
        times = frame.select("_mon", "_day", "_hms").filter(starts)
        heads = times.select(local_utc(text)).to_series()
        frame = frame.with_columns(heads.gather(runs).alias("_local_utc"))
        if no_wts:
            timestamp = pl.col("_local_utc").cast(TIMESTAMP)
            keep = [c for c in frame.columns if not c.startswith("_")]
            return frame.select(*keep, timestamp.alias("timestamp"))
        frame = frame.with_row_index("_row").with_columns(zulu.alias("_wrapper"))
    else:
        if years is None:
            assert batch_year is not None
            frame = frame.with_columns(pl.lit(batch_year, dtype=pl.Int32).alias("_year"))
        else:
            wanted = years.select("line", "_year")
            if frame.height * 8 < wanted.height:
                # A small kind beside the bulk of a batch (its few stats lines among 60,000
                # request lines): a join would hash every year of the batch.
                wanted = wanted.filter(pl.col("line").is_in(frame["line"].implode()))
            frame = frame.join(wanted, on="line", how="left", maintain_order="left")
        frame = frame.with_row_index("_row")
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
        if frame.height <= SMALL_FRAME:
            # A live batch: parse every row in one query (the same values, fewer queries).
            frame = frame.with_columns(
                local.alias("_local"), local_utc(local), zulu.alias("_wrapper")
            )
        else:
            frame = frame.with_columns(local.alias("_local"))
            distinct = frame.select(pl.col("_local").unique()).with_columns(
                local_utc(pl.col("_local"))
            )
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
