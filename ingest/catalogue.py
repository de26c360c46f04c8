"""The one declarative catalogue of vLLM log formats, read by the routers as `cat.X`.

Every line kind preemptscope understands is a `LineFormat` row (`catalogue_row.py`): which
frame it feeds, a cheap literal that every such line contains (the vectorised prefilter), the
message pattern (named groups become columns), the vLLM releases that print it and a real or
constructed example line. The patterns are written in the common subset of Rust `regex`
(Polars) and Python `regex`, so the fast vectorised path and the slow path for damaged lines
share them.

The rows live in one table per frame: the V0 preemption warning here, the others in
`catalogue_stats.py`, `catalogue_kv.py`, `catalogue_config.py` and `catalogue_requests.py`;
plain program output and Ray's repeat suffix in `catalogue_plain.py`; what surrounds a
message in `envelopes.py`. All are re-exported here. Patterns only, never code that applies
them.

Adding a vLLM version means adding a row to its table and a fixture under tests/fixtures/logs/.
Sources: docs/frames.md and the version-by-version reference the project was built from.
"""

from __future__ import annotations

from preemptscope.ingest.catalogue_config import CONFIG_KEYS, CONFIG_ROWS
from preemptscope.ingest.catalogue_kv import KV_ROWS
from preemptscope.ingest.catalogue_plain import (
    PLAIN_LINES,
    RAY_REPEAT,
    RAY_REPEAT_LITERAL,
    RAY_REPEAT_MAX,
    TRACEBACK_FRAME,
)
from preemptscope.ingest.catalogue_requests import (
    ACCESS_REQUEST,
    ACCESS_ROW,
    REQUEST_LITERALS,
    REQUEST_ROWS,
)
from preemptscope.ingest.catalogue_row import LineFormat
from preemptscope.ingest.catalogue_stats import (
    FIELD_START,
    STATS_FIELDS,
    STATS_FLOAT_FIELDS,
    STATS_INT_FIELDS,
    STATS_KNOWN_FIELDS,
    STATS_RECORD_START,
    STATS_ROWS,
)
from preemptscope.ingest.envelopes import (
    ANSI,
    ANSI_ESC,
    ANSI_SGR,
    ANSI_SGR_CORE,
    COMPOSE,
    ELIDED_ENVELOPE,
    ENVELOPE,
    FOREIGN_ENVELOPES,
    HEADER,
    HEADER_CORE,
    LEADING_WRAPPER_TS,
    LEVELS,
    LOCATION,
    PROCESS,
    RANK,
    SPACES,
    SYSLOG,
    TAG,
    TIMESTAMP,
    UVICORN_LEVEL,
    WRAPPER_TIME,
    WRAPPER_TS,
    Envelope,
    no_groups,
)

# Every table and the envelope patterns, re-exported: every router reads them as `cat.X`.
__all__ = [
    "ACCESS_REQUEST",
    "ACCESS_ROW",
    "ALL_ROWS",
    "ANSI",
    "ANSI_ESC",
    "ANSI_SGR",
    "ANSI_SGR_CORE",
    "COMPOSE",
    "CONFIG_KEYS",
    "CONFIG_ROWS",
    "ELIDED_ENVELOPE",
    "ENVELOPE",
    "FIELD_START",
    "FOREIGN_ENVELOPES",
    "HEADER",
    "HEADER_CORE",
    "KV_ROWS",
    "LEADING_WRAPPER_TS",
    "LEVELS",
    "LOCATION",
    "PLAIN_LINES",
    "PREEMPTION_ROWS",
    "PROCESS",
    "PYTHON_ROWS",
    "RANK",
    "RAY_REPEAT",
    "RAY_REPEAT_LITERAL",
    "RAY_REPEAT_MAX",
    "REQUEST_LITERALS",
    "REQUEST_ROWS",
    "SPACES",
    "STATS_FIELDS",
    "STATS_FLOAT_FIELDS",
    "STATS_INT_FIELDS",
    "STATS_KNOWN_FIELDS",
    "STATS_RECORD_START",
    "STATS_ROWS",
    "SYSLOG",
    "TAG",
    "TIMESTAMP",
    "TRACEBACK_FRAME",
    "UVICORN_LEVEL",
    "WRAPPER_TIME",
    "WRAPPER_TS",
    "Envelope",
    "LineFormat",
    "no_groups",
]


# --------------------------------------------------------------------------------------------
# The V0 preemption warning (the other tables are imported above)
# --------------------------------------------------------------------------------------------


PREEMPTION_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "v0_preemption_warning",
        "preemption_warning",
        "is preempted by ",
        r"Sequence group (?P<request_id>\S+) is preempted by (?:PreemptionMode\.)?"
        r"(?P<mode>RECOMPUTE|SWAP)\b(?:[^\n]*?total_(?:num_)?cumulative_preemption(?:_cnt)?="
        r"(?P<cumulative>\d+))?",
        "v0.4.3 – v0.10.2 (V0 engine; every 50th preemption)",
        "WARNING 10-10 20:41:04 scheduler.py:1491] Sequence group"
        " chat-939561076e37472e9902d0cd38511301"
        " is preempted by PreemptionMode.RECOMPUTE mode because there is not enough KV cache space."
        " This can affect the end-to-end performance. Increase gpu_memory_utilization or"
        " tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption=1",
    ),
)

# Kinds whose messages go through the per-line path (rare lines, rich payloads).
PYTHON_ROWS: tuple[LineFormat, ...] = PREEMPTION_ROWS + KV_ROWS + CONFIG_ROWS
ALL_ROWS: tuple[LineFormat, ...] = (
    PREEMPTION_ROWS + STATS_ROWS + KV_ROWS + CONFIG_ROWS + REQUEST_ROWS + (ACCESS_ROW,)
)
