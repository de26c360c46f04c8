"""Request lifecycle log lines into per-request latencies."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from preemptscope.ingest.lifecycle import RequestJoin, latencies_from_requests
from preemptscope.ingest.logs import ParseOptions, parse_lines
from preemptscope.ingest.schema import REQUEST_LATENCIES, REQUESTS

T = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _events(rows: list[tuple[float | None, str, str]], deployment: str = "d") -> pl.DataFrame:
    """(seconds after T or None, event, request_id) rows as a `requests` frame."""
    return pl.DataFrame(
        {
            "source": ["x.log"] * len(rows),
            "line": list(range(1, len(rows) + 1)),
            "deployment": [deployment] * len(rows),
            "process": [None] * len(rows),
            "pid": [None] * len(rows),
            "level": ["INFO"] * len(rows),
            "timestamp": [None if t is None else T + timedelta(seconds=t) for t, _, _ in rows],
            "event": [event for _, event, _ in rows],
            "request_id": [rid for _, _, rid in rows],
        },
        schema=REQUESTS,
    )


def _by_id(frame: pl.DataFrame) -> dict[str, dict[str, object]]:
    return {row["request_id"]: row for row in frame.iter_rows(named=True)}


def test_v0_received_to_finished() -> None:
    frame = latencies_from_requests(
        _events(
            [
                (0, "received", "cmpl-1"),
                (1, "added", "cmpl-1"),
                (2, "received", "cmpl-2"),
                (3, "finished", "cmpl-1"),
                (9, "finished", "cmpl-2"),
                (10, "added", "cmpl-3"),  # still running at the end of the log: no row
            ]
        )
    )
    assert frame.schema == REQUEST_LATENCIES
    rows = _by_id(frame)
    assert set(rows) == {"cmpl-1", "cmpl-2"}
    assert rows["cmpl-1"]["e2e"] == 3.0 and rows["cmpl-1"]["start"] == T
    assert rows["cmpl-2"]["e2e"] == 7.0
    assert all(row["success"] and row["origin"] == "log_lifecycle" for row in rows.values())
    assert rows["cmpl-1"]["ttft"] is None


def test_v1_generated_response_is_the_end_and_deltas_are_progress() -> None:
    frame = latencies_from_requests(
        _events(
            [
                (0, "received", "chatcmpl-a"),
                (0, "added", "chatcmpl-a-b8cfa283"),  # 0.14+: internal id with random suffix
                (2, "delta", "chatcmpl-a"),  # streaming delta
                (5, "generated", "chatcmpl-a"),  # streaming complete
                (7, "delta", "chatcmpl-a"),  # nothing after the end changes it
                (0, "received", "chatcmpl-b"),
                (3, "delta", "chatcmpl-b"),  # a stream cut off: its last delta
                (4, "delta", "chatcmpl-b"),
            ]
        )
    )
    rows = _by_id(frame)
    assert rows["chatcmpl-a"]["e2e"] == 5.0 and rows["chatcmpl-a"]["success"]
    assert rows["chatcmpl-b"]["e2e"] == 4.0 and rows["chatcmpl-b"]["success"]


_STREAMED = [
    "(APIServer pid=1) INFO 11-07 08:50:24 [logger.py:40] Received request chatcmpl-s: params:"
    " SamplingParams(n=1), lora_request: None.",
    "(APIServer pid=1) INFO 11-07 08:50:25 [logger.py:71] Generated response chatcmpl-s"
    " (streaming delta): output: 'Generated response chatcmpl-s (streaming complete): x',"
    " finish_reason: None",
    "(APIServer pid=1) INFO 11-07 08:50:29 [logger.py:71] Generated response chatcmpl-s"
    " (streaming delta): output: 'b', finish_reason: None",
    "(APIServer pid=1) INFO 11-07 08:50:31 [logger.py:71] Generated response chatcmpl-s"
    " (streaming complete): output: 'ab', finish_reason: stop",
]


@pytest.mark.parametrize("glued", [False, True])
def test_streamed_response_events_on_both_paths(glued: bool) -> None:
    # Column-wise (one record a line) and per line (the deltas behind a tqdm redraw): the same
    # events, and an output's text never decides which.
    lines = list(_STREAMED)
    if glued:
        bar = "Processed prompts:  50%|#####     | 1/2 [00:01<00:01]\r"
        lines = [lines[0], bar + lines[1], bar + lines[2], lines[3]]
    parsed = parse_lines(lines, source="x.log", deployment="d", options=ParseOptions(year=2026))
    assert parsed["requests"]["event"].to_list() == ["received", "delta", "delta", "generated"]
    (row,) = latencies_from_requests(parsed["requests"]).iter_rows(named=True)
    assert row["e2e"] == pytest.approx(7.0)
    join = RequestJoin()
    _, joined = join.add(parsed["requests"])
    assert joined["e2e"].to_list() == [pytest.approx(7.0)] and join.open_requests == 0


def test_completion_index_and_suffix_fold_onto_received_id() -> None:
    frame = latencies_from_requests(
        _events(
            [
                (0, "received", "cmpl-x"),
                (1, "added", "cmpl-x-0-1a2b3c4d"),
                (4, "failed", "cmpl-x-0-1a2b3c4d"),
            ]
        )
    )
    (row,) = frame.iter_rows(named=True)
    assert row["request_id"] == "cmpl-x" and row["e2e"] == 4.0 and row["success"] is False


def test_aborted_list_and_missing_timestamps() -> None:
    frame = latencies_from_requests(
        _events(
            [
                (0, "added", "a"),
                (1, "added", "b"),
                (None, "added", "c"),  # no time of its own: cannot be placed
                (3, "aborted", "a,b"),
                (4, "aborted", "c"),
            ]
        )
    )
    rows = _by_id(frame)
    assert set(rows) == {"a", "b"}
    assert rows["a"]["e2e"] == 3.0 and rows["b"]["e2e"] == 2.0
    assert rows["a"]["success"] is False


def test_reused_ids_become_separate_requests() -> None:
    frame = latencies_from_requests(
        _events(
            [(0, "added", "0"), (2, "finished", "0"), (10, "added", "0"), (11, "finished", "0")]
        )
    )
    assert frame["e2e"].to_list() == [2.0, 1.0]
    assert frame["start"].to_list() == [T, T + timedelta(seconds=10)]


def test_end_without_start_and_deployments_kept_apart() -> None:
    frames = pl.concat(
        [
            _events([(0, "finished", "q")], deployment="a"),
            _events([(0, "added", "q")], deployment="b"),
        ]
    )
    assert latencies_from_requests(frames).is_empty()


def test_empty_frame() -> None:
    assert latencies_from_requests(_events([])).schema == REQUEST_LATENCIES


def test_from_real_log_lines() -> None:
    lines = [
        "INFO 04-11 19:21:40 async_llm_engine.py:379] Received request cmpl-81abe7cfa0cc42a696c703"
        "368ba37734: prompt: 'hi', sampling_params: SamplingParams(n=1), prompt_token_ids: [1, 2],"
        " lora_request: None.",
        "INFO 04-11 19:21:43 async_llm_engine.py:120] Finished request cmpl-81abe7cfa0cc42a696c703"
        "368ba37734.",
        'INFO:     ::1:36100 - "POST /v1/completions HTTP/1.1" 200 OK',
        "(APIServer pid=1) INFO 11-07 08:50:24 [logger.py:40] Received request cmpl-4d1abf620f01"
        "dad2f8fd2946e6d0ee3a: params: SamplingParams(n=1), lora_request: None.",
        "(APIServer pid=1) INFO 11-07 08:50:24 [async_llm.py:316] Added request cmpl-4d1abf620f01"
        "dad2f8fd2946e6d0ee3a-0-b8cfa283.",
        "(APIServer pid=1) INFO 11-07 08:50:35 [logger.py:71] Generated response cmpl-4d1abf620f01"
        "dad2f8fd2946e6d0ee3a (streaming complete): output: 'ab', output_token_ids: [3, 4], "
        "finish_reason: stop",
        "(APIServer pid=1) INFO 11-07 08:51:00 [async_llm.py:316] Added request chatcmpl-a.",
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:445] Aborted request(s) chatcmpl-a.",
    ]
    parsed = parse_lines(lines, source="x.log", deployment="d", options=ParseOptions(year=2026))
    rows = _by_id(latencies_from_requests(parsed["requests"]))
    assert rows["cmpl-81abe7cfa0cc42a696c703368ba37734"]["e2e"] == pytest.approx(3.0)
    assert rows["cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a"]["e2e"] == pytest.approx(11.0)
    assert rows["chatcmpl-a"]["success"] is False


FIXTURES = Path(__file__).parent.parent / "fixtures"


def _parse(path: Path) -> pl.DataFrame:
    lines = path.read_text().splitlines()
    frames = parse_lines(lines, source=str(path), deployment="d", options=ParseOptions(year=2024))
    return latencies_from_requests(frames["requests"])


def test_real_excerpt_with_both_ends() -> None:
    frame = _parse(FIXTURES / "logs" / "v0_2x_llm_engine.log")
    (row,) = frame.iter_rows(named=True)
    assert row["request_id"] == "cmpl-45f7aa" and row["e2e"] == 5.0 and row["success"]


@pytest.mark.parametrize(
    "name",
    [
        "052-v030-stats-with-extra-iteration-time-fields-finished-request.log",  # ends only
        "070-v063dev173-priority-preemption-then-crash.log",  # starts only (MQLLMEngine)
    ],
)
def test_real_excerpts_with_one_end_give_no_rows(name: str) -> None:
    assert _parse(FIXTURES / "corpus" / name).is_empty()
