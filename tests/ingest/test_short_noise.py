"""Short lines of noise settled in bulk read as the cascade reads them one by one.

ingest/_noise.py `_short_noise` marks short lines (`a_b`, tqdm's `a\\rb`) unrecognised in bulk
when the cascade claims their text as noise and the two lines before are short (a line that
short cannot make the next one a record's tail). Here every batch is parsed with the bulk path
forced on (any number of short lines, any number of distinct texts) and off (every line through
the cascade): the frames, reasons, texts, line numbers and totals must agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _noise, _route
from preemptscope.ingest.logs import ParseState, parse_lines

from tests.ingest.test_hostile_routing import OPTIONS, _frames

_STATS = (
    "INFO 01-15 14:00:00 [loggers.py:116] Avg prompt throughput: 1.0 tokens/s, Avg generation"
    " throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%,"
    " Prefix cache hit rate: 6.0%"
)
_PREEMPT = (
    "WARNING 01-15 14:00:01 [scheduler.py:1491] Sequence group 7 is preempted by"
    " PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
    " total_num_cumulative_preemption=1"
)
NORMAL = [
    _STATS,
    _PREEMPT,
    "INFO 01-15 14:00:02 [logger.py:39] Received request cmpl-1: prompt: 'hi', params: x",
    'INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK',
    "(EngineCore_0 pid=7) INFO 01-15 14:00:03 [core.py:1] hello",
    "Processed prompts:  90%|#########| 90/100 [00:09<00:10, 9.9it/s]",
    "2025-01-15T14:00:00.123Z Processed prompts:  10%|#| 10/100 [00:01<00:10, 9.9it/s]\rx",
    "Traceback (most recent call last):",
    '  File "x.py", line 1, in <module>',
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt",
    '{"log": "INFO 01-15 14:00:00 [a.py:1] hi\\n", "time": "2025-01-15T14:00:00Z"}',
]
# Hard-wrapped records: a short tail (or middle) after a long first half.
WRAPPED = [
    [_STATS[:80], _STATS[80:-4], _STATS[-4:]],
    [_PREEMPT[:-3], _PREEMPT[-3:]],
    [_STATS[:-5], "6.0%"],
]
SHORT = st.one_of(
    st.sampled_from(
        [
            "a_b",
            "a\rb",
            "a\r\rb",
            "ab\r",
            "\r",
            "\ra",
            "a\r1",
            "x",
            "",
            " ",
            "a b",
            "{",
            "{}",
            '{"a":1}',
            "INFO",
            "INFO: x",
            "ERROR",
            "DEBUG:",
            "[rank0]: x",
            "pid=1",
            "  x",
            "^^^",
            "~~",
            "a|  b",
            "1:23:45",
            "\x1b[0m",
            "[32m",
            "[0m",
            "01-15",
            "6.0%",
            "done!",
            "Trace",
            "0/10 [00:01",
        ]
    ),
    st.text(alphabet="ab_ \r{}[]|^~:0123456789=m\x1b-", max_size=15),
)
LINES = st.lists(
    st.one_of(
        SHORT.map(lambda s: [s]),
        st.lists(SHORT, min_size=1, max_size=12),
        SHORT.map(lambda s: [s] * 8),  # one text over and over (a file of `a\rb`)
        st.sampled_from(NORMAL).map(lambda s: [s]),
        st.sampled_from(WRAPPED),
    ),
    max_size=40,
).map(lambda parts: [line for part in parts for line in part])


@contextmanager
def _bulk(on: bool) -> Iterator[None]:
    """The bulk path on for any number of short lines of noise, or off."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_noise, "SHORT_NOISE_MIN", 0 if on else 1 << 62)
        patch.setattr(_noise, "SHORT_NOISE_SHARE", 1 << 62)
        yield


def _parsed(lines: list[str], *, on: bool) -> dict[str, Any]:
    with _bulk(on):
        return _frames(lines)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(LINES)
@example(["a_b"] * 10)
@example(["ab\r"] * 10)
@example(["a\rb\n"] * 10)
@example(["a\rb"] * 3 + [_STATS[:-5], "6.0%", "a\rb", "a_b"])
@example(["x", "y", *WRAPPED[0], "a_b", "a_b"])
def test_bulk_and_cascade_agree(lines: list[str]) -> None:
    assert _parsed(lines, on=True) == _parsed(lines, on=False)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(LINES, LINES)
def test_bulk_and_cascade_agree_across_batches(first: list[str], second: list[str]) -> None:
    """A batch's first lines follow the last ones of the batch before (a parse in chunks)."""

    def parsed(on: bool) -> list[Any]:
        with _bulk(on):
            return in_batches(first, second)

    assert parsed(True) == parsed(False)


def in_batches(first: list[str], second: list[str]) -> list[Any]:
    """Totals and rows of `first` and `second` parsed as two batches of one file."""
    state = ParseState()
    out: list[Any] = []
    for number, batch in ((1, first), (len(first) + 1, second)):
        frames = parse_lines(
            batch,
            source="r",
            deployment="r",
            first_line=number,
            options=OPTIONS,
            state=state,
            final=batch is second,
        )
        acc = frames.accounting
        out.append((acc.lines, acc.parsed_lines, acc.unrecognized_lines, acc.blank_lines))
        out.extend(
            frame.to_dicts() for kind, frame in sorted(frames.frames.items()) if frame.height
        )
    return out


def test_the_bulk_path_settles_short_noise(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bulk path runs and settles the lines (not the cascade under another name), with the
    reason, line numbers and physical text the cascade gives."""
    lines = ["a\rb", "a_b"] * 3000 + [_STATS, "x"]
    settled: list[int] = []
    real = _noise._short_noise

    def spy(*args: Any) -> Any:
        found = real(*args)
        settled.append(0 if found is None else int(found[0].sum()))
        return found

    monkeypatch.setattr(_route, "_short_noise", spy)
    frames = parse_lines(lines, source="r", deployment="r", options=OPTIONS)
    assert settled == [6000 - 2]  # the two first lines, and `x` after the stats line: cascade
    unrec = frames.frames["unrecognized"]
    assert unrec.height == 6001
    assert unrec.row(0, named=True)["text"] == "a\rb"
    assert unrec.row(1, named=True)["line"] == 2
    assert set(unrec["reason"]) == {"no known format"}
    acc = frames.accounting
    assert (acc.lines, acc.parsed_lines, acc.unrecognized_lines) == (6002, 1, 6001)
    assert frames.frames["scheduler_stats"].height == 1
