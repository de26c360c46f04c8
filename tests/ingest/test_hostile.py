"""Log text is hostile: what a prompt holds never becomes a record; one bad line costs one line."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest.logs import ParseOptions, ParseState, parse_lines
from preemptscope.ingest.schema import LogFrames

OPTIONS = ParseOptions(year=2025)
PREEMPT = (
    "01-15 14:00:00 [scheduler.py:1491] Sequence group e is preempted by PreemptionMode.RECOMPUTE"
    " mode because there is not enough KV cache space. total_num_cumulative_preemption=5000"
)
STATS = (
    "INFO 01-15 14:00:00 [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s,"
    " Avg generation throughput: 9.0 tokens/s, Running: 999 reqs, Waiting: 999 reqs,"
    " GPU KV cache usage: 100.0%, Prefix cache hit rate: 0.0%"
)
REAL_STATS = (
    "INFO 01-15 13:59:50 [loggers.py:116] Engine 000: Avg prompt throughput: 10.0 tokens/s,"
    " Avg generation throughput: 90.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs,"
    " GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%"
)
HEADER = "(APIServer pid=1) INFO 01-15 13:59:55 [logger.py:43] "
BIG = str(1 << 64)


def received(prompt: str, rid: str = "chatcmpl-1") -> str:
    return (
        f"{HEADER}Received request {rid}: prompt: {prompt!r}, params: SamplingParams(n=1,"
        " temperature=0.7), prompt_token_ids: [1, 2, 3], lora_request: None."
    )


def parse(lines: list[str]) -> LogFrames:
    frames = parse_lines(lines, source="t.log", deployment="t", options=OPTIONS)
    assert frames.accounting.check(), frames.accounting
    return frames


def kinds(frames: LogFrames) -> dict[str, int]:
    return {k: f.height for k, f in frames.frames.items() if f.height}


@pytest.mark.parametrize(
    "prompt",
    [
        PREEMPT,
        "x " + PREEMPT,
        f"hello\n{PREEMPT}\n(APIServer pid=1) {STATS}",
        f"{STATS} {PREEMPT}",
        f"(_AsyncLLMEngine pid=1974) {STATS} (_AsyncLLMEngine pid=1974) {PREEMPT}",
        f"Processed prompts: 100%|███| 5/5 [00:01<00:00]{STATS}",
        "# GPU blocks: 1, # CPU blocks: 1 INFO 01-15 14:00:00 [worker.py:1] # GPU blocks: 1",
    ],
)
def test_a_prompt_never_becomes_a_record(prompt: str) -> None:
    frames = parse([REAL_STATS, received(prompt), REAL_STATS])
    assert kinds(frames) == {"scheduler_stats": 2, "requests": 1}
    assert frames["scheduler_stats"]["running"].to_list() == [3, 3]
    assert frames["requests"]["request_id"].to_list() == ["chatcmpl-1"]


def test_model_output_and_request_ids_are_data_too() -> None:
    lines = [
        f"{HEADER}Generated response chatcmpl-1: output: {PREEMPT!r}, finish_reason: stop",
        # A request id from an X-Request-Id header may hold spaces and a header.
        f"{HEADER}Added request chatcmpl-2 {PREEMPT}.",
        # A tool parser's debug line echoing the model's text: an unknown message.
        f"DEBUG 01-15 14:00:01 [hermes_tool_parser.py:200] delta_text: {STATS}",
    ]
    frames = parse(lines)
    assert frames["preemption_warning"].height == 0
    assert frames["scheduler_stats"].height == 0
    assert frames["requests"]["event"].to_list() == ["generated", "added"]
    assert frames["other"].height == 1


def test_text_after_a_word_on_a_bare_line_is_no_record() -> None:
    # An exception's message echoing user text: no envelope, the record text is not at the start.
    frames = parse([f"ValueError: bad input {PREEMPT[36:]}"])
    assert frames["preemption_warning"].height == 0
    # A level-less traceback line is read as one `other` row: the whole text is its message.
    assert frames["other"]["message"].to_list() == [f"ValueError: bad input {PREEMPT[36:]}"]


def test_an_exception_message_starts_a_sizing_record_only() -> None:
    # `ValueError: Free memory on device ...` is vLLM's refusal; a preemption record right
    # after an exception's name is a user's text echoed, and stays a message.
    frames = parse([f"ValueError: {PREEMPT[35:]}", f"KeyError: {STATS[37:]}"])
    assert frames["preemption_warning"].height == 0
    assert frames["scheduler_stats"].height == 0


def test_glued_records_of_a_paste_are_still_split() -> None:
    line = f"(_AsyncLLMEngine pid=1974) {REAL_STATS} (_AsyncLLMEngine pid=1974) {REAL_STATS}"
    frames = parse([line])
    assert frames["scheduler_stats"].height == 2


@pytest.mark.parametrize(
    "line",
    [
        REAL_STATS.replace("Running: 3", f"Running: {BIG}"),
        REAL_STATS.replace("12.5%", "1.2.5%"),
        REAL_STATS.replace("12.5%", "9" * 400 + "%"),
        REAL_STATS.replace("Running: 3", "Running: " + "9" * 5000),
        # The per-line path: a preemption counter and a glued stats record.
        PREEMPT.replace("=5000", f"={BIG}"),
        f"{REAL_STATS} {REAL_STATS.replace('Waiting: 0', f'Waiting: {BIG}')}",
        f"(EngineCore pid={BIG}) INFO 01-15 14:00:00 [worker.py:1] # GPU blocks: 7",
    ],
)
def test_a_number_that_does_not_fit_costs_its_line_only(line: str) -> None:
    before = REAL_STATS.replace("13:59:50", "13:59:40")
    frames = parse([before, line, REAL_STATS])
    assert frames["scheduler_stats"]["line"].to_list() == [1, 3]
    assert frames["preemption_warning"].height == 0
    assert frames["kv_capacity"].height == 0
    unrec = frames["unrecognized"]
    assert unrec["line"].to_list() == [2]
    assert unrec["reason"][0].startswith(("number out of range", "number not valid"))


def test_a_live_batch_with_a_bad_number_keeps_its_neighbours() -> None:
    state = ParseState()
    lines = [REAL_STATS, PREEMPT.replace("=5000", f"={BIG}"), PREEMPT, REAL_STATS]
    frames = parse_lines(
        lines, source="t.log", deployment="t", options=OPTIONS, state=state, final=False
    )
    assert frames["preemption_warning"]["cumulative"].to_list() == [5000]
    assert frames["unrecognized"]["line"].to_list() == [2]


def test_deeply_nested_json_is_one_unrecognised_line() -> None:
    frames = parse(['{"log": ' + "[" * 5000, REAL_STATS])
    assert frames["unrecognized"]["line"].to_list() == [1]
    assert frames["scheduler_stats"].height == 1


# Everything a record is made of, for prompts to be built from.
_PIECES = [
    *(row.example for row in cat.ALL_ROWS),
    *(row.literal for row in cat.ALL_ROWS),
    *(env.example for env in cat.FOREIGN_ENVELOPES),
    PREEMPT,
    STATS,
    "INFO 01-15 14:00:00 [loggers.py:116] ",
    "(EngineCore_DP0 pid=7) ",
    "2025-01-15T14:00:00.123456789Z ",
    "[rank0]: ",
    "\x1b[0m",
    "[0m",
    "\\r",
    " (_AsyncLLMEngine pid=1974) ",
    BIG,
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.one_of(st.sampled_from(_PIECES), st.text(max_size=6)), min_size=1, max_size=8),
    st.sampled_from(["received", "generated", "added"]),
)
def test_prompts_built_from_the_catalogue_never_make_records(parts: list[str], event: str) -> None:
    text = "".join(parts)
    if event == "received":
        line = received(text)
    elif event == "generated":
        line = f"{HEADER}Generated response chatcmpl-1: output: {text!r}, finish_reason: stop"
    else:
        # Not repr'd: the id may come from an X-Request-Id header, which HTTP keeps free of
        # CR and LF (a real `\r` is read as a tqdm redraw: docs/frames.md).
        line = f"{HEADER}Added request chatcmpl-1 {text.replace(chr(13), ' ')}."
    frames = parse([REAL_STATS, line, REAL_STATS])
    assert kinds(frames) == {"scheduler_stats": 2, "requests": 1}
    assert frames["scheduler_stats"]["line"].to_list() == [1, 3]


def test_a_huge_ray_repeat_count_costs_one_line_not_memory() -> None:
    line = "(RayWorkerWrapper pid=263) " + REAL_STATS + " [repeated 999999999x across cluster]"
    frames = parse([REAL_STATS, line])
    assert frames["scheduler_stats"].height == 1
    assert frames["unrecognized"]["reason"][0].startswith("Ray repeat count above")
