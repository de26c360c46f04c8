"""An access line's path is the client's text: a level word in it is not an envelope.

uvicorn logs the request target as the client sent it (the path quoted, the query string
raw), so `GET /v1/models?INFO:a:b` puts Python's `LEVEL:name:msg` shape after the access
logger's `INFO:`. The per-line path read that as the line's envelope (an `other` record with
logger `a`: the access line lost, at ~25x the cost of a normal line, for every request the
client sends). A line's first envelope is its envelope; the router claims these lines
column-wise.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.ingest import _lines

from tests.ingest import test_hostile_agree, test_hostile_routing


def _both(lines: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The frames as routed and with every line read per line (test_hostile_agree)."""
    return test_hostile_routing._frames(lines), test_hostile_agree._read_per_line(lines)


PREFIX = '(APIServer pid=1) INFO:     10.0.1.2:333 - "GET '
QUERIES = [
    "/v1/models?INFO:a:b",
    "/v1/models?WARNING:vllm.core.scheduler:Sequence",
    '/v1/models?x=-"INFO:-"',
    "/INFO:a:b",
    "/v1/models?[2025-01-15T14:00:00Z]ERROR:x:y",
    "/v1/models?2025-01-15T14:00:00Z",
    "/v1/models?q=DEBUG:a:b&r=CRITICAL:c:d",
]


def _line(path: str) -> str:
    return f'{PREFIX}{path} HTTP/1.1" 200 OK'


@pytest.mark.parametrize("path", QUERIES)
def test_a_level_word_in_the_query_stays_in_the_access_row(path: str) -> None:
    routed, per_line = _both([_line(path)])
    assert routed == per_line
    assert set(routed) == {"access", "accounting"}
    (row,) = routed["access"]
    assert (row["client"], row["method"], row["path"], row["status"]) == (
        "10.0.1.2:333",
        "GET",
        path,
        200,
    )
    assert (row["process"], row["pid"]) == ("APIServer", 1)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The lines the router leaves to the per-line path, as they are sent."""
    lines_sent: list[Any] = []
    real = _lines.parse_odd_lines

    def spy(lines: Any, no_record: Any) -> Any:
        lines_sent.extend(lines)
        return real(lines, no_record)

    monkeypatch.setattr(_lines, "parse_odd_lines", spy)
    return lines_sent


def test_such_lines_are_claimed_column_wise(sent: list[Any]) -> None:
    routed: dict[str, Any] = test_hostile_routing._frames([_line(path) for path in QUERIES])
    assert len(routed["access"]) == len(QUERIES)
    assert sent == []


def test_a_foreign_envelope_in_front_of_uvicorns_still_wins() -> None:
    # `[time] INFO:` (LMCache's format) before the access logger's text: the first envelope.
    line = '[2025-01-15 14:00:00,123] INFO:     1.2.3.4:5 - "GET / HTTP/1.1" 200 OK'
    routed, per_line = _both([line])
    assert routed == per_line
    assert "access" not in routed
    assert routed["other"][0]["message"].strip() == '1.2.3.4:5 - "GET / HTTP/1.1" 200 OK'


_PREEMPT = (
    "Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is not"
    " enough KV cache space. total_num_cumulative_preemption=5000"
)
_STATS = (
    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3"
    " reqs, Waiting: 400 reqs, GPU KV cache usage: 100.0%"
)
# uvicorn takes the client from X-Forwarded-For behind a trusted proxy (`--forwarded-allow-ips`,
# `FORWARDED_ALLOW_IPS=*`): the header's last entry, spaces and all, is printed as the client.
CLIENTS = [
    f"x WARNING:vllm:{_PREEMPT}",
    f"INFO 01-15 14:00:00 [scheduler.py:1] {_PREEMPT}",
    f"x INFO 01-15 14:00:00 [loggers.py:1] {_STATS}",
    _STATS,
    f"[2025-01-15 14:00:00,123] WARNING: {_PREEMPT}",
    "INFO 01-15 14:00:00 [logger.py:43] Received request cmpl-1: prompt: 'x', params: None.",
    "x 01-15 14:00:00 [async_llm.py:1] Added request cmpl-2.",
]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_forwarded_client_forges_no_record(client: str) -> None:
    line = f'(APIServer pid=1) INFO:     {client}:0 - "GET /v1/models HTTP/1.1" 200 OK'
    routed, per_line = _both([line])
    assert routed == per_line
    assert set(routed) == {"other", "accounting"}
    assert routed["accounting"] == (1, 1, 0, 0)
    (row,) = routed["other"]
    assert (row["logger_file"], row["process"], row["timestamp"]) == ("uvicorn", "APIServer", None)


@pytest.mark.parametrize(
    "client", ["x WARNING:vllm:y z", "a b c", "[x] INFO: y", "x pid=12345678901234567890 y"]
)
def test_a_forwarded_client_with_level_words_is_read_column_wise(client: str) -> None:
    # uvicorn's level opens the line: nothing in the client can be an envelope before it.
    line = f'(APIServer pid=1) INFO:     {client}:0 - "GET /v1/models HTTP/1.1" 200 OK'
    routed, per_line = _both([line])
    assert routed == per_line
    assert routed["other"][0]["message"] == f'{client}:0 - "GET /v1/models HTTP/1.1" 200 OK'


@pytest.mark.parametrize("client", ["x WARNING:vllm:y z", "a b c", "[x] INFO: y"])
def test_such_clients_are_read_column_wise(client: str, sent: list[Any]) -> None:
    line = f'(APIServer pid=1) INFO:     {client}:0 - "GET /v1/models HTTP/1.1" 200 OK'
    test_hostile_routing._frames([line])
    assert sent == []


# A random mixture found the first: another level word opens the line, an access line is
# glued behind it; the claim read the client after the `INFO:` (an access row) where the
# per-line path reads the first envelope (`other`).
@pytest.mark.parametrize(
    "line",
    [
        'WARNING:  Started server process [1]INFO:     172.18.0.1:59468 - "GET / HTTP/1.1" 200 OK',
        'INFO:  Started server process [1]INFO:     172.18.0.1:59468 - "GET / HTTP/1.1" 200 OK',
        'ERROR:    x WARNING:vllm:y z:0 - "GET /v1/models HTTP/1.1" 200 OK',
    ],
)
def test_a_glued_access_line_behind_another_level_is_its_message(line: str) -> None:
    routed, per_line = _both([line])
    assert routed == per_line
    assert set(routed) == {"other", "accounting"}


_PIECES = [
    *test_hostile_agree.HEADERS,
    *test_hostile_agree.MESSAGES,
    *test_hostile_agree.UVICORN,
    *test_hostile_agree.PREFIXES,
    *["INFO:", "WARNING:vllm:", "x ", ":", "[", "]", "(", ")", " pid=1", '"', ' - "', " HTTP/1.1"],
]
_OPENINGS = [
    "",
    "(APIServer pid=1) ",
    "2025-01-15T14:00:00.123Z ",
    "2025-01-15T14:00:00Z (A pid=7) ",
]


@settings(max_examples=300, derandomize=True, deadline=None)
@given(
    opening=st.sampled_from(_OPENINGS),
    client=st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4),
    query=st.lists(st.sampled_from(_PIECES), max_size=3),
)
def test_client_text_in_an_access_line_is_never_a_record(
    opening: str, client: list[str], query: list[str]
) -> None:
    # The client (X-Forwarded-For) may hold spaces; a query string holds none.
    who = "".join(client).replace("\n", " ").replace("\r", " ").replace("\x1b", "")
    what = "".join(query).replace(" ", "").replace("\n", "").replace("\r", "").replace("\x1b", "")
    line = f'{opening}INFO:     {who}:0 - "GET /v1/models?{what} HTTP/1.1" 200 OK'
    routed, per_line = _both([line])
    assert routed == per_line
    assert set(routed) <= {"access", "other", "accounting"}


# A random search found the first: the per-line path drops a line's closing `\r` and `\n`
# before it reads the envelope, so a level word whose only blank is the line end is none.
@pytest.mark.parametrize(
    "lines", [["INFO:\r"], ["INFO:\n"], ["(APIServer pid=1) INFO:\r"], ["INFO:\r", "x"]]
)
def test_a_level_word_before_the_line_end_is_no_envelope(lines: list[str]) -> None:
    routed, per_line = _both(lines)
    assert routed == per_line
