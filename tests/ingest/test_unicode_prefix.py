"""Non-ASCII text before the vLLM header must not shift the header's fields.

Polars' str.find gives byte offsets while str.slice counts characters; these lines keep the
vectorised path honest about that (checked in one small batch and in a large one, which take
different code paths).
"""

from __future__ import annotations

import pytest
from preemptscope.ingest.logs import ParseOptions, parse_lines

STATS = (
    "INFO 05-09 00:49:{sec:02d} [loggers.py:116] Engine 000: Avg prompt throughput: 1.0 tokens/s, "
    "Avg generation throughput: 2.0 tokens/s, Running: {run} reqs, Waiting: {wait} reqs, "
    "GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.0%"
)
LINES = [
    "vllm-é-1  | " + STATS.format(sec=33, run=3, wait=4, kv=50.0),
    "(Wörker pid=1) " + STATS.format(sec=34, run=5, wait=6, kv=60.0),
    "ünïcode ✓ prefix " + STATS.format(sec=35, run=7, wait=8, kv=70.0),
]


@pytest.mark.parametrize("copies", [1, 700])
def test_non_ascii_before_the_header(copies: int) -> None:
    frames = parse_lines(
        LINES * copies, source="x.log", deployment="x", options=ParseOptions(year=2026)
    )
    assert frames.accounting.check()
    assert frames.accounting.unrecognized_lines == 0
    stats = frames["scheduler_stats"].head(3)
    assert stats["running"].to_list() == [3, 5, 7]
    assert stats["waiting"].to_list() == [4, 6, 8]
    assert stats["gpu_kv_cache_usage"].to_list() == pytest.approx([0.5, 0.6, 0.7])
    assert stats["level"].to_list() == ["INFO"] * 3
    assert [t.second for t in stats["timestamp"].to_list()] == [33, 34, 35]
    assert stats["process"].to_list()[1] == "Wörker"


OTHER_KINDS = [
    "ünïcödé ✓✓ INFO 05-09 00:49:33 [core.py:61] some other message here",
    'sérvice-1  | (APIServer pid=1) INFO:     172.18.0.1:59468 - "POST /v1/chat/completions '
    'HTTP/1.1" 200 OK',
    "sérvice-1  | (APIServer pid=1) INFO 05-09 00:49:35 [logger.py:40] Received request "
    "chatcmpl-b87a: prompt: 'héllo', params: SamplingParams(n=1)",
]


@pytest.mark.parametrize("copies", [1, 700])
def test_non_ascii_before_other_access_and_request_lines(copies: int) -> None:
    frames = parse_lines(
        OTHER_KINDS * copies, source="x.log", deployment="x", options=ParseOptions(year=2026)
    )
    assert frames.accounting.unrecognized_lines == 0
    other = frames["other"].row(0, named=True)
    assert (other["level"], other["logger_file"], other["logger_line"]) == ("INFO", "core.py", 61)
    assert other["message"] == "some other message here"
    assert other["timestamp"] is not None and other["timestamp"].second == 33
    access = frames["access"].row(0, named=True)
    assert (access["client"], access["method"], access["path"], access["status"]) == (
        "172.18.0.1:59468",
        "POST",
        "/v1/chat/completions",
        200,
    )
    request = frames["requests"].row(0, named=True)
    assert (request["event"], request["request_id"]) == ("received", "chatcmpl-b87a")
    assert request["timestamp"] is not None and request["timestamp"].second == 35
