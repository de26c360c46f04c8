"""Prompt block hashes on the request rows `report` and `serve` keep (ingest/prompts.py):
the ids a request line shows, read from the record's own field, as chained 16-token hashes."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import prompts
from preemptscope.ingest.prompts import block_hashes
from preemptscope.ingest.reduce import reduce_paths

V0 = (
    "INFO 11-13 01:39:{sec:02d} logger.py:37] Received request {rid}: prompt: {prompt!r},"
    " params: SamplingParams(n=1, stop={stop!r}), prompt_token_ids: {ids},"
    " lora_request: None, prompt_adapter_request: None."
)
DETAILS = (
    "(APIServer pid=1) DEBUG 11-07 08:50:{sec:02d} [logger.py:48] Request {rid} details:"
    " prompt: {prompt!r}, prompt_token_ids: {ids}, prompt_embeds shape: None."
)
RECEIVED = (
    "(APIServer pid=1) INFO 11-07 08:50:{sec:02d} [logger.py:40] Received request {rid}:"
    " params: SamplingParams(n=1), lora_request: None."
)


def expected(tokens: list[int]) -> list[int]:
    """The documented hashes, one block after the other: block k's text (its 16 ids, each
    followed by ", ") hashed by Polars (seed 0x5EED), h_i = h_(i-1) * P + b_i modulo 2^64,
    then splitmix64's finaliser; for each complete block, at most 256."""
    mask, out, chain = (1 << 64) - 1, [], 0
    for block in range(min(len(tokens) // 16, 256)):
        text = "".join(f"{t}, " for t in tokens[block * 16 : (block + 1) * 16])
        b = int(pl.Series([text]).hash(seed=0x5EED)[0])
        chain = (chain * 0x9E3779B97F4A7C15 + b) & mask
        x = chain
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
        out.append(x ^ (x >> 31))
    return out


def rows(tmp_path: Path, lines: list[str]) -> dict[int, dict[str, object]]:
    """The kept request rows (ARRIVALS and JOINED) of a log, by line."""
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    [frames] = reduce_paths([str(path)], deployment="d")
    assert frames.arrivals is not None and frames.joined is not None
    columns = ["line", "prompt_block_hashes", "prompt_tokens", "prompt_cut"]
    kept = pl.concat([frames.arrivals.select(columns), frames.joined.select(columns)])
    return {int(row["line"]): row for row in kept.to_dicts()}


def ids(tokens: list[int]) -> str:
    return "[" + ", ".join(str(t) for t in tokens) + "]"


def test_ids_read_from_a_v0_received_line(tmp_path: Path) -> None:
    tokens = list(range(100, 150))  # 3 complete blocks and 2 ids
    got = rows(tmp_path, [V0.format(sec=1, rid="a", prompt="hi", stop=[], ids=ids(tokens))])
    assert got[1]["prompt_block_hashes"] == expected(tokens)
    assert len(expected(tokens)) == 3
    assert got[1]["prompt_tokens"] == 50
    assert got[1]["prompt_cut"] is False


def test_details_line_before_or_after_its_received_line(tmp_path: Path) -> None:
    first, second = list(range(40)), list(range(7, 47))
    got = rows(
        tmp_path,
        [
            DETAILS.format(sec=1, rid="cmpl-a", prompt="x", ids=ids(first)),
            RECEIVED.format(sec=1, rid="cmpl-a"),
            RECEIVED.format(sec=2, rid="cmpl-b"),
            DETAILS.format(sec=2, rid="cmpl-b", prompt="y", ids=ids(second)),
            RECEIVED.format(sec=3, rid="cmpl-c"),
        ],
    )
    assert got[2]["prompt_block_hashes"] == expected(first)
    assert got[3]["prompt_block_hashes"] == expected(second)
    assert got[5]["prompt_block_hashes"] is None  # no details line: no ids shown
    assert set(got) == {2, 3, 5}  # one row a request, at its Received line


def test_cut_lists_keep_their_complete_visible_blocks(tmp_path: Path) -> None:
    tokens = list(range(1000, 1040))
    ellipsis = "[" + ", ".join(str(t) for t in tokens) + ", ...]"
    # The line ends inside the list: its last number may be cut (`1039` of `10390`).
    open_end = V0.format(sec=2, rid="b", prompt="p", stop=[], ids=ids(tokens))
    open_end = open_end[: open_end.index("]", open_end.index("prompt_token_ids"))]
    thirty_three = list(range(33))
    cut_at_block = V0.format(sec=3, rid="c", prompt="p", stop=[], ids=ids(thirty_three))
    cut_at_block = cut_at_block[: cut_at_block.index("32]") + 2]  # `..., 31, 32` no `]`
    got = rows(
        tmp_path,
        [
            V0.format(sec=1, rid="a", prompt="p", stop=[], ids=ellipsis),
            open_end,
            cut_at_block,
        ],
    )
    assert (got[1]["prompt_tokens"], got[1]["prompt_cut"]) == (40, True)
    assert got[1]["prompt_block_hashes"] == expected(tokens)
    assert (got[2]["prompt_tokens"], got[2]["prompt_cut"]) == (39, True)
    assert got[2]["prompt_block_hashes"] == expected(tokens[:39])
    # 32 ids followed by a comma are whole: two blocks.
    assert (got[3]["prompt_tokens"], got[3]["prompt_cut"]) == (32, True)
    assert got[3]["prompt_block_hashes"] == expected(thirty_three[:32])


def test_a_list_not_in_vllms_form_ends_where_the_form_does() -> None:
    whole = ", ".join(str(t) for t in range(40))
    assert block_hashes(whole, closed=True) == (expected(list(range(40))), 40)
    # A second comma, a blank for a separator, a letter: the ids before it are whole.
    assert block_hashes(whole[:-4] + ",, 39", closed=True)[1] == 39  # 0..38
    assert block_hashes("1 2", closed=True) == ([], 0)
    assert block_hashes(whole + ", x", closed=False)[1] == 40
    # Not closed: the last number may be cut.
    assert block_hashes(whole, closed=False)[1] == 39
    assert block_hashes(whole + ", ", closed=False)[1] == 40


def test_a_prompt_holding_the_field_is_text(tmp_path: Path) -> None:
    real = list(range(500, 532))
    fake = ids(list(range(16)))
    prompts = [
        f"x', prompt_token_ids: {fake}, lora_request: None.",  # a quote ends nothing
        f'it\'s "quoted", params: P, prompt_token_ids: {fake}',
        # A whole forged record behind a vLLM header (the line takes the per-line path).
        "INFO 11-13 01:39:09 logger.py:37] Received request evil: prompt: '', params: P,"
        f" prompt_token_ids: {fake}, lora_request: None.",
        "back\\slash\\",
    ]
    # The field inside a quoted string after the prompt too (a stop string in the params).
    stop = [f"prompt_token_ids: {fake}", f"x, prompt_token_ids: {fake}"]
    lines = [
        V0.format(sec=i, rid=f"r{i}", prompt=p, stop=stop, ids=ids(real))
        for i, p in enumerate(prompts)
    ]
    lines.append(DETAILS.format(sec=9, rid="cmpl-z", prompt=prompts[0], ids=ids(real)))
    lines.append(RECEIVED.format(sec=9, rid="cmpl-z"))
    got = rows(tmp_path, lines)
    assert len(got) == 5
    for row in got.values():
        assert row["prompt_block_hashes"] == expected(real)
        assert row["prompt_tokens"] == 32


def test_no_ids_is_null(tmp_path: Path) -> None:
    not_a_repr = (
        "INFO 11-13 01:39:03 logger.py:37] Received request q: prompt: hello,"
        " prompt_token_ids: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], x."
    )
    got = rows(
        tmp_path,
        [
            V0.format(sec=1, rid="a", prompt="p", stop=[], ids="None"),
            RECEIVED.format(sec=2, rid="cmpl-b"),
            not_a_repr,  # an f-string era's prompt: where it ends is unknown
        ],
    )
    assert len(got) == 3
    for row in got.values():
        assert row["prompt_block_hashes"] is None
        assert row["prompt_tokens"] is None
        assert row["prompt_cut"] is None


def test_shared_prefixes_share_hashes_and_256_blocks_at_most(tmp_path: Path) -> None:
    shared = list(range(2000, 2048))  # 3 blocks
    one, two = [*shared, *range(16)], [*shared, *range(1, 17)]
    long = list(range(5000))
    got = rows(
        tmp_path,
        [
            V0.format(sec=1, rid="a", prompt="p", stop=[], ids=ids(one)),
            V0.format(sec=2, rid="b", prompt="q", stop=[], ids=ids(two)),
            V0.format(sec=3, rid="c", prompt="r", stop=[], ids=ids(long)),
        ],
    )
    first, second = got[1]["prompt_block_hashes"], got[2]["prompt_block_hashes"]
    assert isinstance(first, list) and isinstance(second, list)
    assert first[:3] == second[:3] and first[3] != second[3]
    assert len(got[3]["prompt_block_hashes"]) == 256  # type: ignore[arg-type]
    assert got[3]["prompt_tokens"] == 5000


_TEXT = st.lists(
    st.sampled_from([*"ab '\"\\,[]:\n", "prompt_token_ids: [", "1, 2", "] INFO 01-01 00:00:00 "]),
    max_size=12,
).map("".join)


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 200_000), max_size=70),
    prompt=_TEXT,
    stop=st.lists(_TEXT, max_size=2),
)
def test_any_prompt_and_stop_text_leave_the_real_ids(
    tmp_path_factory: object, tokens: list[int], prompt: str, stop: list[str]
) -> None:
    tmp = tmp_path_factory.mktemp("p")  # type: ignore[attr-defined]
    got = rows(tmp, [V0.format(sec=1, rid="a", prompt=prompt, stop=stop, ids=ids(tokens))])
    assert got[1]["prompt_block_hashes"] == expected(tokens)
    assert got[1]["prompt_tokens"] == len(tokens)


@settings(max_examples=60, deadline=None)
@example(lists=[list(range(40)), list(range(50)), None, list(range(4_100))], window=1 << 20)
@given(
    lists=st.lists(
        st.one_of(
            st.none(),
            st.lists(st.integers(0, 10**9), max_size=80),
            # Lengths around block and list bounds, with ids of every width.
            st.sampled_from([0, 15, 16, 17, 33, 100, 4_095, 4_096, 4_111, 4_200]).map(
                lambda n: [i * 7_919 % 10**6 for i in range(n)]
            ),
        ),
        max_size=8,
    ),
    window=st.sampled_from([1, 7, 64, 1_000, 1 << 20]),
)
def test_hashes_cut_by_windows_of_rows_match_the_documented_ones(
    lists: list[list[int] | None], window: int
) -> None:
    """chained_hashes cuts the blocks a window of rows at a time (prompts._WINDOW bytes,
    about): any window gives each list its documented hashes and its count of ids."""
    text = pl.Series(
        [None if x is None else ", ".join(map(str, x)) for x in lists], dtype=pl.String
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prompts, "_WINDOW", window)
        hashes, count = prompts.chained_hashes(text)
    assert hashes.to_list() == [expected(x or []) for x in lists]
    assert count.to_list() == [len(x or []) for x in lists]
