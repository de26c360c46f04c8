"""The prompt token ids a request line shows, as chained hashes of its leading 16-token blocks.

vLLM logs the ids in `Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, ...`
(V0 engine and the OpenAI request logger up to v0.11.0) and, from v0.11.1, in the DEBUG
`Request %s details: prompt: %r, prompt_token_ids: %s, ...` line (vllm-log-formats.md §6.1).
The simulator's shared-prefix replay reads them (`prompt_block_hashes` of ARRIVALS and JOINED).

The prompt is user text: the ids read are the field after the prompt's repr, found by one
anchored pattern (the Rust engine: linear) that steps over the prompt and every quoted string
after it whole, so no `prompt_token_ids: [` inside a string is ever the field. A prompt that
is not a repr (no quote: the f-string eras) gives no ids.

Hash i covers tokens [0, 16 * (i + 1)): blake2b (8 bytes) over hash i - 1 and block i's ids
in their decimal text, so equal hash i means equal first 16 * (i + 1) tokens. At most
MAX_BLOCKS blocks; only blocks wholly visible (a list cut by --max-log-len `...]`, or by the
end of the line, keeps its complete ids: a number the line ends in may be cut too).
"""

from __future__ import annotations

import hashlib

import polars as pl

__all__ = ["BLOCK_TOKENS", "MAX_BLOCKS", "PROMPTS", "PROMPT_LITERAL", "block_hashes", "prompt_rows"]

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

# A Python string repr, whole (a backslash escapes the next character, the newline included).
_QUOTED = r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*\""""
# The message up to the ids: the lead, the prompt's repr (or None), then the fields in between
# (`params: SamplingParams(...stop=['...']...)`), quoted strings stepped over whole.
_LEAD = (
    r"(?s)^ ?(?:Received request (\S+?):|Request (\S+) details:) prompt: "
    rf"(?:{_QUOTED}|None)(?:[^'\"]|{_QUOTED})*?, prompt_token_ids: \["
)


def block_hashes(ids: str, closed: bool) -> tuple[list[int], int]:
    """(hashes of the complete visible blocks, count of visible ids) of a list's inside.

    `ids`: the text after `[` made of digits, commas and blanks; `closed`: a `]` follows it.
    Unless closed, the last number may be cut (only numbers followed by a comma count). A
    malformed item (`1 2`, `,,`) ends what is visible.
    """
    parts = ids.split(",")
    if not closed or not parts[-1].strip():
        parts.pop()  # cut, or the empty item after a trailing comma (`[1, 2, ...]`)
    count = 0
    for part in parts:
        if not part.strip().isdigit():
            break
        count += 1
    hashes: list[int] = []
    previous = b""
    for block in range(min(count // BLOCK_TOKENS, MAX_BLOCKS)):
        items = parts[block * BLOCK_TOKENS : (block + 1) * BLOCK_TOKENS]
        text = ",".join(item.strip() for item in items).encode()
        previous = hashlib.blake2b(previous + text, digest_size=8).digest()
        hashes.append(int.from_bytes(previous, "big"))
    return hashes, count


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
    ids = rest.str.slice(0, end)
    found = found.select(
        "line",
        rid.alias("request_id"),
        ids.alias("_ids"),
        (rest.str.slice(end.fill_null(rest.str.len_bytes()), 1) == "]").alias("_closed"),
    )
    # A closed list of fewer than a block of ids in vLLM's own form (the usual short prompt)
    # needs no hashing: counted here; the others in block_hashes.
    text = pl.col("_ids")
    canonical = pl.col("_closed") & text.str.contains(r"^(?:[0-9]+(?:, [0-9]+)*)?$")
    count = pl.when(text == "").then(0).otherwise(text.str.count_matches(",") + 1)
    found = found.with_columns(
        pl.when(canonical & (count < BLOCK_TOKENS)).then(count).cast(pl.Int64).alias("_count")
    )
    short = found.filter(pl.col("_count").is_not_null()).select(
        "line",
        "request_id",
        pl.lit([], pl.List(pl.UInt64())).alias("prompt_block_hashes"),
        pl.col("_count").alias("prompt_tokens"),
        pl.lit(False).alias("prompt_cut"),
    )
    long = [
        (line, request_id, *_hashed(text, closed))
        for line, request_id, text, closed in found.filter(pl.col("_count").is_null())
        .select("line", "request_id", "_ids", "_closed")
        .iter_rows()
    ]
    rows = pl.concat([short, pl.DataFrame(long, schema=PROMPTS, orient="row")])
    return rows.sort("line") if long and short.height else rows


def _hashed(ids: str, closed: bool) -> tuple[list[int], int, bool]:
    hashes, count = block_hashes(ids, closed)
    return hashes, count, not closed
