"""A request's id is a client's text: a carriage return in it starts no record.

vLLM (v0.6.5+) takes a request's id from the chat body's `request_id` (or `X-Request-Id`) and
logs it with `%s`, as it is: a JSON string can hold `\\r`. Read as a tqdm redraw, the text
behind that `\\r` became the line's record (a forged preemption with its counter).
"""

from __future__ import annotations

import pytest
from preemptscope.ingest.logs import ParseOptions, parse_lines

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
