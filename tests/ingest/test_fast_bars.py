"""tqdm bars settled by their shape read as step 6's checks read them one by one.

ingest/_tqdm.py `_bars` marks lines of tqdm's common shape (`_BAR`) as readable progress bars
with no cue, so step 6 skips its other checks on them. Here every batch is parsed with that
path on and off (`FAST_BARS`): frames, reasons, texts, line numbers and totals must agree, for
bars of any description, bar, counts and tail, with and without a docker time, a process or
compose prefix, a rank, colour codes, `\\r` redraws, among records and hard-wraps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _route, _tqdm
from preemptscope.ingest.logs import parse_lines

from tests.ingest.test_hostile_routing import OPTIONS, _frames
from tests.ingest.test_short_noise import NORMAL, WRAPPED, in_batches

_DESCS = st.one_of(
    st.sampled_from(
        [
            "Processed prompts",
            "Adding requests",
            "Loading safetensors checkpoint shards",
            "Capturing CUDA graph shapes",
            "",
            "x",
            "INFO",
            "Finished request x",
            "Request ",
            "pid=1",
            "[rank0]",
            "01-15 14:00:00 ",
            "2025-01-15",
            "{",
            "a|b",
            "  ind",
            "web-1  ",
            "Traceback (most recent call last)",
            "x" * 90,
        ]
    ),
    st.text(alphabet='aZ 0:%|[]{}-="\x1b\r#.,/<?', max_size=12),
)
_BARS = st.one_of(
    st.sampled_from(["##########", "#####     ", "█████▍    ", "", " " * 10, "123456789#"]),
    st.text(alphabet="# 09█▏ab[m|-", max_size=12),
)
_TAILS = st.one_of(
    st.sampled_from(
        [
            "00:09<00:10, 9.90it/s",
            "1:02:03<?, ?it/s",
            "00:41<00:00, 24.08it/s, est. speed input: 1234.56 toks/s, output: 2345.67 toks/s",
            "00:01<00:01,  1.50s/it",
            "00:00<00:00, INFO: x",
            "00:00<00:00, Request x",
            "00:00<00:00, loss=0.1",
            "00:00<00:00, 01-15 14:00:00 x",
            "0m",
            "32m00:00<00:00",
            "",
        ]
    ),
    st.text(alphabet="0123456789:<?,./ aZit-[]", max_size=20),
)
_WRAPS = st.sampled_from(
    [
        "{}",
        "2025-01-15T14:00:00.123Z {}",
        "(EngineCore_0 pid=7) {}",
        "web-1  | {}",
        "[rank0]: {}",
        "\x1b[32m{}\x1b[0m",
        "[32m{}[0m",
        "{}\r",
        "{}\r{}",
        "x\r{}",
        "{}" + " " * 40 + "INFO 01-15 14:00:00 [a.py:1] hi",
        "INFO 01-15 14:00:00 [a.py:1] {}",
    ]
)


@st.composite
def _bar(draw: st.DrawFn) -> str:
    pct = draw(st.integers(0, 999))
    done = draw(st.integers(0, 10**7))
    line = (
        f"{draw(_DESCS)}:{' ' * draw(st.integers(0, 2))}{pct}%|{draw(_BARS)}|"
        f" {done}/{draw(st.integers(0, 10**7))} [{draw(_TAILS)}]"
    )
    return draw(_WRAPS).replace("{}", line)


LINES = st.lists(
    st.one_of(
        _bar().map(lambda s: [s]),
        st.lists(_bar(), min_size=1, max_size=10),
        st.sampled_from(NORMAL).map(lambda s: [s]),
        st.sampled_from(WRAPPED),
        st.sampled_from(["", "x", "lorem ipsum dolor sit amet consectetur adipiscing elit"]).map(
            lambda s: [s]
        ),
    ),
    max_size=30,
).map(lambda parts: [line for part in parts for line in part])

_PLAIN = "Processed prompts:  90%|#########| 90/100 [00:09<00:10, 9.9it/s]"


@contextmanager
def _fast(on: bool) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_tqdm, "FAST_BARS", on)
        yield


def _parsed(lines: list[str], *, on: bool) -> dict[str, Any]:
    with _fast(on):
        return _frames(lines)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(LINES)
@example([_PLAIN] * 5)
@example([NORMAL[0][:70], _PLAIN, _PLAIN])  # a bar after a long line with a stats literal
@example(["\x1b[32m" + _PLAIN + "\x1b[0m", _PLAIN, _PLAIN + "\r", "x\r" + _PLAIN])
@example(["Request x:  90%|#| 9/10 [00:00<00:00, 1it/s]", _PLAIN.replace("9.9it", "9.9 INFO")])
def test_fast_bars_and_checks_agree(lines: list[str]) -> None:
    assert _parsed(lines, on=True) == _parsed(lines, on=False)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(LINES, LINES)
def test_fast_bars_agree_across_batches(first: list[str], second: list[str]) -> None:
    """A batch's first bars follow the last lines of the batch before (a parse in chunks)."""

    def parsed(on: bool) -> list[Any]:
        with _fast(on):
            return in_batches(first, second)

    assert parsed(True) == parsed(False)


def test_the_fast_path_settles_bars(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape settles the common bars (not the checks under another name) and leaves the
    ones a check may read otherwise: a level word, a request literal, colour codes."""
    marked: list[int] = []
    real = _tqdm._bars

    def spy(*args: Any) -> Any:
        found = real(*args)
        marked.append(int(found.sum()))
        return found

    monkeypatch.setattr(_route, "_bars", spy)
    unicode = "Capturing CUDA graphs: 100%|██████████| 67/67 [00:14<00:00,  4.71it/s]"
    lines = [_PLAIN, unicode, _PLAIN.replace("9.9it/s", "INFO"), "\x1b[32m" + _PLAIN + "\x1b[0m"]
    lines += ["Finished request x:  90%|#| 9/10 [00:00<00:00, 1it/s]", _PLAIN]
    frames = parse_lines(lines, source="r", deployment="r", options=OPTIONS)
    assert marked == [3]
    other = frames.frames["other"]
    assert other.height == 6
    assert other["message"].to_list()[:2] == [_PLAIN, unicode]
    assert frames.accounting.unrecognized_lines == 0
