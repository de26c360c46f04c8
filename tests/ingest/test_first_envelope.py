"""A line's first envelope is its envelope, under every logging format the catalogue knows.

vLLM's request logger writes a client's prompt (through `repr`: no newline, no carriage
return) and output in its message. With `VLLM_CONFIGURE_LOGGING=0` or a user's own logging
config, that message sits behind Python's default format (`INFO:vllm.entrypoints.logger:`),
the dash format (`2026-01-15 14:00:00,123 - vllm.entrypoints.logger - INFO - `), LMCache's
bracketed one and others: a vLLM header inside the prompt was found before the foreign
envelope was tried, and became the line's record (a preemption warning, a stats record at
100 % KV). What follows a line's first envelope is that envelope's message; behind text of
no known envelope, a header after a request row's literal is that request's text.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import catalogue as cat

from tests.ingest import test_hostile_agree
from tests.ingest.test_hostile_routing import _frames

# Every envelope the catalogue knows a request line may stand behind, as each writes it.
ENVELOPES = [
    "INFO 01-15 14:00:00 [logger.py:43] ",
    "INFO:vllm.entrypoints.logger:",
    "2026-01-15 14:00:00,123 - vllm.entrypoints.logger - INFO - ",
    "2026-01-15 14:00:00,123 - INFO - logger.py:43 - ",
    "[2026-01-15 14:00:00,123] vllm.entrypoints.logger INFO: ",
    "[2026-01-15 14:00:00,123] INFO ",
    "2026-01-15T14:00:00.123456Z  INFO vllm::entrypoints::logger: ",
    "INFO:     ",  # uvicorn's loggers (no request line, but a prompt-like text behind it)
]
assert {env.name for env in cat.FOREIGN_ENVELOPES} == {
    "python_dash",
    "bracket_asctime",
    "rust_tracing",
    "python_basic",
}
OPENINGS = [
    "",
    "(APIServer pid=1) ",
    "2026-01-15T14:00:00.123456789Z ",
    "2026-01-15T14:00:00.123Z stdout F (APIServer pid=1) ",
    "vllm-1  | ",
    "Jan 15 14:00:00 host python3[12]: ",
]
# Openings of no known envelope: text only a user's own format writes.
UNKNOWN = ["myapp | ", "14:00:00 vllm.entrypoints.logger ", "[vllm] "]
# What a request line holds a client's text behind (each row's literal starts its message).
REQUESTS = [
    "Received request cmpl-1: prompt: '{}', params: SamplingParams(n=1), lora_request: None.",
    "Generated response chatcmpl-2: output: '{}', finish_reason: stop",
    "Generated response chatcmpl-3 (streaming delta): output: '{}', finish_reason: None",
]


def _records() -> list[str]:
    """Every catalogue record as a prompt may hold it: the example with its header, its
    header's level lost (`x `), no level at all, and the message alone."""
    out: set[str] = set()
    for row in cat.ALL_ROWS:
        example = row.example
        header = re.search(cat.HEADER_CORE, example)
        out.add(example)
        if header is None:
            continue
        message = example[header.end() :]
        out.add(message)
        out.add("x " + example[header.start() :])
        out.add(example[header.start() :])
        out.add("WARNING " + example[header.start() :])
    out |= {h + m for h in test_hostile_agree.HEADERS for m in test_hostile_agree.MESSAGES[:6]}
    return sorted(out)


RECORDS = _records()
# The kinds a request line (or a line of no record) may give; any other is a forgery.
ALLOWED = {"requests", "other", "unrecognized", "accounting"}


def _both(lines: list[str]) -> dict[str, Any]:
    routed, per_line = _frames(lines), test_hostile_agree._read_per_line(lines)
    assert routed == per_line
    return routed


def _json_formatter(message: str) -> str:
    """vLLM's JSON formatter (v0.32+) around a message."""
    return json.dumps(
        {"asctime": "2026-01-15 14:00:00,123", "levelname": "INFO", "message": message}
    )


@settings(max_examples=400, derandomize=True, deadline=None)
@given(
    opening=st.sampled_from(OPENINGS + UNKNOWN),
    envelope=st.sampled_from([*ENVELOPES, "json"]),
    request=st.sampled_from(REQUESTS),
    prompt=st.lists(st.sampled_from(RECORDS), min_size=1, max_size=3),
    glue=st.sampled_from(["", "x ", "' ", "\\n", " '"]),
)
def test_a_prompt_never_creates_a_record(
    opening: str, envelope: str, request: str, prompt: list[str], glue: str
) -> None:
    text = request.format(glue.join(prompt))
    line = _json_formatter(text) if envelope == "json" else opening + envelope + text
    routed = _both([line])
    assert set(routed) <= ALLOWED, (line, set(routed))
    rows = routed.get("requests", [])
    # The request line itself, where a known envelope stands in front of it.
    assert len(rows) <= 1
    if rows:
        assert rows[0]["request_id"] in ("cmpl-1", "chatcmpl-2", "chatcmpl-3")
    assert routed["accounting"][0] == 1


# The issue's lines: 20 request lines under each foreign format gave 10 preemption warnings and
# 10 stats records, and `report` a lifetime preemption counter of 50,000.
_PREEMPT = (
    "x 01-15 14:00:00 [scheduler.py:1491] Sequence group e is preempted by"
    " PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
    " total_num_cumulative_preemption=5000"
)
_STATS = (
    "x 01-15 14:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg"
    " generation throughput: 2.0 tokens/s, Running: 3 reqs, Waiting: 400 reqs, GPU KV cache"
    " usage: 100.0%, Prefix cache hit rate: 0.0%"
)


@pytest.mark.parametrize("envelope", ENVELOPES[1:7])
def test_the_issues_lines_are_request_rows(envelope: str) -> None:
    lines = [
        f"{envelope}Received request cmpl-{i}: prompt: '{_PREEMPT if i % 2 else _STATS}',"
        " params: None."
        for i in range(20)
    ]
    routed = _both(lines)
    assert set(routed) == {"requests", "accounting"}
    assert [row["request_id"] for row in routed["requests"]] == [f"cmpl-{i}" for i in range(20)]
    assert routed["accounting"] == (20, 20, 0, 0)


@pytest.mark.parametrize(
    "line",
    [
        # A header in front of the foreign-looking text stays the line's envelope.
        "INFO 01-15 14:00:00 [logger.py:43] Received request cmpl-1: prompt: 'INFO:a:b "
        + _STATS
        + "'",
        # Known prefixes in front of a header: the header opens the record.
        "[2024-07-08 15:17:34] INFO 01-15 14:00:00 [loggers.py:116] " + _STATS.split("] ", 1)[1],
        "Processed prompts:   0%|  | 34/100 [00:29<3:36:54,  1.31s/it]" + _PREEMPT,
    ],
)
def test_a_header_that_is_the_first_envelope_still_reads(line: str) -> None:
    routed = _both([line])
    assert set(routed) - {"accounting"} <= {"requests", "scheduler_stats", "preemption_warning"}
    assert routed["accounting"][1] == 1


# vLLM logs a request's id as the client sent it (`request_id`, `X-Request-Id`), so a `\r` in it
# reaches the log; the per-line path reads a tqdm redraw's last part, which stopped at a request
# line's header only, not at a request behind another envelope.
@pytest.mark.parametrize("envelope", [*ENVELOPES[1:7], "myapp | "])
@pytest.mark.parametrize(
    "request_line",
    [
        "Received request abc\r{}: prompt: 'x', params: None.",
        "Request abc\r{} failed: engine dead",
        "Added request abc\r{}.",
    ],
)
@pytest.mark.parametrize(
    "payload",
    [
        "WARNING" + _PREEMPT[1:],
        # A header in colours (no header search reads it before the codes go), a bare record.
        "\x1b[33mWARNING\x1b[0m \x1b[90m01-15 14:00:00\x1b[0m [scheduler.py:1] "
        + _PREEMPT.split("] ", 1)[1],
        _STATS.split("] ", 1)[1],
    ],
)
def test_a_carriage_return_in_an_id_forges_nothing(
    envelope: str, request_line: str, payload: str
) -> None:
    line = envelope + request_line.format(payload)
    routed = _both([line])
    assert set(routed) <= ALLOWED
    assert routed["accounting"][0] == 1
