"""A request's lines as events, and its ids folded across their spellings.

Owns the rules of lifecycle.py's module doc about ids: an abort's list stands for each id, a
suffixed `Added` id folds onto the `Received` id it extends, and `_id` is a number that names
a key (hashes checked, never trusted alone). Never groups lines into requests (that is
`lifecycle_sessions.py`) and keeps no state between batches.
"""

from __future__ import annotations

import polars as pl

_EVENT_COLUMNS = ["source", "line", "pid", "deployment", "timestamp", "event", "request_id"]


def _events(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per (event, id): `Aborted request(s) a,b.` stands for each id."""
    # Series operations and masks throughout the join's hot path: on a batch's rows an eager
    # expression costs about ten times the Series operation.
    rows = requests[_EVENT_COLUMNS]
    # Only an abort lists ids (`Aborted request(s) %s.`, comma-joined); another line's id is
    # one id, commas and all (a client's `X-Request-Id`).
    listed = rows["request_id"].str.contains(",", literal=True) & (rows["event"] == "aborted")
    if listed.any():
        # Only the rows that list ids are split (exploding every row copies every row).
        lists = (
            rows.filter(listed)
            .with_columns(pl.col("request_id").str.split(","))
            .explode("request_id")
        )
        rows = pl.concat([rows.filter(~listed), lists])
    # One filter, after the ids are cleaned (a row without a time or an id has none either).
    # A trailing dot is the id's own: the rows leave the sentence's out (`Added request %s.`).
    rid = rows["request_id"].str.strip_chars()
    keep = rows["timestamp"].is_not_null() & rid.is_not_null() & (rid != "")
    return rows.with_columns(rid).filter(keep)


def _fold_ids(
    events: pl.DataFrame,
    received: bool | None = None,
    known_before: pl.DataFrame | None = None,
    hashes: pl.Series | None = None,
) -> pl.DataFrame:
    """Add `key`: the id as the frontend logged it (see module doc).

    `received`: whether the stream has `Received` lines at all (default: whether `events` has);
    `known_before`: ids of earlier batches that count as known, with their `_h` hashes
    (RequestJoin's recent ids); `hashes`: the ids' hashes, when no two ids of `events` share
    one (RequestJoin checks): ids are then matched by them, and `_id` (see `_identified`) is
    added when every key is one of the ids.
    """
    has_received = bool((events["event"] == "received").any()) if received is None else received
    ids = events["request_id"]
    is_reference = _is_reference(events, has_received)
    reference = ids.filter(is_reference).implode()
    # Reference ids are known by definition: only the others are looked up, first among
    # this batch's own (a small set: most lines name a request received in the same batch).
    others = (~is_reference).arg_true()
    if hashes is None:
        unknown = others.filter(~ids.gather(others).is_in(reference))
    else:
        own = hashes.filter(is_reference).implode()
        unknown = others.filter(~hashes.gather(others).is_in(own))
    if unknown.len() == 0:
        if hashes is not None:
            return events.with_columns(ids.alias("key"), hashes.alias("_id"))
        return events.with_columns(ids.alias("key"))
    before = known_before if known_before is not None and known_before.height else None
    # An id known as it is keeps its spelling: among these, only an earlier batch's can be.
    spelt = ids.gather(unknown)
    # The shortened spellings (the regex is what costs: only for the ids not known as they
    # are); the twice-shortened one only for the ids the first one does not fold.
    one = spelt.str.replace(r"-[^-]+$", "")
    n = spelt.len()
    earlier = _known_before(pl.concat([spelt, one]), before)  # one lookup for both
    exact = earlier.head(n)
    by_one = ~exact & (one.is_in(reference) | earlier.tail(n))
    folded = one.zip_with(by_one, spelt)
    # Whether a key may be none of the ids (an earlier batch's spelling).
    outside = bool(earlier.tail(n).any())
    rest = (~exact & ~by_one).arg_true()
    if rest.len():
        two = one.gather(rest).str.replace(r"-[^-]+$", "")
        before_two = _known_before(two, before)
        outside = outside or bool(before_two.any())
        by_two = two.is_in(reference) | before_two
        folded = folded.scatter(rest.filter(by_two), two.filter(by_two))
    keys = ids.scatter(unknown, folded).alias("key")
    if hashes is None or outside:
        return events.with_columns(keys)
    return events.with_columns(keys, hashes.scatter(unknown, folded.hash()).alias("_id"))


def _known_before(spellings: pl.Series, known: pl.DataFrame | None) -> pl.Series:
    """Whether each spelling is one of the `known` ids (a frame of request_id and its `_h`).

    The lookup is by hash (a set of integers, cheaper to build at every batch than a set of
    the strings); a hash that matches is checked against the strings it stands for,
    so ids that share a hash are never taken for one another.
    """
    if known is None:
        return pl.repeat(False, spellings.len(), eager=True)
    hashes = spellings.hash()
    maybe = hashes.is_in(known["_h"].implode())
    if not maybe.any():
        return maybe
    where = maybe.arg_true()
    candidates = known["request_id"].filter(known["_h"].is_in(hashes.gather(where).implode()))
    sure = spellings.gather(where).is_in(candidates.implode())
    return maybe.scatter(where, sure)


def _is_reference(events: pl.DataFrame, received: bool) -> pl.Series:
    """The lines whose id is the frontend's: `Received` lines, or when a stream has none, every
    line but `Added` (whose id may carry the engine's suffixes)."""
    event = events["event"]
    return event == "received" if received else event != "added"


def _identified(events: pl.DataFrame) -> pl.DataFrame:
    """Keyed events with `_id`, a number that names their key: grouping by it costs half what
    grouping by the string does. It is the key's hash when no two keys of `events` share one
    (checked: a collision can never merge two requests), else the key's rank."""
    keys = events["key"]
    hashes = keys.hash()
    if hashes.n_unique() != keys.n_unique():
        hashes = keys.rank("dense").cast(pl.UInt64)
    return events.with_columns(hashes.alias("_id"))
