"""The configuration lines: version, engine config, arguments, and the keys read from them.

Owns the `config` rows and `CONFIG_KEYS` (a payload's key to its column); never code that
parses a payload (`_classify.py` does).
"""

from __future__ import annotations

from preemptscope.ingest.catalogue_row import LineFormat

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
