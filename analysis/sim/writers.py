"""Render a SimResult as the artefacts a real vLLM deployment leaves behind.

Pure functions returning strings, lines or JSON-ready dicts; the `demo` command writes them.
Line formats are copied from the vLLM sources catalogued in docs/simulator.md:

- "v0":  vLLM 0.6.1.post2 (V0 engine, AsyncLLMEngine path): stats every 5 s with
         Running/Swapped/Pending, the preemption WARNING on the 1st, 51st, 101st, ... preemption,
         `Added request` / `Finished request` lifecycle lines.
- "v1":  vLLM 0.11.0 (V1): `(APIServer pid=1) ... Engine 000: ...` every 10 s, no preemption
         line anywhere (V1 logs nothing when it preempts), startup KV-capacity lines.
- "v1-preemptions": 0.11.1 with the fix of vLLM PR #38452, i.e. the stats line carries
         `Preemptions: N` for intervals with preemptions (stock 0.11.1+ never prints it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import numpy as np
from preemptscope.analysis.sim.engine import SimResult
from preemptscope.analysis.sim.workload import FloatArray, Workload
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from preemptscope.errors import ConfigError

Era = Literal["v0", "v1", "v1-preemptions"]
ERAS: tuple[Era, ...] = ("v0", "v1", "v1-preemptions")

# vLLM's default histogram buckets (vllm/v1/metrics/buckets.py).
E2E_BUCKETS = (0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480,
               960, 1920, 7680)  # fmt: skip
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5,
                7.5, 10, 20, 40, 80, 160, 640, 2560)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5,
               10, 20, 40, 80)  # fmt: skip
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)

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


# --- /metrics snapshots ---------------------------------------------------------------------


def prompt_token_ids(workload: Workload, i: int) -> list[int]:
    """Made-up token ids of request i's prompt: a shared-prefix group's members start with the
    same `prefix_tokens` ids (drawn from the group's number), the rest from the request's."""
    n = int(workload.prompt_len[i])
    head: list[int] = []
    if workload.prefix_group is not None and workload.prefix_tokens is not None:
        g, k = int(workload.prefix_group[i]), int(workload.prefix_tokens[i])
        if g >= 0:
            head = np.random.default_rng([7, g]).integers(3, 32000, k).tolist()
    tail: list[int] = np.random.default_rng([11, i]).integers(3, 32000, n - len(head)).tolist()
    return head + tail


def _cumulative_histograms(
    obs_time: FloatArray, values: FloatArray, snap_times: FloatArray, buckets: Sequence[float]
) -> tuple[np.ndarray[Any, np.dtype[np.int64]], FloatArray]:
    """Per snapshot: cumulative bucket counts (le, +Inf last) and the running sum."""
    k = len(snap_times)
    bounds = np.asarray(buckets, dtype=np.float64)
    counts = np.zeros((k, len(bounds) + 1), dtype=np.int64)
    sums = np.zeros(k, dtype=np.float64)
    if len(obs_time):
        snap = np.searchsorted(snap_times, obs_time, side="left")  # first snapshot seeing it
        keep = snap < k
        bucket = np.searchsorted(bounds, values[keep], side="left")  # le semantics
        np.add.at(counts, (snap[keep], bucket), 1)
        np.add.at(sums, snap[keep], values[keep])
    per_le = np.cumsum(np.cumsum(counts, axis=0), axis=1)
    return per_le, np.cumsum(sums)


class _Snapshot:
    """A prometheus_client collector yielding one snapshot's families."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return iter(self.families)


def render_metrics_snapshots(
    result: SimResult,
    *,
    start: datetime,
    interval: float = 15.0,
    model_name: str | None = None,
) -> list[tuple[datetime, str]]:
    """`/metrics` text as Prometheus would scrape it every `interval` s (vLLM V1 names).

    Counters are cumulative and monotonic; histograms use vLLM's default buckets.
    """
    if interval <= 0:
        raise ConfigError(f"interval must be > 0, got {interval}")
    steps = result.steps
    name = model_name or result.config.model.name
    end = max(result.end_time, interval)
    snap_times = np.arange(interval, end + interval, interval, dtype=np.float64)
    k = len(snap_times)
    step_idx = np.searchsorted(steps.end, snap_times, side="right") - 1

    def cumulative(obs_time: FloatArray, weights: FloatArray | None = None) -> FloatArray:
        snap = np.searchsorted(snap_times, obs_time, side="left")
        keep = snap < k
        acc = np.zeros(k, dtype=np.float64)
        np.add.at(acc, snap[keep], 1.0 if weights is None else weights[keep])
        out: FloatArray = np.cumsum(acc)
        return out

    wl = result.workload
    done = result.finished_mask
    fin_t = result.finish[done]
    e2e = fin_t - wl.arrival[done]
    queue = result.first_scheduled[done] - wl.arrival[done]
    has_first = ~np.isnan(result.first_token)
    ttft_t = result.first_token[has_first]
    ttft = ttft_t - wl.arrival[has_first]
    _, itl_t, itl = result.itls()
    pre_per_req = result.num_preemptions[done].astype(np.float64)

    hist = {
        "e2e": _cumulative_histograms(fin_t, e2e, snap_times, E2E_BUCKETS),
        "queue": _cumulative_histograms(fin_t, queue, snap_times, E2E_BUCKETS),
        "ttft": _cumulative_histograms(ttft_t, ttft, snap_times, TTFT_BUCKETS),
        "itl": _cumulative_histograms(itl_t, itl, snap_times, ITL_BUCKETS),
        "npre": _cumulative_histograms(fin_t, pre_per_req, snap_times, PREEMPTION_BUCKETS),
    }
    preempt_total = cumulative(result.preempt_time)
    success_total = cumulative(fin_t)
    prompt_total = cumulative(steps.end, steps.first_token_prompt_tokens.astype(np.float64))
    gen_total = cumulative(steps.end, steps.generation_tokens.astype(np.float64))
    cfg, cap = result.config, result.capacity
    labels = ["model_name", "engine"]
    lv = [name, "0"]

    out: list[tuple[datetime, str]] = []
    for s in range(k):
        i = int(step_idx[s])
        running = int(steps.running[i]) if i >= 0 else 0
        waiting = int(steps.waiting[i]) if i >= 0 else 0
        usage = float(steps.used_blocks[i]) / cap.num_gpu_blocks if i >= 0 else 0.0
        fams: list[Metric] = []

        def gauge(metric: str, doc: str, value: float, fams: list[Metric] = fams) -> None:
            g = GaugeMetricFamily(metric, doc, labels=labels)
            g.add_metric(lv, value)
            fams.append(g)

        def counter(metric: str, doc: str, value: float, fams: list[Metric] = fams) -> None:
            c = CounterMetricFamily(metric, doc, labels=labels)
            c.add_metric(lv, value)
            fams.append(c)

        info = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[
                "block_size",
                "cache_dtype",
                "engine",
                "gpu_memory_utilization",
                "kv_cache_max_concurrency",
                "kv_cache_size_tokens",
                "num_gpu_blocks",
            ],
        )
        info.add_metric(
            [
                str(cfg.block_size),
                "auto",
                "0",
                str(cfg.gpu_memory_utilization),
                f"{cap.max_concurrency:.2f}",
                str(cap.kv_cache_tokens),
                str(cap.num_gpu_blocks),
            ],
            1.0,
        )
        fams.append(info)
        gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
              running)  # fmt: skip
        gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
              waiting)  # fmt: skip
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of requests waiting, by reason.",
            labels=[*labels, "reason"],
        )
        by_reason.add_metric([*lv, "capacity"], waiting)
        by_reason.add_metric([*lv, "deferred"], 0)
        fams.append(by_reason)
        gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                float(preempt_total[s]))  # fmt: skip
        counter("vllm:prompt_tokens", "Number of prefill tokens processed.",
                float(prompt_total[s]))  # fmt: skip
        counter("vllm:generation_tokens", "Number of generation tokens processed.",
                float(gen_total[s]))  # fmt: skip
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*labels, "finished_reason"],
        )
        success.add_metric([*lv, "length"], float(success_total[s]))
        fams.append(success)
        for metric, doc, key, buckets in (
            ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
             "e2e", E2E_BUCKETS),
            ("vllm:request_queue_time_seconds",
             "Histogram of time spent in WAITING phase for request.", "queue", E2E_BUCKETS),
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
             "ttft", TTFT_BUCKETS),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
             "itl", ITL_BUCKETS),
            ("vllm:request_num_preemptions",
             "Histogram of the number of preemptions per finished request.", "npre",
             PREEMPTION_BUCKETS),
        ):  # fmt: skip
            per_le, sums = hist[key]
            h = HistogramMetricFamily(metric, doc, labels=labels)
            bucket_pairs = [(_le(b), float(per_le[s, j])) for j, b in enumerate(buckets)]
            bucket_pairs.append(("+Inf", float(per_le[s, -1])))
            h.add_metric(lv, bucket_pairs, float(sums[s]))
            fams.append(h)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(fams))
        when = start.astimezone(UTC) + timedelta(seconds=float(snap_times[s]))
        out.append((when, generate_latest(registry).decode()))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


# --- vllm bench serve result -------------------------------------------------------------------


def _ms_stats(name: str, values_s: FloatArray, percentiles: Sequence[float]) -> dict[str, float]:
    ms = values_s * 1000.0 if len(values_s) else np.zeros(1)
    stats = {
        f"mean_{name}_ms": float(np.mean(ms)),
        f"median_{name}_ms": float(np.median(ms)),
        f"std_{name}_ms": float(np.std(ms)),
    }
    for p in percentiles:
        label = f"{p:g}"
        stats[f"p{label}_{name}_ms"] = float(np.percentile(ms, p))
    return stats


def render_bench_result(
    result: SimResult,
    *,
    start: datetime,
    model_id: str | None = None,
    percentiles: Sequence[float] = (50, 90, 99),
) -> dict[str, Any]:
    """A `vllm bench serve --save-result --save-detailed` JSON of the simulated client.

    `start_times` are Unix epoch seconds (when each request was sent). Requests the simulation
    did not finish are reported as failed, with 0 output tokens, as the benchmark does.
    """
    wl = result.workload
    n = len(wl)
    epoch0 = start.timestamp()
    done = result.finished_mask
    arrived = wl.arrival <= result.end_time
    rows = np.flatnonzero(arrived)
    e2e = np.where(done, result.finish - wl.arrival, 0.0)
    ttft = np.where(np.isnan(result.first_token), 0.0, result.first_token - wl.arrival)
    out_lens = np.where(done, result.output_len, 0)
    itl_req, _, itl_gap = result.itls()
    order = np.argsort(itl_req, kind="stable")
    split = np.searchsorted(itl_req[order], np.arange(n + 1))
    gaps_sorted = itl_gap[order]
    itls = [gaps_sorted[split[i] : split[i + 1]].tolist() if done[i] else [] for i in rows]
    tpot = np.array(
        [(e2e[i] - ttft[i]) / (out_lens[i] - 1) for i in rows if done[i] and out_lens[i] > 1],
        dtype=np.float64,
    )
    completed = int(done[rows].sum())
    t_first = float(wl.arrival[rows[0]]) if len(rows) else 0.0
    t_last = float(np.nanmax(result.finish)) if completed else t_first
    duration = max(t_last - t_first, 1e-9)
    total_out = int(out_lens[rows].sum())
    total_in = int(result.prompt_len[rows][done[rows]].sum())
    desc = wl.description
    schedule = desc.get("rate_schedule") or [[0.0, float("inf")]]
    # vllm bench stamps `date` when the run ends (client local time; we write UTC).
    finished_at = start.astimezone(UTC) + timedelta(seconds=t_first + duration)
    body: dict[str, Any] = {
        "date": f"{finished_at:%Y%m%d-%H%M%S}",
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": model_id or result.config.model.name,
        "tokenizer_id": result.config.model.name,
        "num_prompts": len(rows),
        "request_rate": float(schedule[0][1]) if len(schedule) == 1 else "schedule",
        "burstiness": float(desc.get("burstiness", 1.0)),
        "max_concurrency": None,
        "duration": duration,
        "completed": completed,
        "failed": len(rows) - completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": completed / duration,
        "request_goodput": None,
        "output_throughput": total_out / duration,
        "total_token_throughput": (total_in + total_out) / duration,
        "max_concurrent_requests": int(result.steps.running.max()) if len(result.steps) else 0,
        "percentile_metrics": "ttft,tpot,itl,e2el",
        "metric_percentiles": ",".join(f"{p:g}" for p in percentiles),
    }
    body.update(_ms_stats("ttft", ttft[rows][done[rows]], percentiles))
    body.update(_ms_stats("tpot", tpot, percentiles))
    body.update(_ms_stats("itl", itl_gap, percentiles))
    body.update(_ms_stats("e2el", e2e[rows][done[rows]], percentiles))
    body.update(
        {
            "input_lens": result.prompt_len[rows].tolist(),
            "output_lens": out_lens[rows].tolist(),
            "ttfts": ttft[rows].tolist(),
            "itls": itls,
            "latencies": e2e[rows].tolist(),
            "start_times": (epoch0 + wl.arrival[rows]).tolist(),
            "generated_texts": ["" for _ in rows],
            "errors": [
                "" if done[i] else "simulation ended before the request finished" for i in rows
            ],
        }
    )
    return body


# --- ground truth ------------------------------------------------------------------------------

# A window is over capacity when the scheduler preempted in it, or when waiting requests were
# refused admission for lack of KV blocks during at least this fraction of its steps.
KV_BLOCKED_OVER_CAPACITY = 0.25
# A deployment is over capacity when at least this fraction of its busy windows is.
DEPLOYMENT_OVER_CAPACITY = 0.10


def ground_truth(
    result: SimResult, *, start: datetime, window: float = 60.0, label: str = ""
) -> dict[str, Any]:
    """Everything the simulator knows: each preemption, and per-window over-capacity truth."""
    if window <= 0:
        raise ConfigError(f"window must be > 0, got {window}")
    steps = result.steps
    wl = result.workload
    ids = wl.ids()
    origin = start.astimezone(UTC)

    def iso(t: float) -> str:
        return (origin + timedelta(seconds=t)).isoformat()

    preemptions = [
        {
            "time": iso(t),
            "t": round(t, 6),
            "request_id": ids[r],
            "cumulative": k + 1,
        }
        for k, (t, r) in enumerate(
            zip(result.preempt_time.tolist(), result.preempt_request.tolist(), strict=True)
        )
    ]
    n_windows = max(1, math.ceil(result.end_time / window))
    edges = np.arange(n_windows + 1, dtype=np.float64) * window
    pre_w = np.histogram(result.preempt_time, bins=edges)[0]
    step_w = np.clip(np.searchsorted(edges, steps.end, side="right") - 1, 0, n_windows - 1)
    done = result.finished_mask
    fin_w = np.clip(np.searchsorted(edges, result.finish[done], side="right") - 1, 0, n_windows - 1)
    e2e_all = result.finish[done] - wl.arrival[done]
    usage = steps.used_blocks / result.capacity.num_gpu_blocks
    windows: list[dict[str, Any]] = []
    for w in range(n_windows):
        in_w = step_w == w
        n_steps = int(in_w.sum())
        blocked = float(steps.kv_blocked[in_w].mean()) if n_steps else 0.0
        busy = n_steps > 0 and int(steps.scheduled_tokens[in_w].sum()) > 0
        e2e = e2e_all[fin_w == w]
        over = busy and (int(pre_w[w]) > 0 or blocked >= KV_BLOCKED_OVER_CAPACITY)
        windows.append(
            {
                "start": iso(float(edges[w])),
                "end": iso(float(edges[w + 1])),
                "preemptions": int(pre_w[w]),
                "kv_blocked_fraction": round(blocked, 4),
                "kv_usage_max": round(float(usage[in_w].max()), 4) if n_steps else 0.0,
                "running_max": int(steps.running[in_w].max()) if n_steps else 0,
                "waiting_max": int(steps.waiting[in_w].max()) if n_steps else 0,
                "finished": len(e2e),
                "e2e_mean": float(e2e.mean()) if len(e2e) else None,
                "e2e_p99": float(np.percentile(e2e, 99)) if len(e2e) else None,
                "busy": busy,
                "over_capacity": over,
            }
        )
    busy_windows = [w for w in windows if w["busy"]]
    over_windows = sum(1 for w in windows if w["over_capacity"])
    fraction = over_windows / len(busy_windows) if busy_windows else 0.0
    cfg, cap = result.config, result.capacity
    return {
        "schema": "preemptscope-sim-ground-truth/1",
        "label": label,
        "start": iso(0.0),
        "end": iso(result.end_time),
        "window_seconds": window,
        "config": {
            "model": cfg.model.name,
            "gpu": cfg.gpu.name,
            **{k: v for k, v in cfg.non_default_args().items() if k != "model"},
            "max_num_seqs": cfg.max_num_seqs,
            "max_num_batched_tokens": cfg.max_num_batched_tokens,
            "gpu_memory_utilization": cfg.gpu_memory_utilization,
            "scheduling_policy": cfg.scheduling_policy,
        },
        "capacity": {
            "num_gpu_blocks": cap.num_gpu_blocks,
            "block_size": cap.block_size,
            "kv_cache_tokens": cap.kv_cache_tokens,
            "kv_memory_gib": round(cap.kv_memory_gib, 4),
            "max_concurrency": round(cap.max_concurrency, 4),
        },
        "workload": wl.description,
        "totals": {
            "requests": len(wl),
            "finished": int(done.sum()),
            "preemptions": result.total_preemptions,
            "preempted_requests": int(np.count_nonzero(result.num_preemptions)),
            "max_preemptions_per_request": int(result.num_preemptions.max()) if len(wl) else 0,
            "v0_warning_lines": (result.total_preemptions + V0_WARNING_EVERY - 1)
            // V0_WARNING_EVERY,
            "output_tokens": int(result.steps.generation_tokens.sum()),
            "clamped_requests": result.clamped_requests,
        },
        "over_capacity": fraction >= DEPLOYMENT_OVER_CAPACITY,
        "over_capacity_window_fraction": round(fraction, 4),
        "definitions": {
            "window_over_capacity": "preemptions > 0, or waiting requests refused KV blocks in "
            f">= {KV_BLOCKED_OVER_CAPACITY:.0%} of the window's steps (busy windows only)",
            "deployment_over_capacity": f">= {DEPLOYMENT_OVER_CAPACITY:.0%} of busy windows "
            "over capacity",
        },
        "preemptions": preemptions,
        "windows": windows,
    }


def dumps(data: Any) -> str:
    """Stable, readable JSON for the written artefacts."""
    return json.dumps(data, indent=1, sort_keys=False, allow_nan=False) + "\n"
