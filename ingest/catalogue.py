"""The one declarative catalogue of vLLM log formats.

Every line kind preemptscope understands is a `LineFormat` row: which frame it feeds, a cheap
literal that every such line contains (the vectorised prefilter), the message pattern (named
groups become columns), the vLLM releases that print it and a real or constructed example line.
The patterns are written in the common subset of Rust `regex` (Polars) and Python `regex`, so
the fast vectorised path and the slow path for damaged lines share them.

What surrounds a message (prefixes, vLLM's header, foreign logging formats, ANSI) is in
`envelopes.py`, re-exported here: routers read the whole catalogue as `cat.X`. This module
holds patterns only, never code that applies them.

Adding a vLLM version means adding a row here and a fixture under tests/fixtures/logs/.
Sources: docs/frames.md and the version-by-version reference the project was built from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

# The envelope patterns live in envelopes.py; every router reads both halves as `cat.X`.
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
# Line kinds
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LineFormat:
    """One row of the catalogue: a message format and where its values go."""

    name: str
    kind: str  # frame kind (see ingest/schema.py FRAME_SCHEMAS)
    literal: str  # substring every such message contains: the vectorised prefilter
    pattern: str  # matched at the start of the message; named groups feed columns
    versions: str  # vLLM releases that print it
    example: str  # a real (or constructed, said so in docs) line, prefix included
    # Constant columns for this row (e.g. the request event, the KV quantity kind).
    constants: dict[str, str] = field(default_factory=dict)
    # KV rows that print several quantities: (group, kind, unit) emitted as separate rows.
    quantities: tuple[tuple[str, str, str], ...] = ()
    # Config rows whose payload is a key=value list parsed by code (origin name).
    config_origin: str | None = None
    # Rows found anywhere in a line, even without a vLLM header (bare pastes, other formats).
    bare_ok: bool = True


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

KV_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "blocks",
        "kv_capacity",
        " blocks: ",
        r"#? ?(?:(?P<device>GPU|CUDA|cuda|rocm|TPU|HPU|XPU|CPU|NPU|xpu|npu|hpu|tpu) blocks: "
        r"(?P<gpu>\d+))(?:, # CPU blocks: (?P<cpu>\d+))?",
        "v0.1.0 – v0.10.2 (`# CUDA blocks` v0.7.0 – v0.7.2, `# cuda blocks` v0.7.3 – v0.10.2);"
        " V1 `# GPU blocks: N` v0.6.4 – v0.7.3",
        "INFO 01-11 15:51:18 llm_engine.py:275] # GPU blocks: 229, # CPU blocks: 512",
        quantities=(("gpu", "gpu_blocks", "blocks"), ("cpu", "cpu_blocks", "blocks")),
    ),
    LineFormat(
        "kv_cache_size",
        "kv_capacity",
        "KV cache size: ",
        r"(?P<device>[A-Z]+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens"
        r"(?:, Maximum concurrency for (?P<context>[\d,]+) tokens per request: (?P<conc>[\d.]+)x)?",
        "v0.8.0 – v0.33.0 (one line with Maximum concurrency from v0.28.0; `<DEV>` from v0.30.0)",
        "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache"
        " size:"
        " 42,656 tokens",
        quantities=(("tokens", "kv_cache_tokens", "tokens"), ("conc", "max_concurrency", "x")),
    ),
    LineFormat(
        "max_concurrency",
        "kv_capacity",
        "Maximum concurrency for ",
        r"Maximum concurrency for (?P<context>[\d,]+) tokens per request: (?P<conc>[\d.]+)x",
        "v0.6.3 – v0.33.0",
        "INFO 11-03 15:51:27 [executor_base.py:118] Maximum concurrency for 32768 tokens per"
        " request: 1.79x",
        quantities=(("conc", "max_concurrency", "x"),),
    ),
    LineFormat(
        "available_kv_memory",
        "kv_capacity",
        "Available KV cache memory: ",
        r"Available KV cache memory: (?P<gib>-?[\d.]+) GiB",
        "v0.9.1 – v0.33.0 (V1 workers)",
        "(EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache"
        " memory: 6.51 GiB",
        quantities=(("gib", "available_kv_memory", "GiB"),),
    ),
    LineFormat(
        "model_weights_v0",
        "kv_capacity",
        "Loading model weights took ",
        r"Loading model weights took (?P<gb>[\d.]+) GB",
        "v0.4.0 – v0.7.3",
        "INFO 01-14 12:36:51 model_runner.py:1099] Loading model weights took 7.9692 GB",
        quantities=(("gb", "model_weights", "GB"),),
    ),
    LineFormat(
        "model_loading",
        "kv_capacity",
        "Model loading took ",
        r"Model loading took (?P<gib>[\d.]+) (?P<unit>GiB|GB)(?: memory)? and (?P<secs>[\d.]+)"
        r" seconds",
        "v0.8.0 – v0.33.0",
        "(EngineCore_DP0 pid=66914) INFO 09-21 12:30:37 [gpu_model_runner.py:2581] Model loading"
        " took 2.2845 GiB and 74.270197 seconds",
        quantities=(("gib", "model_weights", "GiB"), ("secs", "model_loading_time", "s")),
    ),
    LineFormat(
        "memory_profiling_results",
        "kv_capacity",
        "Memory profiling results: ",
        r"Memory profiling results: total_gpu_memory=(?P<total>[\d.]+)GiB[^\n]*?"
        r"kv_cache_size=(?P<kv>[\d.]+)GiB(?: gpu_memory_utilization=(?P<util>[\d.]+))?",
        "v0.6.4 – v0.6.4.post1",
        "Memory profiling results: total_gpu_memory=23.58GiB initial_memory_usage=15.34GiB"
        " peak_torch_memory=17.98GiB memory_usage_post_profile=15.35GiB non_torch_memory=0.35GiB"
        " kv_cache_size=2.89GiB gpu_memory_utilization=0.90",
        quantities=(
            ("total", "memory_total", "GiB"),
            ("kv", "memory_for_kv", "GiB"),
            ("util", "gpu_memory_utilization", "fraction"),
        ),
    ),
    LineFormat(
        "memory_for_kv_v0",
        "kv_capacity",
        "reserved for KV Cache is ",
        r"model weights take (?P<weights>[\d.]+)GiB;[^\n]*?the rest of the memory reserved for"
        r" KV Cache is (?P<kv>-?[\d.]+)GiB",
        "v0.6.5 – v0.10.2 (third line of the memory-profiling message)",
        "(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] model weights take"
        " 21.21GiB; non_torch_memory takes 0.20GiB; PyTorch activation peak memory takes 0.37GiB;"
        " the rest of the memory reserved for KV Cache is 1.57GiB.",
        quantities=(("weights", "model_weights", "GiB"), ("kv", "memory_for_kv", "GiB")),
    ),
    LineFormat(
        "memory_total_v0",
        "kv_capacity",
        "the current vLLM instance can use total_gpu_memory",
        r"the current vLLM instance can use total_gpu_memory \((?P<total>[\d.]+)GiB\) x"
        r" gpu_memory_utilization \((?P<util>[\d.]+)\)",
        "v0.6.5 – v0.10.2 (second line of the memory-profiling message)",
        "(VllmWorkerProcess pid=507) INFO 04-12 08:21:19 [worker.py:267] the current vLLM instance"
        " can use total_gpu_memory (23.58GiB) x gpu_memory_utilization (0.99) = 23.35GiB",
        quantities=(
            ("total", "memory_total", "GiB"),
            ("util", "gpu_memory_utilization", "fraction"),
        ),
    ),
    LineFormat(
        "kv_cache_memory_bytes",
        "kv_capacity",
        "as specified by kv_cache_memory_bytes",
        r"Initial free memory (?P<free>[\d.]+) ?GiB, reserved (?P<kv>[\d.]+) ?GiB memory for KV"
        r" Cache as specified by kv_cache_memory_bytes",
        "v0.10.2 – v0.33.0 (V1 workers started with --kv-cache-memory)",
        "(EngineCore pid=316) INFO 08-21 18:37:44 [gpu_worker.py:492] Initial free memory 31.16"
        " GiB, reserved 4.25 GiB memory for KV Cache as specified by kv_cache_memory_bytes config"
        " and skipped memory profiling.",
        quantities=(("free", "memory_free", "GiB"), ("kv", "memory_for_kv", "GiB")),
    ),
    LineFormat(
        "free_memory_on_device",
        "kv_capacity",
        "Free memory on device ",
        r"Free memory on device(?: [^ (]+)? \((?P<free>[\d.]+)/(?P<total>[\d.]+) GiB\) on"
        r" startup(?:\. Desired GPU memory utilization is | is less than desired GPU memory"
        r" utilization )\((?P<util>[\d.]+), (?P<budget>[\d.]+) GiB\)"
        r"(?:[^\n]*? Current kv cache memory in use is (?P<kv>[\d.]+) ?(?P<kv_unit>GiB|bytes))?",
        "v0.10.2 – v0.33.0 (INFO, DEBUG v0.11.0 – v0.25.1; the kv part ends in bytes in"
        " v0.10.2 – v0.11.x, in GiB later); the startup refusal `… is less than desired …`",
        "(Worker_TP1 pid=1806414) INFO 10-23 15:14:56 [gpu_worker.py:391] Free memory on device"
        " (139.21/139.81 GiB) on startup. Desired GPU memory utilization is (0.9, 125.83 GiB)."
        " Actual usage is 74.28 GiB for weight, 5.58 GiB for peak activation, 1.38 GiB for"
        " non-torch memory, and 2.37 GiB for CUDAGraph memory. Replace gpu_memory_utilization"
        " config with `--kv-cache-memory=45175492096` to fit into requested memory, or"
        " `--kv-cache-memory=59540753920` to fully utilize gpu memory. Current kv cache memory in"
        " use is 47878721024 bytes.",
        quantities=(
            ("free", "memory_free", "GiB"),
            ("total", "memory_total", "GiB"),
            ("util", "gpu_memory_utilization", "fraction"),
            ("budget", "memory_budget", "GiB"),
            ("kv", "memory_for_kv", "GiB"),
        ),
    ),
    LineFormat(
        "cache_config_info",
        "kv_capacity",
        "num_gpu_blocks is: ",
        r"(?:Engine [0-9]+: |[0-9]+ Engines: )?vllm cache_config_info with initialization after"
        r" num_gpu_blocks is: (?P<gpu>\d+)",
        "v0.9.0 – v0.33.0 (`Engine NNN: ` prefix v0.9.1+, DEBUG per engine v0.11.1+)",
        "INFO 06-22 02:55:02 [loggers.py:137] Engine 000: vllm cache_config_info with"
        " initialization after num_gpu_blocks is: 15745",
        quantities=(("gpu", "gpu_blocks", "blocks"),),
    ),
    LineFormat(
        "num_gpu_blocks_override",
        "kv_capacity",
        "Overriding num_gpu_blocks=",
        r"Overriding num_gpu_blocks=\d+ with num_gpu_blocks_override=(?P<gpu>\d+)",
        "v0.4.2 – v0.33.0",
        "INFO 09-20 11:00:00 [kv_cache_utils.py:700] Overriding num_gpu_blocks=4096 with"
        " num_gpu_blocks_override=512",
        quantities=(("gpu", "gpu_blocks", "blocks"),),
    ),
)

CONFIG_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "api_server_version",
        "config",
        "server version ",
        r"vLLM (?:API )?server version (?P<vllm_version>[0-9v][^\s,)\x1b]*)"
        r"(?:, serving model (?P<model>\S+))?",
        "v0.4.0 – v0.14.1 (`vLLM API server version`);"
        " v0.15.0+ `vLLM server version X, serving model M`",
        "INFO 02-22 16:52:22 api_server.py:209] vLLM API server version 0.3.2",
        config_origin="version_line",
    ),
    LineFormat(
        "logo_version",
        "config",
        "▀▄▀ █",
        r"[\s▄█▀]*?▀▄▀ █\s+version (?:\x1b\[[0-9;]*m)?(?P<vllm_version>[0-9][^\s,)\x1b]*)",
        "v0.15.0 – v0.33.0 (ASCII logo, six prefixed lines)",
        "(APIServer pid=1726) INFO 02-19 10:10:57 [utils.py:325]  ▄▄ ▄█ █     █     █ ▀▄▀ █"
        "  version"
        " 0.15.1",
        config_origin="version_line",
        bare_ok=False,
    ),
    LineFormat(
        "logo_model",
        "config",
        "█▄█▀ █",
        r"[\s▄█▀]*?█▄█▀ █\s+█\s+█\s+█  model\s+(?:\x1b\[[0-9;]*m)?(?P<model>\S+)",
        "v0.15.0 – v0.33.0 (ASCII logo)",
        "(APIServer pid=1726) INFO 02-19 10:10:57 [utils.py:325]   █▄█▀ █     █     █     █  model"
        "   models/final_dpo",
        config_origin="version_line",
        bare_ok=False,
    ),
    LineFormat(
        "engine_config",
        "config",
        " with config: ",
        r"Initializing an? (?:(?P<engine_version>V[01]) )?LLM engine"
        r"(?: \(v(?P<vllm_version>[^)\s]+)\))?"
        r" with config: (?P<payload>.*)",
        "v0.1.0 – v0.33.0 (`a V0/V1 LLM engine (vX)` from v0.7.1; version in parentheses v0.4.0+)",
        "INFO 04-08 03:47:57 [core.py:61] Initializing a V1 LLM engine (v0.8.3) with config:"
        " model='Qwen/Qwen2.5-7B', speculative_config=None, tokenizer='Qwen/Qwen2.5-7B',"
        " max_seq_len=32768, tensor_parallel_size=1, pipeline_parallel_size=1,"
        " served_model_name=Qwen/Qwen2.5-7B, enable_prefix_caching=True",
        config_origin="engine_config",
    ),
    LineFormat(
        "non_default_args",
        "config",
        "non-default args: ",
        r"non-default args: (?P<payload>\{.*)",
        "v0.9.0 – v0.33.0",
        "INFO 07-23 19:34:27 [cli_args.py:325] non-default args: {'model':"
        " '/models/Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8', 'quantization': 'fp8',"
        " 'tensor_parallel_size': 8, 'gpu_memory_utilization': 0.6, 'max_log_len': 65536}",
        config_origin="non_default_args",
    ),
    LineFormat(
        "args_namespace",
        "config",
        "Namespace(",
        r"(?:args: )?Namespace\((?P<payload>.*)\)",
        "v0.1.0 – v0.8.5.post1 (`args: Namespace(...)`, all values)",
        "INFO 05-01 09:40:00 api_server.py:1043] args: Namespace(host=None, port=8000,"
        " tensor_parallel_size=1, gpu_memory_utilization=0.9, max_num_batched_tokens=None,"
        " max_num_seqs=256, scheduling_policy='fcfs')",
        config_origin="args_namespace",
    ),
    LineFormat(
        "chunked_prefill",
        "config",
        "Chunked prefill is enabled with ",
        r"Chunked prefill is enabled with max_num_batched_tokens=(?P<max_num_batched_tokens>\d+)",
        "v0.5.3 – v0.33.0",
        "INFO 05-01 09:40:01 [config.py:2003] Chunked prefill is enabled with"
        " max_num_batched_tokens=8192.",
        config_origin="chunked_prefill",
    ),
    LineFormat(
        "max_model_len",
        "config",
        "Using max model len ",
        r"Using max model len (?P<max_model_len>\d+)",
        "v0.9.2 – v0.33.0",
        "INFO 07-01 10:00:00 [config.py:1472] Using max model len 32768",
        config_origin="max_model_len",
    ),
    LineFormat(
        "usage_context_default",
        "config",
        " usage context",
        r"(?:Setting|Defaulting) (?P<key>max_num_seqs|max_num_batched_tokens) to (?P<value>\d+)"
        r" for \S+ usage context",
        "v0.6.5 – v0.33.0 (DEBUG from v0.8.0)",
        "DEBUG 11-01 10:00:00 [arg_utils.py:1700] Defaulting max_num_seqs to 1024 for"
        " OPENAI_API_SERVER usage context.",
        config_origin="usage_context",
    ),
)

REQUEST_ROWS: tuple[LineFormat, ...] = (
    LineFormat(
        "received",
        "requests",
        "Received request ",
        # Every era writes `Received request %s: ...`: the id runs to the first `: ` (a client's
        # id may hold dots and colons: `req.1`, `tenant:7`).
        r"Received request (?P<request_id>\S+?):(?:\s|$)",
        "v0.1.0 – v0.33.0 (engine ≤ v0.5.2, OpenAI request logger v0.5.3+)",
        "INFO 11-13 01:39:03 logger.py:37] Received request chat-fa706dfef62c402bb8174c9c922e7888:"
        " prompt: '<|begin_of_text|>', params: SamplingParams(n=1), prompt_token_ids: [128000],"
        " lora_request: None, prompt_adapter_request: None.",
        constants={"event": "received"},
        bare_ok=False,
    ),
    LineFormat(
        "added",
        "requests",
        "Added request ",
        r"Added request (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.5.3 – v0.33.0",
        "INFO 05-01 09:46:36 [async_llm.py:252] Added request"
        " chatcmpl-339cba12293b42a7ba808aca93821d50.",
        constants={"event": "added"},
        bare_ok=False,
    ),
    LineFormat(
        "finished",
        "requests",
        "Finished request ",
        r"Finished request (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.1.0 – v0.10.2 (AsyncLLMEngine only); V1 v0.6.4 – v0.6.6",
        "INFO 04-11 19:21:43 async_llm_engine.py:120] Finished request"
        " cmpl-81abe7cfa0cc42a696c703368ba37734.",
        constants={"event": "finished"},
        bare_ok=False,
    ),
    LineFormat(
        "aborted",
        "requests",
        "Aborted request",
        r"Aborted request(?:\(s\))? (?P<request_id>\S+?)\.?(?:\s|$)",
        "v0.1.0 – v0.33.0 (`Aborted request(s) a,b.` from v0.10.1)",
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:445] Aborted request(s)"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0.",
        constants={"event": "aborted"},
        bare_ok=False,
    ),
    LineFormat(
        "generated",
        "requests",
        "Generated response ",
        # `Generated response %s%s: output: ...`: the id runs to the suffix or the first `: `.
        r"Generated response (?P<request_id>\S+?)(?: \(streaming complete\))?:(?:\s|$)",
        "v0.10.1 – v0.33.0 (needs --enable-log-outputs)",
        "(APIServer pid=1) INFO 11-07 08:50:31 [logger.py:71] Generated response"
        " chatcmpl-b87aa23d3945464d97fa892ff0d2d044: output: 'Once upon a time',"
        " finish_reason: stop",
        constants={"event": "generated"},
        bare_ok=False,
    ),
    # A streamed request logs a delta per chunk before its `(streaming complete)` line: the
    # request is still running, so it is its own event (the join settles at `generated`).
    LineFormat(
        "generated_delta",
        "requests",
        "Generated response ",
        r"Generated response (?P<request_id>\S+?) \(streaming delta\):",
        "v0.10.1 – v0.33.0 (needs --enable-log-outputs)",
        "(APIServer pid=1) INFO 11-07 08:50:30 [logger.py:71] Generated response"
        " chatcmpl-b87aa23d3945464d97fa892ff0d2d044 (streaming delta): output: 'Once',"
        " finish_reason: None",
        constants={"event": "delta"},
        bare_ok=False,
    ),
    LineFormat(
        "request_aborted",
        "requests",
        "Request ",
        r"Request (?P<request_id>\S+) aborted\.",
        "v0.8.5 – v0.33.0",
        "(APIServer pid=1) INFO 11-07 08:51:02 [async_llm.py:470] Request"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0 aborted.",
        constants={"event": "aborted"},
        bare_ok=False,
    ),
    LineFormat(
        "failed",
        "requests",
        "Request ",
        r"Request (?P<request_id>\S+) failed",
        "v0.8.5 – v0.33.0",
        "(APIServer pid=1) ERROR 11-07 08:51:02 [async_llm.py:480] Request"
        " cmpl-4d1abf620f01dad2f8fd2946e6d0ee3a-0 failed (engine dead).",
        constants={"event": "failed"},
        bare_ok=False,
    ),
)
# What every request row starts with behind its header (the router's and the per-line path's
# request literals).
REQUEST_LITERALS: tuple[str, ...] = tuple(sorted({row.literal for row in REQUEST_ROWS}))

# The part of an access line after the client: the request line and the status.
ACCESS_REQUEST = (
    r' - "(?P<method>[A-Z]+) (?P<path>[^ ]+) HTTP/(?P<http_version>[0-9.]+)" (?P<status>[0-9]{3})'
)
ACCESS_ROW = LineFormat(
    "uvicorn_access",
    "access",
    " HTTP/",
    r"(?P<client>[^ ]+)(?: [0-9]+)?" + ACCESS_REQUEST,
    "all (uvicorn default access format; `(APIServer pid=N)` prefix v0.10.1 – v0.30.0)",
    '(APIServer pid=1) INFO:     172.18.0.1:59468 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
)

# A traceback frame's `  File "…", line N, in f` line (its code line follows it).
TRACEBACK_FRAME = r'^ +File "[^"]+", line [0-9]+(?:, in [^ ]+)?$'
# Lines with no envelope that are still plainly a program's output (they become `other` rows
# with a null level): Python tracebacks (raw since v0.31.0, where the process prefix is gone),
# Python warnings and tqdm progress bars. Each is recognised by its own shape, anchored at the
# start.
PLAIN_LINES: tuple[tuple[str, str], ...] = (
    ("traceback", r"^Traceback \(most recent call last\):$"),
    (
        "traceback",
        r"^(?:During handling of the above exception, another exception occurred|"
        r"The above exception was the direct cause of the following exception):$",
    ),
    ("traceback", TRACEBACK_FRAME),
    ("traceback", r"^ +[\^~]+$"),
    (
        "traceback",
        r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Z][A-Za-z0-9_]*"
        r"(?:Error|Exception|Exit|Interrupt|Warning)(?:: [^\n]*)?$",
    ),
    # Python's warnings module: `/path/file.py:2356: UserWarning: message`
    ("warning", r"^[^\s:][^:\n]{0,300}\.py:[0-9]+: [A-Za-z_][A-Za-z0-9_.]*Warning: "),
    (
        "progress",
        r"^[^|\n]{0,200}: *[0-9]{1,3}%(?:\|[^|\n]{0,200}\|| Completed \|)"
        r" *[0-9]+/[0-9]+ \[",
    ),
)

# Ray's log deduplication (`RAY_DEDUP_LOGS`, on by default): after printing a line, Ray holds
# back its repeats for a few seconds and then prints the last one once with this suffix; N is
# the number of held-back lines, so the suffixed line stands for N lines (the first one was
# printed on its own before). The note in parentheses follows the first such suffix only.
RAY_REPEAT = (
    r" \[repeated (?P<repeat>[0-9]{1,12})x across cluster\]"
    r"(?: \(Ray deduplicates logs by default\.[^\n]*\))?"
)
RAY_REPEAT_LITERAL = "x across cluster]"
# Ray buffers repeats for ~5 s; a larger count than this is not a real log (and each repeat is
# a row): the line is unrecognised with that reason.
RAY_REPEAT_MAX = 10_000

# Kinds whose messages go through the per-line path (rare lines, rich payloads).
PYTHON_ROWS: tuple[LineFormat, ...] = PREEMPTION_ROWS + KV_ROWS + CONFIG_ROWS
ALL_ROWS: tuple[LineFormat, ...] = (
    PREEMPTION_ROWS + STATS_ROWS + KV_ROWS + CONFIG_ROWS + REQUEST_ROWS + (ACCESS_ROW,)
)

# Config keys extracted from key=value payloads (engine config, args, non-default args).
CONFIG_KEYS: dict[str, str] = {
    "model": "model",
    "served_model_name": "served_model_name",
    "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens",
    "gpu_memory_utilization": "gpu_memory_utilization",
    "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size",
    "block_size": "block_size",
    "scheduling_policy": "scheduling_policy",
    "max_model_len": "max_model_len",
    "max_seq_len": "max_model_len",
    "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill",
    "chunked_prefill_enabled": "enable_chunked_prefill",
    "preemption_mode": "preemption_mode",
    "swap_space": "swap_space",
    "kv_cache_dtype": "kv_cache_dtype",
    "quantization": "quantization",
    "num_gpu_blocks_override": "num_gpu_blocks_override",
    "dtype": "dtype",
}
