"""The scheduler stats lines: their rows and the fields a stats record is read by.

Owns the patterns of the periodic `Avg prompt throughput: ...` record (V0, V1, v0.1) and of
each of its fields; never code that applies them (the router and `_classify.py` do).
"""

from __future__ import annotations

from preemptscope.ingest.catalogue_row import LineFormat

STATS_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "v0_stats",
        "scheduler_stats",
        "Avg prompt throughput: ",
        r"Avg prompt throughput: [0-9.]+ tokens/s, [^\n]*?Pending: [0-9]+ reqs",
        "v0.1.3 – v0.10.2 (V0; DEBUG when idle from v0.6.5; trailing '.' from v0.4.3)",
        "INFO 01-23 06:33:37 metrics.py:396] Avg prompt throughput: 0.0 tokens/s, Avg generation"
        " throughput: 16.7 tokens/s, Running: 16 reqs, Swapped: 0 reqs, Pending: 0 reqs,"
        " GPU KV cache"
        " usage: 92.1%, CPU KV cache usage: 0.0%.",
        constants={"era": "v0"},
    ),
    LineFormat(
        "v1_stats",
        "scheduler_stats",
        "Avg prompt throughput: ",
        r"(?:Engine [0-9]+: |[0-9]+ Engines Aggregated: )?Avg prompt throughput: [0-9.]+ tokens/s,"
        r" [^\n]*?Waiting: [0-9]+ reqs",
        "v0.7.1 – v0.33.0 (V1; `Engine NNN: ` from v0.8.3; fields assembled at run time v0.11.1+)",
        "(APIServer pid=3646) INFO 05-19 10:13:11 [loggers.py:271] Engine 000: Avg prompt"
        " throughput:"
        " 0.0 tokens/s, Avg generation throughput: 1055.3 tokens/s, Running: 18 reqs, Waiting: 43"
        " reqs, GPU KV cache usage: 95.9%, Prefix cache hit rate: 0.0%",
        constants={"era": "v1"},
    ),
    LineFormat(
        "v0_1_stats",
        "scheduler_stats",
        "Throughput: ",
        r"Throughput: [0-9.]+ tokens/s, Running: [0-9]+ reqs, Swapped: [0-9]+ reqs,"
        r" Pending: [0-9]+ reqs",
        "v0.1.0 – v0.1.2 (scheduler.py)",
        "INFO 06-20 10:00:00 scheduler.py:210] Throughput: 312.5 tokens/s, Running: 8 reqs,"
        " Swapped: 0 reqs, Pending: 2 reqs, GPU KV cache usage: 41.2%, CPU KV cache usage: 0.0%",
        constants={"era": "v0"},
    ),
)

# The fields of a stats record as (column, pattern with one group), each found on its own so an
# unknown field never breaks a record; whatever no pattern matches stays in `extra`. Numbers are
# ASCII digits, as vLLM prints them.
# FIELD_START: a field without a literal of its own starts at the message's start or after a
# blank or comma. It is consumed, not a lookbehind (Rust regex has none), and it is a small
# class so both engines skip ahead to the field's literal: linear time, no `\b`.
FIELD_START = r"(?:^|[\s,])"
STATS_FIELDS: tuple[tuple[str, str], ...] = (
    ("engine", r"Engine ([0-9]+): "),
    ("engines_aggregated", FIELD_START + r"([0-9]+) Engines Aggregated: "),
    ("prompt_throughput", r"Avg prompt throughput: ([0-9.]+) tokens/s"),
    ("generation_throughput", r"Avg generation throughput: ([0-9.]+) tokens/s"),
    ("throughput_v01", r"^Throughput: ([0-9.]+) tokens/s"),
    ("running", r"Running: ([0-9]+) reqs"),
    ("waiting", r"(?:Waiting|Pending): ([0-9]+) reqs"),
    ("pending_marker", r"(Pending): [0-9]+ reqs"),
    ("swapped", r"Swapped: ([0-9]+) reqs"),
    ("deferred", r"Deferred: ([0-9]+) reqs"),
    ("preemptions", r"Preemptions: ([0-9]+)"),
    ("kv_device", FIELD_START + r"([A-Z][A-Za-z]*(?: \+ host)?) KV cache usage: [0-9.]+%"),
    ("gpu_kv_cache_usage", FIELD_START + r"[A-Z][A-Za-z]*(?: \+ host)? KV cache usage: ([0-9.]+)%"),
    ("cpu_kv_cache_usage", r"%,? CPU KV cache usage: ([0-9.]+)%"),
    ("prefix_cache_hit_rate", r"Prefix cache hit rate: ([0-9.]+)%"),
    ("external_prefix_cache_hit_rate", r"External prefix cache hit rate: ([0-9.]+)%"),
    ("mm_cache_hit_rate", r"MM cache hit rate: ([0-9.]+)%"),
)
# The numeric stats columns, by type: a field whose text does not fit makes its line
# unrecognised (both the column-wise and the per-line path check these).
STATS_INT_FIELDS = ("engine", "running", "waiting", "swapped", "deferred", "preemptions")
STATS_FLOAT_FIELDS = (
    "prompt_throughput",
    "generation_throughput",
    "throughput_v01",
    "gpu_kv_cache_usage",
    "cpu_kv_cache_usage",
    "prefix_cache_hit_rate",
    "external_prefix_cache_hit_rate",
    "mm_cache_hit_rate",
)
# Whole known fields, removed to leave the unknown ones as `extra`. The blank or comma a
# FIELD_START takes goes with its field (the clean-up of `extra` removes it anyway).
STATS_KNOWN_FIELDS = (
    rf"Engine [0-9]+: |{FIELD_START}[0-9]+ Engines Aggregated: "
    r"|Avg (?:prompt|generation) throughput: [0-9.]+ tokens/s"
    r"|^Throughput: [0-9.]+ tokens/s|(?:Running|Waiting|Pending|Swapped|Deferred): [0-9]+ reqs"
    rf"|Preemptions: [0-9]+|{FIELD_START}[A-Z][A-Za-z]*(?: \+ host)? KV cache usage: [0-9.]+%"
    r"|(?:External p|P)refix cache hit rate: [0-9.]+%|MM cache hit rate: [0-9.]+%"
)
STATS_RECORD_START = r"(?:Engine [0-9]+: |[0-9]+ Engines Aggregated: )?Avg prompt throughput: "
