"""The vLLM server log of a simulated run, as one of three eras would print it.

This module owns the log's lines: the startup banner, the periodic stats lines, the V0
preemption warning, the request lifecycle lines and the prompts' made-up token ids. Line
formats are copied from the vLLM sources catalogued in docs/simulator.md:

- "v0":  vLLM 0.6.1.post2 (V0 engine, AsyncLLMEngine path): stats every 5 s with
         Running/Swapped/Pending, the preemption WARNING on the 1st, 51st, 101st, ... preemption,
         `Added request` / `Finished request` lifecycle lines.
- "v1":  vLLM 0.11.0 (V1): `(APIServer pid=1) ... Engine 000: ...` every 10 s, no preemption
         line anywhere (V1 logs nothing when it preempts), startup KV-capacity lines.
- "v1-preemptions": 0.11.1 with the fix of vLLM PR #38452, i.e. the stats line carries
         `Preemptions: N` for intervals with preemptions (stock 0.11.1+ never prints it).

Pure: it returns strings and never writes a file (the `demo` command does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
from preemptscope.analysis.sim.engine import SimResult
from preemptscope.analysis.sim.workload import Workload

from preemptscope.errors import ConfigError

Era = Literal["v0", "v1", "v1-preemptions"]
ERAS: tuple[Era, ...] = ("v0", "v1", "v1-preemptions")

V0_STATS_INTERVAL = 5.0
V1_STATS_INTERVAL = 10.0
V0_WARNING_EVERY = 50


@dataclass(frozen=True)
class _Profile:
    version: str
    brackets: bool  # `[file:line]` (v0.8+) or `file:line]`
    api_proc: str | None
    engine_proc: str | None


PROFILES: dict[str, _Profile] = {
    "v0": _Profile("0.6.1.post2", False, None, None),
    "v1": _Profile("0.11.0", True, "APIServer pid=1", "EngineCore_DP0 pid=312"),
    "v1-preemptions": _Profile("0.11.1+pr38452", True, "APIServer pid=1", "EngineCore_DP0 pid=312"),
}


def _check_era(era: str) -> _Profile:
    if era not in PROFILES:
        raise ConfigError(f"unknown log era {era!r}; expected one of {', '.join(ERAS)}")
    return PROFILES[era]


class _LogBuilder:
    """Collects (time, line) pairs and renders them in time order with vLLM's prefix."""

    def __init__(self, profile: _Profile, start: datetime, container_timestamps: bool) -> None:
        self.profile = profile
        self.start = start
        self.container = container_timestamps
        self.entries: list[tuple[float, int, str]] = []

    def at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def add(
        self, t: float, level: str, where: str, message: str, *, proc: str | None = None
    ) -> None:
        when = self.at(t)
        loc = f"[{where}]" if self.profile.brackets else f"{where}]"
        prefix = f"({proc}) " if proc else ""
        self._push(t, f"{prefix}{level} {when:%m-%d %H:%M:%S} {loc} {message}")

    def raw(self, t: float, text: str, *, proc: str | None = None) -> None:
        self._push(t, f"({proc}) {text}" if proc else text)

    def _push(self, t: float, line: str) -> None:
        if self.container:
            when = self.at(t)
            line = f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond:06d}000Z {line}"
        self.entries.append((t, len(self.entries), line))

    def lines(self) -> list[str]:
        return [line for _, _, line in sorted(self.entries)]


def _fmt_args(args: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in args.items()) + "}"


def _startup(log: _LogBuilder, result: SimResult, era: str, model_name: str) -> None:
    cfg, cap, p = result.config, result.capacity, log.profile
    t = -45.0
    if era == "v0":
        log.add(t, "INFO", "api_server.py:495", f"vLLM API server version {p.version}")
        log.add(
            t,
            "INFO",
            "api_server.py:496",
            "args: Namespace(host=None, port=8000, uvicorn_log_level='info', "
            f"allow_credentials=False, served_model_name=['{model_name}'], "
            f"model='{cfg.model.name}', tokenizer=None, trust_remote_code=False, dtype='auto', "
            f"max_model_len={cfg.max_model_len}, "
            f"pipeline_parallel_size={cfg.pipeline_parallel_size}, "
            f"tensor_parallel_size={cfg.tensor_parallel_size}, block_size={cfg.block_size}, "
            f"enable_prefix_caching={cfg.enable_prefix_caching}, swap_space=4, "
            f"gpu_memory_utilization={cfg.gpu_memory_utilization}, "
            f"num_gpu_blocks_override={cfg.num_gpu_blocks_override}, "
            f"max_num_batched_tokens={cfg.max_num_batched_tokens}, "
            f"max_num_seqs={cfg.max_num_seqs}, enable_chunked_prefill="
            f"{cfg.enable_chunked_prefill}, disable_log_stats=False, disable_log_requests=False)",
        )
        log.add(
            t + 2,
            "INFO",
            "llm_engine.py:232",
            f"Initializing an LLM engine (v{p.version}) with config: model='{cfg.model.name}', "
            f"speculative_config=None, tokenizer='{cfg.model.name}', skip_tokenizer_init=False, "
            "tokenizer_mode=auto, revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={cfg.max_model_len}, download_dir=None, load_format=LoadFormat.AUTO, "
            f"tensor_parallel_size={cfg.tensor_parallel_size}, "
            f"pipeline_parallel_size={cfg.pipeline_parallel_size}, "
            "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
            "kv_cache_dtype=auto, device_config=cuda, seed=0, "
            f"served_model_name={model_name}, use_v2_block_manager=False, "
            f"num_scheduler_steps=1, enable_prefix_caching={cfg.enable_prefix_caching}, "
            "use_async_output_proc=True)",
        )
        log.add(
            t + 20,
            "INFO",
            "model_runner.py:1014",
            f"Loading model weights took {cap.weights_gib:.4f} GB",
        )
        log.add(
            t + 30,
            "INFO",
            "gpu_executor.py:122",
            f"# GPU blocks: {cap.num_gpu_blocks}, # CPU blocks: 2048",
        )
        for i, text in enumerate(
            (
                "INFO:     Started server process [7]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
            )
        ):
            log.raw(t + 40 + i * 0.01, text)
        return
    api, eng = p.api_proc, p.engine_proc
    args: dict[str, Any] = {"model_tag": cfg.model.name, "enable_log_requests": True}
    args["enable_log_outputs"] = True
    args.update(cfg.non_default_args())
    args["served_model_name"] = [model_name]
    log.add(t, "INFO", "api_server.py:1839", f"vLLM API server version {p.version}", proc=api)
    log.add(t, "INFO", "utils.py:233", f"non-default args: {_fmt_args(args)}", proc=api)
    log.add(t + 1, "INFO", "model.py:1510", f"Using max model len {cfg.max_model_len}", proc=api)
    log.add(
        t + 1,
        "INFO",
        "scheduler.py:205",
        f"Chunked prefill is enabled with max_num_batched_tokens={cfg.max_num_batched_tokens}.",
        proc=api,
    )
    log.add(
        t + 3,
        "INFO",
        "core.py:77",
        f"Initializing a V1 LLM engine (v{p.version}) with config: model='{cfg.model.name}', "
        f"speculative_config=None, tokenizer='{cfg.model.name}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        f"dtype=torch.bfloat16, max_seq_len={cfg.max_model_len}, download_dir=None, "
        f"load_format=auto, tensor_parallel_size={cfg.tensor_parallel_size}, "
        f"pipeline_parallel_size={cfg.pipeline_parallel_size}, data_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
        "kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={model_name}, enable_prefix_caching={cfg.enable_prefix_caching}, "
        f"chunked_prefill_enabled={cfg.enable_chunked_prefill}, pooler_config=None",
        proc=eng,
    )
    log.add(
        t + 20,
        "INFO",
        "gpu_model_runner.py:2653",
        f"Model loading took {cap.weights_gib:.4f} GiB and 6.283104 seconds",
        proc=eng,
    )
    log.add(
        t + 30,
        "INFO",
        "gpu_worker.py:298",
        f"Available KV cache memory: {cap.kv_memory_gib:.2f} GiB",
        proc=eng,
    )
    log.add(
        t + 30,
        "INFO",
        "kv_cache_utils.py:1087",
        f"GPU KV cache size: {cap.kv_cache_tokens:,} tokens",
        proc=eng,
    )
    log.add(
        t + 30,
        "INFO",
        "kv_cache_utils.py:1091",
        f"Maximum concurrency for {cfg.max_model_len:,} tokens per request: "
        f"{cap.max_concurrency:.2f}x",
        proc=eng,
    )
    log.add(
        t + 38,
        "INFO",
        "loggers.py:147",
        "Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: "
        f"{cap.num_gpu_blocks}",
        proc=api,
    )
    log.add(
        t + 39,
        "INFO",
        "api_server.py:1634",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
        proc=api,
    )
    for i, text in enumerate(
        (
            "INFO:     Started server process [1]",
            "INFO:     Waiting for application startup.",
            "INFO:     Application startup complete.",
        )
    ):
        log.raw(t + 40 + i * 0.01, text, proc=api)


@dataclass(frozen=True)
class StatsRecord:
    """What one periodic stats line reports (vLLM's LoggingStatLogger)."""

    time: float
    prompt_throughput: float
    generation_throughput: float
    running: int
    waiting: int
    kv_usage: float  # fraction
    preemptions: int


def stats_records(result: SimResult, era: str) -> list[StatsRecord]:
    """The stats lines the chosen era prints: V0 every 5 s of engine steps, V1 every 10 s.

    V0 logs from inside the engine step (so only while steps run); V1 from a 10-s timer,
    skipping intervals where this and the previous interval had zero throughput (DEBUG level).
    Prompt throughput: V0 counts every prefill token (recompute included), V1 counts a prompt
    once, when its first token is produced.
    """
    _check_era(era)
    steps = result.steps
    if not len(steps):
        return []
    ends = steps.end
    prompt_src = steps.prefill_tokens if era == "v0" else steps.first_token_prompt_tokens
    cum_prompt = np.concatenate([[0], np.cumsum(prompt_src)])
    cum_gen = np.concatenate([[0], np.cumsum(steps.generation_tokens)])
    cum_pre = np.concatenate([[0], np.cumsum(steps.preemptions)])
    total_blocks = result.capacity.num_gpu_blocks

    if era == "v0":
        times: list[float] = []
        last = 0.0
        for end in ends.tolist():
            if end - last >= V0_STATS_INTERVAL:
                times.append(end)
                last = end
    else:
        count = math.floor(float(ends[-1]) / V1_STATS_INTERVAL) + 1
        times = [V1_STATS_INTERVAL * k for k in range(1, count + 1)]

    records: list[StatsRecord] = []
    prev_t, prev_idx, prev_busy = 0.0, 0, False
    for t in times:
        idx = int(np.searchsorted(ends, t, side="right"))  # steps ended at or before t
        span = t - prev_t
        prompt = float(cum_prompt[idx] - cum_prompt[prev_idx]) / span
        gen = float(cum_gen[idx] - cum_gen[prev_idx]) / span
        busy = prompt > 0 or gen > 0
        last_step = idx - 1
        record = StatsRecord(
            time=t,
            prompt_throughput=prompt,
            generation_throughput=gen,
            running=int(steps.running[last_step]) if last_step >= 0 else 0,
            waiting=int(steps.waiting[last_step]) if last_step >= 0 else 0,
            kv_usage=float(steps.used_blocks[last_step]) / total_blocks if last_step >= 0 else 0,
            preemptions=int(cum_pre[idx] - cum_pre[prev_idx]),
        )
        if era == "v0" or busy or prev_busy:
            records.append(record)
        prev_t, prev_idx, prev_busy = t, idx, busy
    return records


def render_log(
    result: SimResult,
    *,
    era: str = "v1",
    start: datetime,
    model_name: str | None = None,
    container_timestamps: bool = True,
    request_lines: bool = True,
    prompt_ids: bool = False,
) -> list[str]:
    """The vLLM server log of the simulated run, one string per physical line.

    `prompt_ids`: print each prompt's token ids (`prompt_token_ids: [...]`, as a server whose
    request logger shows them; from 0.11.1 on the DEBUG `Request %s details:` line), made up
    so that requests of a shared-prefix group start with the same ids (`prompt_token_ids`)."""
    profile = _check_era(era)
    if start.tzinfo is None:
        raise ConfigError("start must be timezone-aware")
    name = model_name or result.config.model.name
    log = _LogBuilder(profile, start.astimezone(UTC), container_timestamps)
    _startup(log, result, era, name)
    api = profile.api_proc
    ids = result.workload.ids()
    arrival = result.workload.arrival
    # vLLM prints the hit rate of its recent queries; the run's own rate stands for it on
    # every line (the engine counts hits per run, not per interval).
    hits = f"{(result.prefix_cache_hit_rate or 0.0) * 100:.1f}%"
    for rec in stats_records(result, era):
        kv = f"{rec.kv_usage * 100:.1f}%"
        head = (
            f"Avg prompt throughput: {rec.prompt_throughput:.1f} tokens/s, "
            f"Avg generation throughput: {rec.generation_throughput:.1f} tokens/s, "
            f"Running: {rec.running} reqs, "
        )
        if era == "v0":
            msg = f"{head}Swapped: 0 reqs, Pending: {rec.waiting} reqs, "
            msg += f"GPU KV cache usage: {kv}, CPU KV cache usage: 0.0%."
            log.add(rec.time, "INFO", "metrics.py:351", msg)
        else:
            msg = f"Engine 000: {head}Waiting: {rec.waiting} reqs, "
            if era == "v1-preemptions" and rec.preemptions > 0:
                msg += f"Preemptions: {rec.preemptions}, "
            msg += f"GPU KV cache usage: {kv}, Prefix cache hit rate: {hits}"
            log.add(rec.time, "INFO", "loggers.py:123", msg, proc=api)

    if era == "v0":
        for k, (t, req) in enumerate(
            zip(result.preempt_time.tolist(), result.preempt_request.tolist(), strict=True)
        ):
            if k % V0_WARNING_EVERY == 0:
                log.add(
                    t,
                    "WARNING",
                    "scheduler.py:1089",
                    f"Sequence group {ids[req]} is preempted by PreemptionMode.RECOMPUTE mode "
                    "because there is not enough KV cache space. This can affect the end-to-end "
                    "performance. Increase gpu_memory_utilization or tensor_parallel_size to "
                    f"provide more KV cache memory. total_num_cumulative_preemption={k + 1}",
                )

    if request_lines:
        end_time = result.end_time
        for i in range(len(result.workload)):
            t_arr = float(arrival[i])
            if t_arr > end_time:
                break
            rid = ids[i]
            params = (
                "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
                "repetition_penalty=1.0, temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, "
                f"seed=None, stop=[], ignore_eos=True, max_tokens={int(result.output_len[i])}, "
                "min_tokens=0, logprobs=None, skip_special_tokens=True)"
            )
            prompt = f"'<synthetic prompt: {int(result.prompt_len[i])} tokens>'"
            token_ids = str(prompt_token_ids(result.workload, i)) if prompt_ids else "None"
            if era == "v0":
                log.add(
                    t_arr,
                    "INFO",
                    "logger.py:36",
                    f"Received request {rid}: prompt: {prompt}, params: {params}, "
                    f"prompt_token_ids: {token_ids}, lora_request: None, "
                    "prompt_adapter_request: None.",
                )
                log.add(t_arr, "INFO", "async_llm_engine.py:201", f"Added request {rid}.")
            else:
                # 0.11.1 moved the prompt to a DEBUG line; 0.10-0.11.0 logged it here.
                received = (
                    f"Received request {rid}: params: {params}, lora_request: None."
                    if era == "v1-preemptions"
                    else f"Received request {rid}: prompt: {prompt}, params: {params}, "
                    f"prompt_token_ids: {token_ids}, prompt_embeds shape: None, "
                    "lora_request: None."
                )
                log.add(t_arr, "INFO", "logger.py:40", received, proc=api)
                if era == "v1-preemptions" and prompt_ids:
                    log.add(
                        t_arr,
                        "DEBUG",
                        "logger.py:49",
                        f"Request {rid} details: prompt: {prompt}, prompt_token_ids: "
                        f"{token_ids}, prompt_embeds shape: None.",
                        proc=api,
                    )
                log.add(t_arr, "INFO", "async_llm.py:316", f"Added request {rid}.", proc=api)
            t_fin = result.finish[i]
            if math.isnan(t_fin):
                continue
            if era == "v0":
                log.add(t_fin, "INFO", "async_llm_engine.py:169", f"Finished request {rid}.")
            else:
                log.add(
                    t_fin,
                    "INFO",
                    "logger.py:71",
                    f"Generated response {rid}: output: '<{int(result.output_len[i])} tokens>', "
                    "output_token_ids: None, finish_reason: length",
                    proc=api,
                )
            port = 40000 + i % 20000
            log.raw(
                t_fin + 1e-6,
                f'INFO:     127.0.0.1:{port} - "POST /v1/completions HTTP/1.1" 200 OK',
                proc=api,
            )
    return log.lines()


def prompt_token_ids(workload: Workload, i: int) -> list[int]:
    """Made-up token ids of request i's prompt: a shared-prefix group's members start with the
    same `prefix_tokens` ids (drawn from the group's number; in a tree of prefixes, each
    node on the chain from the root draws its own part), the rest from the request's."""
    n = int(workload.prompt_len[i])
    head: list[int] = []
    if workload.prefix_group is not None and workload.prefix_tokens is not None:
        g, k = int(workload.prefix_group[i]), int(workload.prefix_tokens[i])
        parent, ends = workload.prefix_parent, workload.prefix_node_tokens
        if g >= 0 and parent is not None and ends is not None:
            chain = [g]
            while parent[chain[-1]] >= 0:
                chain.append(int(parent[chain[-1]]))
            for node in reversed(chain):
                part = int(ends[node]) - len(head)
                head += np.random.default_rng([7, node]).integers(3, 32000, part).tolist()
        elif g >= 0:
            head = np.random.default_rng([7, g]).integers(3, 32000, k).tolist()
    tail: list[int] = np.random.default_rng([11, i]).integers(3, 32000, n - len(head)).tolist()
    return head + tail
