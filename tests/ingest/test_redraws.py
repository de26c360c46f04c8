"""Lines with a carriage return inside (tqdm redraws) and no vLLM header are read column-wise.

The per-line path reads such a line as its text after the last `\\r` (ingest/_envelope.py
`_clean`): with no header anywhere and no process prefix in front of the first `\\r`, nothing
else of it is kept, so the router reads that text as the line (ingest/_tqdm.py) instead of
sending every such line to the per-line path (4 MB of `a\\rb` lines cost ~375x a normal log per
MB; now what a line as short costs without its `\\r`: docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _lines

from tests.ingest import test_hostile_agree
from tests.ingest.test_hostile_routing import _frames

_LONG = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor"
_STATS = (
    "INFO 01-15 14:00:00 [loggers.py:116] Avg prompt throughput: 1.0 tokens/s, Avg generation"
    " throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 4 reqs, GPU KV cache usage: 5.0%,"
    " Prefix cache hit rate: 6.0% and"
)
SETTLED = [
    ["a\rb"],
    ["a\rb\r\n", "c\rd\n"],
    ["a\r\r\n"],
    ["]: \r\x1b[32m"],
    [f"{_LONG}\r{_LONG}"],
    ["x\rINFO:     Started server process [1]"],
    ["2025-01-15T14:00:00.123Z x\rINFO:     Started server process [1]"],
    ["x\r\x1b[32mINFO\x1b[0m:     y"],
    # Its last redraw a progress bar: plain output, an `other` row column-wise too.
    ["Loading: 10%|#| 1/10 [00:01<00:09]\rLoading: 20%|##| 2/10 [00:01<00:09]"],
]
PER_LINE = [
    ["(APIServer pid=1) a\rb"],
    ["[rank0]: a\rb"],
    ["x\rINFO 01-15 14:00:00 [a.py:1] hello"],
    ['x\r{"a": 1}'],
    ['x\r{"log": "INFO 01-15 14:00:00 [a.py:1] hi\\n", "time": "2025-01-15T14:00:00Z"}'],
    ["abc\rdef [repeated 3x across cluster]"],
]


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The lines the router leaves to the per-line path."""
    lines_sent: list[Any] = []
    real = _lines.parse_odd_lines

    def spy(lines: Any, no_record: Any) -> Any:
        lines_sent.extend(line for line, _raw, _prev in lines)
        return real(lines, no_record)

    monkeypatch.setattr(_lines, "parse_odd_lines", spy)
    return lines_sent


@pytest.mark.parametrize("lines", SETTLED)
def test_a_redraw_without_a_header_is_read_column_wise(lines: list[str], sent: list[Any]) -> None:
    routed = _frames(lines)
    assert sent == []
    assert routed == test_hostile_agree._read_per_line(lines)


@pytest.mark.parametrize("lines", PER_LINE)
def test_a_redraw_the_per_line_path_reads_otherwise_goes_there(
    lines: list[str], sent: list[Any]
) -> None:
    routed = _frames(lines)
    assert sent == [1]
    assert routed == test_hostile_agree._read_per_line(lines)


def test_an_unrecognised_redraw_shows_its_physical_line() -> None:
    routed: dict[str, Any] = _frames(["a\rb\r\n"])
    (row,) = routed["unrecognized"]
    assert (row["line"], row["text"], row["reason"]) == (1, "a\rb", "no known format")


BARS = [
    ["Processed prompts:  90%|#########| 90/100 [00:09<00:10, 9.9it/s]"],
    ["Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.0s/it]"],
    ["x: 5%|| 1/2 [", "y:  7%|#| 3/4 ["],
]


@pytest.mark.parametrize("lines", BARS)
def test_a_progress_bar_is_read_column_wise(lines: list[str], sent: list[Any]) -> None:
    routed: dict[str, Any] = _frames(lines)
    assert sent == []
    assert routed == test_hostile_agree._read_per_line(lines)
    assert [row["message"] for row in routed["other"]] == lines


@pytest.mark.parametrize(
    "lines",
    [
        # What the per-line path reads another way, or in context: per line.
        [_STATS[:-40], "Loading:  50%|##| 1/2 [00:01<00:01]"],
        ["INFO 01-15 14:00:00 [a.py:1] Received request", "Loading:  50%|##| 1/2 [00:01<00:01]"],
        ["(APIServer pid=1) Loading:  50%|##| 1/2 [00:01<00:01]"],
        ["vllm-1  | Loading:  50%|##| 1/2 [00:01<00:01]"],
        ["INFO Loading:  50%|##| 1/2 [00:01<00:01]"],
    ],
)
def test_a_progress_bar_read_otherwise_agrees(lines: list[str]) -> None:
    assert _frames(lines) == test_hostile_agree._read_per_line(lines)


def test_a_redraw_after_an_open_record_is_its_tail_in_both_paths() -> None:
    lines = [_STATS, f"{_LONG}\rrest of it"]
    assert _frames(lines) == test_hostile_agree._read_per_line(lines)


_PIECES = ["\r", "\r\r", "x\r", "\r\x1b[32m", "\r(APIServer pid=1) ", "\r[rank0]: ", "\rINFO:  y"]


@settings(
    max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck)
)
@given(st.data())
def test_carriage_returns_anywhere_read_alike(data: st.DataObject) -> None:
    lines = data.draw(test_hostile_agree.mixtures())
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(lines) - 1))
        line = lines[at]
        cut = data.draw(st.integers(0, len(line)))
        lines[at] = line[:cut] + data.draw(st.sampled_from(_PIECES)) + line[cut:]
    assert _frames(lines) == test_hostile_agree._read_per_line(lines)
