"""The KV capacity lines: blocks, KV cache size, concurrency, memory and model weights.

Owns the `kv_capacity` rows (each prints one or more quantities, emitted as separate rows);
never code that applies them.
"""

from __future__ import annotations

from preemptscope.ingest.catalogue_row import LineFormat

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
