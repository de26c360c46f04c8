"""Short lines of noise (`a_b`, tqdm's `a\rb`) settled in bulk, before the cascade.

A line this short cannot make the next one a record's tail (that takes _glue.WRAP_MIN
characters), so a short text the cascade claims as noise after two short lines is noise
wherever it stands after two short lines. Which texts those are is asked of the cascade
itself (`noise_texts`: ingest/_route.py `_noise_texts`), once per distinct text of a sample;
this module holds no rule of what noise is. A line whose text the sample missed takes the
cascade like any other, so the sample decides the cost, never the reading.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import cast

import polars as pl
from preemptscope.ingest import _glue, _lines

SHORT_NOISE_BYTES = 16  # a short line's bytes, newline included, at most
assert SHORT_NOISE_BYTES < _glue.WRAP_MIN
SHORT_NOISE_MIN = 4096  # lines settled in bulk in a batch before the bulk path pays for itself
SHORT_NOISE_SHARE = 4  # and at least a quarter of the sampled lines noise texts
_SAMPLE = 1 << 16  # lines sampled, about
_DISTINCT_MAX = 1024  # distinct short texts routed on their own, at most


def _short_noise(
    raw: pl.Series,
    lines: pl.Series,
    max_line: int,
    cut: Mapping[int, int],
    noise_texts: Callable[[pl.Series], pl.Series],
) -> tuple[pl.Series, pl.DataFrame] | None:
    """(mask, unrecognised rows) of the lines of `raw` settled as noise in bulk, or None:
    short, a text the cascade claims as noise (`noise_texts`), not cut, after two short lines
    of the batch (the line before the batch is not looked at: its first two lines take the
    cascade). The rows are the cascade's: line, the physical text without its line end, and
    the reason."""
    limit = min(SHORT_NOISE_BYTES, max_line)
    first_line = cast(int, lines[0])
    sample = raw.gather_every(max(1, raw.len() // _SAMPLE))
    short = sample.filter(sample.str.len_bytes() <= limit)
    distinct = short.unique()
    if distinct.len() == 0 or distinct.len() > _DISTINCT_MAX:
        return None
    noise = noise_texts(distinct)
    if noise.len() == 0 or short.is_in(noise.implode()).sum() * SHORT_NOISE_SHARE < sample.len():
        return None
    # Which noise text each line is: one comparison a line where the file repeats one text
    # (`a\rb` over and over), else one hash lookup a line (null: none).
    one = noise.len() == 1
    codes = None if one else raw.cast(pl.Enum(noise), strict=False).to_physical()
    member = raw == noise[0] if codes is None else codes.is_not_null()
    lengths = raw.str.len_bytes() <= limit
    mask = member & lengths.shift(1, fill_value=False) & lengths.shift(2, fill_value=False)
    if cut:
        index = [line - first_line for line in cut if 0 <= line - first_line < raw.len()]
        if index:
            mask = mask.scatter(index, False)
    count = int(mask.sum())
    if count < SHORT_NOISE_MIN:
        return None
    texts = noise.str.strip_chars_end("\r\n")
    rows = pl.DataFrame(
        {
            "line": lines.filter(mask),
            "text": pl.repeat(texts[0], count, eager=True)
            if codes is None
            else texts.gather(codes.filter(mask)),
        }
    ).with_columns(pl.lit(_lines.NO_FORMAT, dtype=pl.String).alias("reason"))
    return mask, rows
