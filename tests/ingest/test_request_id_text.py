"""A request's id is a client's text: a carriage return in it starts no record, and dots,
colons and trailing dots in it are its own.

vLLM (v0.6.5+) takes a request's id from the chat body's `request_id` (or `X-Request-Id`) and
logs it with `%s`, as it is: a JSON string can hold `\\r`. Read as a tqdm redraw, the text
behind that `\\r` became the line's record (a forged preemption with its counter). And an id
such as `req.1` was read `req` from `Received request req.1: ...` (the row stopped at the
first dot), so `req.1`, `req.2`, ... were one request there and others in `Added`: their
latencies were wrong.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _lines
from preemptscope.ingest.lifecycle import latencies_from_requests, log_arrivals, log_latencies
from preemptscope.ingest.logs import ParseOptions, parse_lines
from preemptscope.ingest.reduce import reduce_paths

from tests.ingest.test_hostile_agree import _read_per_line
from tests.ingest.test_hostile_routing import _all_per_line, _frames

OPTIONS = ParseOptions(year=2025)

PREEMPTION = (
    "WARNING 01-15 14:00:00 [scheduler.py:1491] Sequence group e is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
    "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
    "provide more KV cache memory. total_num_cumulative_preemption=5000"
)
STATS = (
    "(EngineCore_DP0 pid=7) INFO 01-15 14:00:00 [loggers.py:123] Engine 000: Avg prompt "
    "throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 900 reqs, "
    "Waiting: 900 reqs, GPU KV cache usage: 100.0%, Prefix cache hit rate: 0.0%"
)
RECEIVED = "(APIServer pid=1) INFO 01-15 14:00:01 [logger.py:49] Received request chatcmpl-"
ADDED = "(APIServer pid=1) INFO 01-15 14:00:01 [async_llm.py:347] Added request chatcmpl-"
FAILED = "(APIServer pid=1) ERROR 01-15 14:00:01 [async_llm.py:480] Request chatcmpl-"
TAIL = ": prompt: 'hi', params: SamplingParams(n=1), prompt_token_ids: [1], lora_request: None."
TQDM = "Processed prompts:  50%|#####     | 1/2 [00:01<00:01, 1.00it/s]\r"

CASES = [
    RECEIVED + "abc\r" + PREEMPTION + TAIL,
    RECEIVED + "abc\r\r" + STATS + TAIL,
    TQDM + RECEIVED + "abc\r" + PREEMPTION + TAIL,
    ADDED + "abc\r" + PREEMPTION + "-1a2b3c4d.",
    FAILED + "abc\r" + STATS + " failed (bad request).",
    "\x1b[32m" + RECEIVED + "abc\x1b[0m\r" + PREEMPTION + TAIL,
]


@pytest.mark.parametrize("line", CASES)
def test_a_carriage_return_in_a_request_id_starts_no_record(line: str) -> None:
    frames = parse_lines([line], source="r", deployment="r", options=OPTIONS)
    assert frames["preemption_warning"].height == 0
    assert frames["scheduler_stats"].height == 0
    acc = frames.accounting
    assert (acc.lines, acc.parsed_lines + acc.unrecognized_lines + acc.blank_lines) == (1, 1)


@pytest.mark.parametrize("line", CASES)
def test_routed_and_per_line_read_it_alike(monkeypatch: pytest.MonkeyPatch, line: str) -> None:
    assert _frames([line]) == _all_per_line(monkeypatch, [line])


def test_a_tqdm_redraw_before_a_record_is_still_read() -> None:
    """The record after tqdm's last redraw is the line, as before (the rule is only for the
    text behind a request line's header)."""
    frames = parse_lines([TQDM + PREEMPTION], source="r", deployment="r", options=OPTIONS)
    assert frames["preemption_warning"]["cumulative"].to_list() == [5000]
    frames = parse_lines([TQDM + STATS], source="r", deployment="r", options=OPTIONS)
    assert frames["scheduler_stats"]["running"].to_list() == [900]


# V1 with --enable-log-requests --enable-log-outputs, as v0.14+ logs a client's id: `Added`
# with the engine's `-<8 random chars>` suffix (folded onto the `Received` id).
_HEAD = "(APIServer pid=1) INFO 01-15 14:00:{second:02d} [{file}] "


def _story(rid: str, received: int, added: int, generated: int) -> list[tuple[int, str]]:
    return [
        (
            received,
            _HEAD.format(second=received, file="logger.py:49")
            + f"Received request {rid}: params: SamplingParams(n=1), lora_request: None.",
        ),
        (
            added,
            _HEAD.format(second=added, file="async_llm.py:347") + f"Added request {rid}-1a2b3c4d.",
        ),
        (
            generated,
            _HEAD.format(second=generated, file="logger.py:71")
            + f"Generated response {rid}: output: 'Paris', finish_reason: stop",
        ),
    ]


def _log(first: str, second: str) -> list[str]:
    # Two requests, interleaved, each received a second before it is added: its latency runs
    # from `Received` (5 s and 7 s), from `Added` it would be 4 s and 6 s.
    events = _story(first, 0, 1, 5) + _story(second, 2, 3, 9)
    return [line for _, line in sorted(events, key=lambda event: event[0])]


ID_PAIRS = [
    ("chatcmpl-req.1", "chatcmpl-req.2"),  # X-Request-Id `req.1` behind vLLM's prefix
    ("req.1", "req.2"),
    ("tenant:7", "tenant:8"),
    ("r.", "r.."),  # a client's trailing dots
    ("a,b", "a,c"),  # a comma: one id (only an abort lists ids)
]


@pytest.mark.parametrize(("first", "second"), ID_PAIRS)
def test_client_ids_give_one_latency_per_request(tmp_path: Path, first: str, second: str) -> None:
    lines = _log(first, second)
    frames = parse_lines(lines, source="r", deployment="r", options=OPTIONS)
    received = frames["requests"].filter(pl.col("event") == "received")
    assert received["request_id"].to_list() == [first, second]
    latencies = latencies_from_requests(frames["requests"])
    assert latencies["request_id"].to_list() == [first, second]
    assert latencies["e2e"].to_list() == [5.0, 7.0]
    # The report's path: the streaming join of ingest/reduce.py.
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n")
    (reduced,) = reduce_paths([str(path)], deployment="d", options=OPTIONS)
    assert log_latencies([reduced])["e2e"].to_list() == [5.0, 7.0]
    assert log_arrivals([reduced]).len() == 2
    assert _frames(lines) == _read_per_line(lines)


def test_dotted_and_colon_ids_are_read_column_wise(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that sends dotted or colon ids does not send every request line to the per-line
    path (a log of dotted ids cost 4x a log of plain ones)."""
    per_line: list[str] = []
    parse_odd_lines = _lines.parse_odd_lines

    def spy(
        items: list[tuple[int, str, str | None]], settled: Collection[int] = ()
    ) -> _lines.Parsed:
        per_line.extend(text for _, text, _ in items)
        return parse_odd_lines(items, settled)

    monkeypatch.setattr(_lines, "parse_odd_lines", spy)
    lines = _log("chatcmpl-req.1", "req.2") + _log("tenant:7", "urn:uuid:1.2")
    frames = parse_lines(lines, source="r", deployment="r")
    assert frames["requests"].height == 12
    assert per_line == []


def test_an_abort_lists_ids_and_no_other_line_does() -> None:
    lines = [
        _HEAD.format(second=0, file="logger.py:49") + "Received request a,b: params: x.",
        _HEAD.format(second=0, file="logger.py:49") + "Received request c: params: x.",
        _HEAD.format(second=0, file="logger.py:49") + "Received request d.: params: x.",
        _HEAD.format(second=4, file="async_llm.py:445") + "Aborted request(s) c,d..",
        _HEAD.format(second=6, file="logger.py:71") + "Generated response a,b: output: 'x'",
    ]
    frames = parse_lines(lines, source="r", deployment="r", options=OPTIONS)
    latencies = latencies_from_requests(frames["requests"])
    got = dict(zip(latencies["request_id"], latencies["e2e"], strict=True))
    assert got == {"a,b": 6.0, "c": 4.0, "d.": 4.0}
    assert latencies.filter(pl.col("request_id") == "c")["success"].to_list() == [False]


# Request lines of every row with the ids a client may send: dots, colons, commas, blanks of
# every kind, a delimiter's look-alikes, long ones; and the texts the rows' ends may meet.
_CLIENT_ID = st.one_of(
    st.text(alphabet="ab.:,-_ \t\u00a0\x1cé", max_size=10),
    st.integers(150, 230).map(lambda n: "i" * n),  # around the 200-character head
)
_LEADS = [
    "Received request ",
    "Added request ",
    "Finished request ",
    "Aborted request ",
    "Aborted request(s) ",
    "Generated response ",
    "Request ",
]
_ENDS = [
    ": prompt: 'x', params: SamplingParams(n=1).",
    ": params: x",
    ":",
    ".",
    "..",
    "",
    " (streaming delta): output: 'a'",
    " (streaming complete): output: 'a'",
    ": output: 'a (streaming delta):'",
    " aborted.",
    " failed (engine dead).",
    ",b.",
    "\t.",
    "\u00a0x",
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(st.sampled_from(_LEADS), _CLIENT_ID, st.sampled_from(_ENDS)).map(
            lambda parts: _HEAD.format(second=0, file="logger.py:49") + "".join(parts)
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_client_id_reads_alike_routed_and_per_line(lines: list[str]) -> None:
    assert _frames(lines) == _read_per_line(lines)
