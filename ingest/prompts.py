"""The prompt token ids a request line shows, as chained hashes of its leading 16-token blocks.

vLLM logs the ids in `Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, ...`
(V0 engine and the OpenAI request logger up to v0.11.0) and, from v0.11.1, in the DEBUG
`Request %s details: prompt: %r, prompt_token_ids: %s, ...` line (vllm-log-formats.md §6.1).
The simulator's shared-prefix replay reads them (`prompt_block_hashes` of ARRIVALS and JOINED).

The prompt is user text: the ids read are the field after the prompt's repr, found by one
anchored pattern (the Rust engine: linear) that steps over the prompt and every quoted string
after it whole, so no `prompt_token_ids: [` inside a string is ever the field. A prompt that
is not a repr (no quote: the f-string eras) gives no ids.

Hash i covers tokens [0, 16 * (i + 1)): block k's text (its ids as vLLM prints them, each
followed by `, `) hashed by Polars, chained h_i = h_(i-1) * P + b_i (modulo 2^64) and mixed
(`chained_hashes`), so equal hash i means equal first 16 * (i + 1) tokens (64 bits: a
collision is a 2^-64 chance). The same for every run of one Polars version (Polars keeps its
hash stable within a version only). At most MAX_BLOCKS blocks; only blocks wholly visible (a
list cut by --max-log-len `...]`, or by the end of the line, keeps its complete ids: a number
the line ends in may be cut too).
"""

from __future__ import annotations

import re

import numpy as np
import numpy.typing as npt
import polars as pl

__all__ = [
    "BLOCK_TOKENS",
    "DETAILS_LITERAL",
    "MAX_BLOCKS",
    "PROMPTS",
    "PROMPT_LITERAL",
    "block_hashes",
    "chained_hashes",
    "prompt_rows",
    "visible_ids",
]

BLOCK_TOKENS = 16
MAX_BLOCKS = 256
# What a line must hold for its ids to be read (a literal scan picks the candidates).
PROMPT_LITERAL = "prompt_token_ids: ["
# The text of a `Request %s details:` line's lead (an `other` row).
DETAILS_LITERAL = " details: prompt: "

# One row per line showing a prompt's ids. `request_id` is the details line's (null for a
# `Received request` line: its row is on the same line).
PROMPTS = pl.Schema(
    {
        "line": pl.Int64(),
        "request_id": pl.String(),
        "prompt_block_hashes": pl.List(pl.UInt64()),
        "prompt_tokens": pl.Int64(),  # ids visible on the line
        "prompt_cut": pl.Boolean(),  # the list was cut (`...]` or no `]`)
    }
)

_SEED = 0x5EED
_WINDOW = 1 << 20  # bytes of lists searched for `,` at once (about)
# The chain's multiplier (odd: invertible modulo 2^64) and its powers and inverse's powers.
_P = 0x9E3779B97F4A7C15
_POWERS = np.array([pow(_P, i, 1 << 64) for i in range(MAX_BLOCKS)], dtype=np.uint64)
_INVERSE_POWERS = np.array(
    [pow(pow(_P, -1, 1 << 64), i, 1 << 64) for i in range(MAX_BLOCKS)], dtype=np.uint64
)
# The ids as vLLM prints a list (`str(list)`): from the start, as far as the form holds.
_IDS = re.compile(r"[0-9]+(?:, [0-9]+)*")
# A Python string repr, whole (a backslash escapes the next character, the newline included).
_QUOTED = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
# The message up to the ids: the lead, the prompt's repr (or None), then the fields in between
# (`params: SamplingParams(...stop=['...']...)`), quoted strings stepped over whole.
_LEAD = (
    r"(?s)^ ?(?:Received request (\S+?):|Request (\S+) details:) prompt: "
    rf"(?:{_QUOTED}|None)(?:[^'\"]|{_QUOTED})*?, prompt_token_ids: \["
)


def visible_ids(ids: str, closed: bool) -> str:
    """The whole ids of a list's inside (`ids`: the text after `[` made of digits, commas and
    blanks; `closed`: a `]` follows it), in vLLM's form `1, 2, 3`: read up to the first text
    that is not in that form; a number that no `, ` follows may be cut unless the list is
    closed right after it."""
    match = _IDS.match(ids)
    visible = match.group() if match is not None else ""
    if (
        visible
        and not (closed and len(visible) == len(ids))
        and not ids.startswith(",", len(visible))
    ):
        visible = visible[: max(0, visible.rfind(", "))]
    return visible


def chained_hashes(visible: pl.Series) -> tuple[pl.Series, pl.Series]:
    """(prompt_block_hashes, prompt_tokens) of lists in vLLM's form (`visible_ids`).

    Each complete block's text (its 16 ids, each followed by `, `) is hashed by Polars (a
    fixed seed: the same in every run of one Polars version), and hash i chains blocks 0..i
    as a polynomial over them (h_i = h_(i-1) * P + b_i modulo 2^64, computed for every block
    at once as P^i times a running sum of b_k * P^-k), then mixed (splitmix64's finaliser).
    No Python per block: ~10 ns a block where blake2b in Python cost ~2 µs.
    The blocks are cut at every 16th `,` of the lists' bytes (in that form each id is
    followed by `, ` and no other `,` occurs), found by numpy a window of rows at a time,
    which counts the ids too (a regex extract of the blocks and a count cost more: see
    docs/benchmarks.md).
    """
    text = visible.fill_null("")
    n = text.len()
    empty = pl.Series([[]], dtype=pl.List(pl.UInt64())).new_from_index(0, n)
    if n == 0:
        return empty, pl.Series([], dtype=pl.Int64)
    listed = (text + ", ").cast(pl.Binary)
    size = (text.str.len_bytes().cast(pl.Int64) + 2).to_numpy()
    ends = np.cumsum(size)
    # Rows by windows of about _WINDOW bytes: the lists' bytes, a mask and the positions of
    # every `,` of a whole chunk cost more memory than the blocks themselves.
    bounds = np.unique(np.searchsorted(ends, np.arange(0, int(ends[-1]), _WINDOW)))
    highs = [*bounds[1:], n]
    parts = [_cuts(listed, size, int(lo), int(hi)) for lo, hi in zip(bounds, highs, strict=True)]
    ids, rows, index, begin, stop = (np.concatenate(column) for column in zip(*parts, strict=True))
    count = pl.Series(np.where(size == 2, 0, ids), dtype=pl.Int64)
    if rows.size == 0:
        return empty, count
    per_row = np.bincount(rows, minlength=n)
    blocks = (
        pl.DataFrame({"b": listed.gather(rows), "at": begin, "n": stop - begin})
        .select(pl.col("b").bin.slice(pl.col("at"), pl.col("n")).cast(pl.String))
        .to_series()
    )
    b = blocks.hash(seed=_SEED).to_numpy()
    with np.errstate(over="ignore"):
        running = np.cumsum(b * _INVERSE_POWERS[index])
        # The sum before each row's first block, taken off its blocks' running sums.
        heads = np.flatnonzero(index == 0)
        before = np.where(heads > 0, running[heads - 1], np.uint64(0))
        starts = np.repeat(before, per_row[per_row > 0])
        chained = _mix((running - starts) * _POWERS[index])
    hashes = (
        pl.DataFrame({"_row": rows, "h": chained}).group_by("_row", maintain_order=True).agg("h")
    )
    full = (
        pl.DataFrame({"_row": np.arange(n)})
        .join(hashes, on="_row", how="left", maintain_order="left")["h"]
        .fill_null(empty)
    )
    return full.cast(pl.List(pl.UInt64())), count


def _cuts(
    listed: pl.Series, size: npt.NDArray[np.int64], lo: int, hi: int
) -> tuple[npt.NDArray[np.int64], ...]:
    """For rows lo..hi of `listed` (lists in vLLM's form with `, ` appended; `size`: their
    bytes): (ids a row, and for each complete block of the first MAX_BLOCKS: its row, its
    index in the row, its first byte and the byte after it in the row)."""
    data = np.frombuffer(b"".join(listed.slice(lo, hi - lo).to_list()), dtype=np.uint8)
    commas = np.flatnonzero(data == ord(","))  # one an id: the form has no other
    start = np.cumsum(size[lo:hi]) - size[lo:hi]
    first = np.searchsorted(commas, start)
    ids = np.diff(np.append(first, commas.size))
    per_row = np.minimum(ids // BLOCK_TOKENS, MAX_BLOCKS)
    local = np.repeat(np.arange(hi - lo), per_row)
    index = np.arange(local.size) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    last = first[local] + BLOCK_TOKENS * index + BLOCK_TOKENS - 1  # a block's last `,`
    stop = commas[last] + 2 - start[local]
    begin = np.where(index == 0, 0, commas[last - BLOCK_TOKENS] + 2 - start[local])
    return ids, local + lo, index, begin, stop


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser (spreads every input bit over the output)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def block_hashes(ids: str, closed: bool) -> tuple[list[int], int]:
    """(hashes of the complete visible blocks, count of visible ids) of one list's inside."""
    hashes, count = chained_hashes(pl.Series([visible_ids(ids, closed)]))
    return list(hashes[0]), int(count[0])


def prompt_rows(messages: pl.DataFrame) -> pl.DataFrame:
    """PROMPTS rows of (line, message) rows: those whose message shows the field's ids."""
    if messages.height == 0:
        return pl.DataFrame(schema=PROMPTS)
    message = pl.col("message")
    # The text after the lead: a replace finds the match's bounds alone (no capture engine
    # over a long prompt: 7x faster than extracting group 0); a shorter text is a match.
    after = message.str.replace(_LEAD, "", n=1)
    found = messages.with_columns(after.alias("_after")).filter(
        pl.col("_after").str.len_bytes() < message.str.len_bytes()
    )
    if found.height == 0:
        return pl.DataFrame(schema=PROMPTS)
    # The id of a details line (a `Received request` row is on the prompt's own line).
    rid = message.str.slice(0, 300).str.extract(r"^ ?Request (\S+) details: ", 1)
    rest = pl.col("_after")
    end = rest.str.find(r"[^0-9, ]").cast(pl.Int64)  # the list's inside is ASCII
    found = found.select(
        "line",
        rid.alias("request_id"),
        rest.str.slice(0, end).alias("_ids"),
        (rest.str.slice(end.fill_null(rest.str.len_bytes()), 1) == "]").alias("_closed"),
    )
    # A closed list in vLLM's own form is visible whole (the usual line); the others (cut,
    # or not in that form) are read by visible_ids.
    whole = pl.col("_closed") & pl.col("_ids").str.contains(r"^(?:[0-9]+(?:, [0-9]+)*)?$")
    found = found.with_columns(whole.alias("_whole"))
    odd = found.filter(~pl.col("_whole"))
    if odd.height:
        fixed = [
            visible_ids(ids, closed) for ids, closed in odd.select("_ids", "_closed").iter_rows()
        ]
        found = pl.concat(
            [
                found.filter(pl.col("_whole")),
                odd.with_columns(pl.Series("_ids", fixed, dtype=pl.String)),
            ]
        ).sort("line", maintain_order=True)
    hashes, count = chained_hashes(found["_ids"])
    return pl.DataFrame(
        {
            "line": found["line"],
            "request_id": found["request_id"],
            "prompt_block_hashes": hashes,
            "prompt_tokens": count,
            "prompt_cut": ~found["_closed"],
        },
        schema=PROMPTS,
    )
