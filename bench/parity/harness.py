"""Run vLLM's real V1 scheduler (KV manager, block pool, prefix caching) on CPU with a stand-in
executor, and record what a deployment would show: per-request client rows (JSONL, with each
request's priority where the workload has classes), per-step records, the startup log lines,
vLLM's own stats lines (LoggingStatLogger, every 10 s) and /metrics scrapes
(PrometheusStatLogger, every 15 s), both on the run's virtual clock; for `nested`, also each
request's DEBUG line with its prompt token ids (vLLM's RequestLogger).

Runs in its own venv (bench/parity/setup.sh): vLLM 0.33.0 with --no-deps and CPU torch. No
model runs: a tiny Llama config.json, no weights. The stand-in executor samples one token for
every request whose scheduled tokens reach the end of its sequence (none for a partial prefill
chunk) and advances a virtual clock by a step cost `a + b x scheduled tokens + c x context`
(a virtual clock instead of sleeping: the shared machine's load cannot spoil a run, and the
cost is deliberately not the simulator's fitted form).

    python harness.py OUT_DIR [--only NAME,NAME] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

VERSION = "0.33.0"
T0 = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 8192,
    "vocab_size": 32000,
    "torch_dtype": "float16",
    "rms_norm_eps": 1e-5,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "tie_word_embeddings": False,
}
# Step cost of the stand-in GPU (seconds): per step, per scheduled token, per context token.
STEP_A, STEP_B, STEP_C = 0.020, 0.00012, 0.0000004


@dataclass(frozen=True)
class Workload:
    name: str
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    shared_prefix: int = 0  # tokens every prompt starts with
    priority: np.ndarray | None = None  # per request (0 first); None: one class
    # Per request: its prompt's token ids (None: `shared_prefix` shared ids, then random ones).
    prompts: list[list[int]] | None = None
    # Log each request as the server's RequestLogger does at DEBUG (its prompt token ids).
    log_requests: bool = False


@dataclass(frozen=True)
class Setting:
    max_num_seqs: int
    num_blocks: int
    max_num_batched_tokens: int
    block_size: int = 16
    max_model_len: int = 4096
    prefix_caching: bool = True
    policy: str = "fcfs"


def _lognormal(
    rng: np.random.Generator, mean: float, cv: float, n: int, lo: int, hi: int
) -> npt.NDArray[np.int64]:
    s2 = np.log1p(cv**2)
    v = rng.lognormal(np.log(mean) - s2 / 2, np.sqrt(s2), n)
    return np.clip(np.rint(v), lo, hi).astype(np.int64)


def workloads(seed: int = 0) -> list[Workload]:
    """The workloads; another seed draws held-out runs of the same kinds."""
    rng = np.random.default_rng(11 + seed)
    out = []
    # Short-prompt bursts: 4 bursts of 40 requests, 25 s apart.
    arr = np.sort(np.concatenate([k * 25.0 + rng.uniform(0, 2.0, 40) for k in range(4)]))
    n = len(arr)
    out.append(Workload("bursts", arr, _lognormal(rng, 200, 0.5, n, 16, 2000),
                        _lognormal(rng, 300, 0.5, n, 16, 1500)))  # fmt: skip
    # Poisson chat traffic, prefill-heavy.
    n = 240
    arr = np.cumsum(rng.exponential(1 / 2.4, n))
    out.append(Workload("poisson", arr, _lognormal(rng, 900, 0.6, n, 32, 3000),
                        _lognormal(rng, 220, 0.6, n, 16, 1000)))  # fmt: skip
    # Long prompts, short answers.
    n = 120
    arr = np.cumsum(rng.exponential(1 / 0.9, n))
    out.append(Workload("long-prompts", arr, _lognormal(rng, 2400, 0.3, n, 500, 3500),
                        _lognormal(rng, 120, 0.5, n, 8, 500)))  # fmt: skip
    # Shared prefixes: every prompt starts with the same 600-token system prompt. The simulator
    # does not model hits across requests; this workload measures what that costs.
    n = 200
    arr = np.cumsum(rng.exponential(1 / 2.0, n))
    out.append(Workload("shared-prefix", arr, 600 + _lognormal(rng, 300, 0.5, n, 16, 1500),
                        _lognormal(rng, 250, 0.5, n, 16, 1000), shared_prefix=600))  # fmt: skip
    return out + production_workloads(seed) + nested_workloads(seed)


def production_workloads(seed: int = 0) -> list[Workload]:
    """The traffic production serves, and servers bound by each scheduler limit (issues 23, 24).

    A generator of their own, so the workloads above stay what their recorded runs hold."""
    rng = np.random.default_rng(23 + seed)
    out = []
    # A system prompt every request shares (prefix caching on by default in V1).
    for length, rate in ((1024, 2.0), (512, 2.2)):
        n = 200
        arr = np.cumsum(rng.exponential(1 / rate, n))
        prompt = length + _lognormal(rng, 250, 0.5, n, 16, 1500)
        output = _lognormal(rng, 250, 0.5, n, 16, 1000)
        out.append(Workload(f"prefix{length}", arr, prompt, output, shared_prefix=length))
    # Interactive (priority 0: short) and batch (priority 1: long) requests on one endpoint.
    n = 220
    arr = np.cumsum(rng.exponential(1 / 2.0, n))
    batch = rng.uniform(size=n) < 0.6
    prompt = np.where(batch, _lognormal(rng, 900, 0.5, n, 32, 3000),
                      _lognormal(rng, 250, 0.5, n, 16, 1500))  # fmt: skip
    output = np.where(batch, _lognormal(rng, 400, 0.5, n, 16, 1500),
                      _lognormal(rng, 100, 0.5, n, 8, 600))  # fmt: skip
    out.append(Workload("priority-mix", arr, prompt, output, priority=batch.astype(np.int64)))
    # Request slots bind: bursts of 48 short requests, KV to spare at the cap.
    arr = np.sort(np.concatenate([k * 20.0 + rng.uniform(0, 2.0, 48) for k in range(5)]))
    n = len(arr)
    out.append(Workload("slot-bound", arr, _lognormal(rng, 200, 0.5, n, 16, 2000),
                        _lognormal(rng, 250, 0.5, n, 16, 1000)))  # fmt: skip
    # The token budget binds: long prompts arriving fast behind a small budget.
    n = 150
    arr = np.cumsum(rng.exponential(1 / 2.2, n))
    out.append(Workload("budget-bound", arr, _lognormal(rng, 2500, 0.25, n, 800, 3500),
                        _lognormal(rng, 60, 0.5, n, 8, 300)))  # fmt: skip
    # Nothing binds: light Poisson traffic.
    n = 120
    arr = np.cumsum(rng.exponential(1 / 1.0, n))
    out.append(Workload("roomy", arr, _lognormal(rng, 400, 0.5, n, 16, 2000),
                        _lognormal(rng, 150, 0.5, n, 16, 800)))  # fmt: skip
    return out


SYSTEM_PROMPT = 768  # tokens every request of `nested` starts with
ANSWER_TOKEN = 100  # the stand-in samples this id: a conversation's answers are runs of it


def nested_workloads(seed: int = 0) -> list[Workload]:
    """Prefixes nested in others: one system prompt, then conversations of several turns,
    each turn's prompt the conversation so far (system prompt, earlier questions and the
    answers the stand-in gave) and a new question. Turns arrive a think time after the
    previous turn would plausibly have finished; conversations start on a Poisson clock."""
    rng = np.random.default_rng(31 + seed)
    conversations, turns = 50, 4
    system = rng.integers(3, 30000, SYSTEM_PROMPT).tolist()
    starts = np.cumsum(rng.exponential(1 / 0.8, conversations))
    rows: list[tuple[float, list[int], int]] = []
    for c in range(conversations):
        history = list(system)
        t = float(starts[c])
        questions = _lognormal(rng, 120, 0.5, turns, 16, 400)
        answers = _lognormal(rng, 150, 0.5, turns, 16, 400)
        for k in range(turns):
            prompt = history + rng.integers(3, 30000, int(questions[k])).tolist()
            rows.append((t, prompt, int(answers[k])))
            history = prompt + [ANSWER_TOKEN] * int(answers[k])
            # The answer takes about 20 ms a token here; then the user reads and types.
            t += 0.02 * int(answers[k]) + 8.0 + rng.exponential(8.0)
    rows.sort(key=lambda r: r[0])
    return [
        Workload(
            "nested",
            np.array([r[0] for r in rows]),
            np.array([len(r[1]) for r in rows], dtype=np.int64),
            np.array([r[2] for r in rows], dtype=np.int64),
            prompts=[r[1] for r in rows],
            log_requests=True,
        )
    ]


SETTINGS = {
    # Per workload: the observed run first, then the settings to predict from it.
    "bursts": [Setting(64, 700, 2048), Setting(16, 700, 2048), Setting(32, 700, 2048),
               Setting(128, 700, 2048), Setting(64, 1400, 2048), Setting(64, 700, 1024)],
    "poisson": [Setting(64, 900, 2048), Setting(8, 900, 2048), Setting(16, 900, 2048),
                Setting(32, 900, 2048), Setting(64, 1800, 2048), Setting(64, 900, 1024)],
    "long-prompts": [Setting(32, 600, 2048), Setting(4, 600, 2048), Setting(8, 600, 2048),
                     Setting(16, 600, 2048), Setting(32, 1200, 2048), Setting(32, 600, 4096)],
    "shared-prefix": [Setting(64, 700, 2048), Setting(8, 700, 2048), Setting(16, 700, 2048),
                      Setting(64, 1400, 2048)],
    "prefix1024": [Setting(32, 520, 2048), Setting(4, 520, 2048), Setting(8, 520, 2048),
                   Setting(64, 520, 2048), Setting(32, 1040, 2048),
                   Setting(32, 520, 2048, prefix_caching=False)],
    "prefix512": [Setting(32, 500, 2048), Setting(4, 500, 2048), Setting(8, 500, 2048),
                  Setting(64, 500, 2048), Setting(32, 1000, 2048),
                  Setting(32, 500, 2048, prefix_caching=False)],
    "priority-mix": [Setting(32, 700, 2048), Setting(32, 700, 2048, policy="priority"),
                     Setting(16, 700, 2048), Setting(64, 700, 2048), Setting(32, 1400, 2048),
                     Setting(16, 700, 2048, policy="priority")],
    "slot-bound": [Setting(4, 2000, 2048), Setting(2, 2000, 2048), Setting(8, 2000, 2048),
                   Setting(16, 2000, 2048), Setting(32, 2000, 2048)],
    "budget-bound": [Setting(64, 3000, 256), Setting(64, 3000, 512), Setting(64, 3000, 1024),
                     Setting(64, 3000, 2048), Setting(32, 3000, 256)],
    "roomy": [Setting(64, 2000, 2048), Setting(16, 2000, 2048), Setting(8, 2000, 2048),
              Setting(64, 1000, 2048)],
    "nested": [Setting(32, 480, 2048), Setting(8, 480, 2048), Setting(16, 480, 2048),
               Setting(64, 480, 2048), Setting(32, 960, 2048),
               Setting(32, 480, 2048, prefix_caching=False)],
}  # fmt: skip


def build(setting: Setting, model_dir: str) -> tuple[Any, Any, Any]:
    import torch  # type: ignore[import-not-found]
    from vllm.config import (  # type: ignore[import-not-found]
        CacheConfig,
        DeviceConfig,
        LoadConfig,
        ModelConfig,
        SchedulerConfig,
        VllmConfig,
    )
    from vllm.utils.hashing import get_hash_fn_by_name  # type: ignore[import-not-found]
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # type: ignore[import-not-found]
    from vllm.v1.core.sched.scheduler import Scheduler  # type: ignore[import-not-found]
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec  # type: ignore[import-not-found]
    from vllm.v1.structured_output import StructuredOutputManager  # type: ignore[import-not-found]

    mc = ModelConfig(
        model=model_dir,
        served_model_name="tiny-llama",
        skip_tokenizer_init=True,
        max_model_len=setting.max_model_len,
        dtype="float16",
    )
    sc = SchedulerConfig(
        max_num_seqs=setting.max_num_seqs,
        max_num_batched_tokens=setting.max_num_batched_tokens,
        max_model_len=setting.max_model_len,
        enable_chunked_prefill=True,
        is_encoder_decoder=False,
        async_scheduling=False,
        policy=setting.policy,
    )
    cc = CacheConfig(
        block_size=setting.block_size,
        gpu_memory_utilization=0.9,
        enable_prefix_caching=setting.prefix_caching,
    )
    vc = VllmConfig(
        model_config=mc,
        scheduler_config=sc,
        cache_config=cc,
        device_config=DeviceConfig(device="cpu"),
        load_config=LoadConfig(load_format="dummy"),
    )
    vc.cache_config.num_gpu_blocks = setting.num_blocks
    spec = FullAttentionSpec(
        block_size=setting.block_size, num_kv_heads=4, head_size=64, dtype=torch.float16
    )
    layers = [f"model.layers.{i}.self_attn.attn" for i in range(4)]
    kvc = KVCacheConfig(
        num_blocks=setting.num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(layers, spec)],
    )
    sched = Scheduler(
        vc, kvc, StructuredOutputManager(vc), block_size=setting.block_size, log_stats=True
    )
    hash_fn = get_hash_fn_by_name(vc.cache_config.prefix_caching_hash_algo)
    init_none_hash(hash_fn)
    return sched, get_request_block_hasher(setting.block_size, hash_fn), vc


STATS_INTERVAL = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL
SCRAPE_INTERVAL = 15.0  # a Prometheus scrape interval


class _VirtualTime:
    """vLLM's stat loggers read time.monotonic()/time.time(): give them the run's clock."""

    now = 0.0

    @classmethod
    def monotonic(cls) -> float:
        return T0.timestamp() + cls.now

    time = monotonic


class _Lines(logging.Handler):
    """Collects vLLM's log lines (the stat logger's, the request logger's) with the virtual
    time, as vLLM would print them; `in_order()` sorts them by that time (a request is logged
    at its arrival, which a step may already have passed)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        when = _VirtualTime.monotonic()
        stamp = datetime.fromtimestamp(when, UTC).strftime("%m-%d %H:%M:%S")
        self.lines.append(
            (when, f"(APIServer pid=1) {record.levelname} {stamp} "
                   f"[{record.filename}:{record.lineno}] {record.getMessage()}")
        )  # fmt: skip

    def in_order(self) -> list[str]:
        return [line for _, line in sorted(self.lines, key=lambda pair: pair[0])]


def run(wl: Workload, setting: Setting, model_dir: str) -> dict[str, Any]:
    import prometheus_client
    from vllm.sampling_params import SamplingParams  # type: ignore[import-not-found]
    from vllm.v1.engine import FinishReason  # type: ignore[import-not-found]
    from vllm.v1.metrics import loggers  # type: ignore[import-not-found]
    from vllm.v1.metrics.stats import (  # type: ignore[import-not-found]
        FinishedRequestStats,
        IterationStats,
    )
    from vllm.v1.outputs import ModelRunnerOutput  # type: ignore[import-not-found]
    from vllm.v1.request import Request  # type: ignore[import-not-found]

    sched, hasher, vc = build(setting, model_dir)
    # vLLM's own stat loggers (the stats line, the Prometheus metrics) on the virtual clock.
    _VirtualTime.now = 0.0
    loggers.time = _VirtualTime
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    lines = _Lines()
    vlog = logging.getLogger(loggers.__name__)
    vlog.handlers, vlog.propagate, vlog.level = [lines], False, logging.INFO
    text_logger = loggers.LoggingStatLogger(vc, engine_index=0)
    text_logger.kv_cache_device = "GPU"  # a GPU server's line (the executor is a stand-in)
    prom_logger = loggers.PrometheusStatLogger(vc, engine_indexes=[0])
    request_logger = None
    if wl.log_requests:  # `--enable-log-requests --log-level DEBUG`: the prompt token ids
        from vllm.entrypoints.serve.utils import request_logger as rl  # type: ignore[import-not-found]

        rlog = logging.getLogger(rl.__name__)
        rlog.handlers, rlog.propagate, rlog.level = [lines], False, logging.DEBUG
        request_logger = rl.RequestLogger(max_log_len=None)
    scrapes: list[tuple[float, str]] = [(-20.0, prometheus_client.generate_latest().decode())]
    next_log, next_scrape = STATS_INTERVAL, SCRAPE_INTERVAL

    n = len(wl.arrival)
    rng = np.random.default_rng(5)
    prefix = rng.integers(3, 30000, wl.shared_prefix).tolist()
    reqs: dict[str, Request] = {}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    done: dict[str, float] = {}
    steps = []
    clock, nxt = 0.0, 0

    def tick(until: float) -> None:
        """Stats lines and scrapes due up to `until`, each at its own moment."""
        nonlocal next_log, next_scrape
        while min(next_log, next_scrape) <= until:
            if next_log <= next_scrape:
                _VirtualTime.now = next_log
                text_logger.log()
                next_log += STATS_INTERVAL
            else:
                _VirtualTime.now = next_scrape
                scrapes.append((next_scrape, prometheus_client.generate_latest().decode()))
                next_scrape += SCRAPE_INTERVAL

    while len(done) < n:
        while nxt < n and wl.arrival[nxt] <= clock:
            rid = f"req-{nxt}"
            if wl.prompts is not None:
                tokens = list(wl.prompts[nxt])
            else:
                tokens = prefix + rng.integers(3, 30000, int(wl.prompt[nxt]) - len(prefix)).tolist()
            params = SamplingParams(max_tokens=int(wl.output[nxt]), ignore_eos=True)
            if request_logger is not None:
                _VirtualTime.now = float(wl.arrival[nxt])
                request_logger.log_inputs(rid, None, tokens, None, params, None)
                _VirtualTime.now = clock
            pri = int(wl.priority[nxt]) if wl.priority is not None else 0
            req = Request(rid, tokens, params, None, arrival_time=float(wl.arrival[nxt]),
                          priority=pri, block_hasher=hasher)  # fmt: skip
            reqs[rid] = req
            sched.add_request(req)
            nxt += 1
        if not sched.has_requests():
            tick(float(wl.arrival[nxt]))
            clock = float(wl.arrival[nxt])
            continue
        preempted_before = sum(r.num_preemptions for r in reqs.values())
        out = sched.schedule()
        ids = list(out.num_scheduled_tokens)
        sampled = []
        context = 0
        for rid in ids:
            r = reqs[rid]
            context += r.num_computed_tokens
            sampled.append([100] if r.num_computed_tokens >= r.num_tokens else [])
        scheduled = out.total_num_scheduled_tokens
        step = STEP_A + STEP_B * scheduled + STEP_C * context if scheduled else 0.0
        tick(clock + step)
        clock += step
        _VirtualTime.now = clock
        mro = ModelRunnerOutput(
            req_ids=ids,
            req_id_to_index={rid: i for i, rid in enumerate(ids)},
            sampled_token_ids=sampled,
        )
        it = IterationStats()
        it.num_preempted_reqs = sum(r.num_preemptions for r in reqs.values()) - preempted_before
        for rid, toks in zip(ids, sampled, strict=True):
            if toks:
                it.num_generation_tokens += 1
                if rid not in first:
                    first[rid] = clock
                    it.time_to_first_tokens_iter.append(clock - reqs[rid].arrival_time)
                    it.prompt_token_stats.total += reqs[rid].num_prompt_tokens
                    it.prompt_token_stats.computed += reqs[rid].num_prompt_tokens
                else:
                    it.inter_token_latencies_iter.append(clock - last[rid])
                last[rid] = clock
        outputs = sched.update_from_output(out, mro)
        for rid in ids:
            r = reqs[rid]
            if rid not in done and r.is_finished():
                done[rid] = clock
                a, f = r.arrival_time, first[rid]
                gen = r.num_output_tokens
                it.finished_requests.append(
                    FinishedRequestStats(
                        finish_reason=FinishReason.LENGTH,
                        request_id=rid,
                        e2e_latency=clock - a,
                        num_prompt_tokens=r.num_prompt_tokens,
                        num_preemptions=r.num_preemptions,
                        num_generation_tokens=gen,
                        max_tokens_param=gen,
                        inference_time=clock - a,
                        decode_time=clock - f,
                        mean_time_per_output_token=(clock - f) / (gen - 1) if gen > 1 else 0.0,
                    )
                )
        # The step's SchedulerStats as the engine sends them (make_stats drains the counters).
        stats = next(iter(outputs.values())).scheduler_stats
        text_logger.record(stats, it, engine_idx=0)
        prom_logger.record(stats, it, engine_idx=0)
        steps.append(
            {
                "end": round(clock, 6),
                "scheduled_tokens": scheduled,
                "running": len(sched.running),
                "waiting": len(sched.waiting),
            }
        )
        if not scheduled and nxt < n:
            clock = max(clock, float(wl.arrival[nxt]))
    tick(clock + 1.0)  # the last stats line; the last scrape is written after the traffic
    _VirtualTime.now = clock + 1.0
    scrapes.append((clock + 1.0, prometheus_client.generate_latest().decode()))
    rows = []
    for i in range(n):
        rid = f"req-{i}"
        a, f, e = float(wl.arrival[i]), first[rid], done[rid]
        out_tokens = int(wl.output[i])
        row: dict[str, Any] = {
            "request_id": rid,
            "start": (T0 + timedelta(seconds=a)).isoformat(),
            "ttft": round(f - a, 6),
            "e2e": round(e - a, 6),
            "tpot": round((e - f) / (out_tokens - 1), 6) if out_tokens > 1 else None,
            "prompt_tokens": int(wl.prompt[i]),
            "output_tokens": out_tokens,
            "num_preemptions": reqs[rid].num_preemptions,
        }
        if wl.priority is not None:
            row["priority"] = int(wl.priority[i])
        rows.append(row)
    stats_lines = lines.in_order()
    return {"rows": rows, "steps": steps, "end": clock, "stats": stats_lines, "scrapes": scrapes}


def _p99(values: list[float]) -> float | None:
    return float(np.percentile(np.array(values), 99)) if values else None


def _counter(scrape: str, name: str) -> float | None:
    for line in scrape.splitlines():
        if line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def summary(rows: list[dict[str, Any]], end: float, last_scrape: str = "") -> dict[str, Any]:
    e2e = [r["e2e"] for r in rows]
    start = min((datetime.fromisoformat(r["start"]) - T0).total_seconds() for r in rows)
    span = end - start
    out: dict[str, Any] = {
        "requests": len(rows),
        "preemptions": int(sum(r["num_preemptions"] for r in rows)),
        "output_throughput": sum(r["output_tokens"] for r in rows) / span,
        "e2e_p99": _p99(e2e),
    }
    hits = _counter(last_scrape, "vllm:prefix_cache_hits_total")
    queries = _counter(last_scrape, "vllm:prefix_cache_queries_total")
    if hits is not None and queries:
        out["prefix_cache_hit_rate"] = hits / queries
    if any("priority" in r for r in rows):
        out["per_priority"] = {
            str(p): {
                "requests": len(mine),
                "e2e_p99": _p99([r["e2e"] for r in mine]),
                "ttft_p99": _p99([r["ttft"] for r in mine]),
                "preemptions": int(sum(r["num_preemptions"] for r in mine)),
            }
            for p in sorted({r["priority"] for r in rows})
            for mine in [[r for r in rows if r["priority"] == p]]
        }
    return out


def write_run(out: Path, wl: Workload, setting: Setting, result: dict[str, Any]) -> None:
    """The files a deployment would show: client rows, per-step records, log lines, /metrics."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "requests.jsonl").open("w") as f:
        for row in result["rows"]:
            f.write(json.dumps(row) + "\n")
    with (out / "steps.jsonl").open("w") as f:
        for row in result["steps"]:
            f.write(json.dumps(row) + "\n")
    args: dict[str, Any] = {
        "model": "tiny-llama",
        "max_model_len": setting.max_model_len,
        "max_num_seqs": setting.max_num_seqs,
        "max_num_batched_tokens": setting.max_num_batched_tokens,
        "block_size": setting.block_size,
    }
    if not setting.prefix_caching:
        args["enable_prefix_caching"] = False
    if setting.policy != "fcfs":
        args["scheduling_policy"] = setting.policy
    ts = T0 - timedelta(seconds=30)
    stamp = ts.strftime("%m-%d %H:%M:%S")
    tokens = setting.num_blocks * setting.block_size
    conc = tokens / setting.max_model_len
    # The startup lines as vLLM 0.33.0 prints them (messages from its source), then the stat
    # logger's own lines from the run.
    lines = [
        f"(APIServer pid=1) INFO {stamp} [api_server.py:1839] vLLM API server version {VERSION}",
        f"(APIServer pid=1) INFO {stamp} [utils.py:233] non-default args: {args!r}",
        f"(EngineCore_DP0 pid=312) INFO {stamp} [kv_cache_utils.py:1087] GPU KV cache size: "
        f"{tokens:,} tokens",
        f"(EngineCore_DP0 pid=312) INFO {stamp} [kv_cache_utils.py:1091] Maximum concurrency for "
        f"{setting.max_model_len:,} tokens per request: {conc:.2f}x",
        *result["stats"],
    ]
    (out / "vllm.log").write_text("\n".join(lines) + "\n")
    end = T0 + timedelta(seconds=result["end"])
    # vLLM's own /metrics (PrometheusStatLogger) before the traffic, every SCRAPE_INTERVAL, and
    # after it: the counters' increase is the run's count.
    snapshots = out / "metrics"
    snapshots.mkdir(exist_ok=True)
    for when, text in result["scrapes"]:
        stamp_s = int((T0 + timedelta(seconds=when)).timestamp())
        (snapshots / f"metrics-{stamp_s}.prom").write_text(text)
    truth = summary(result["rows"], result["end"], result["scrapes"][-1][1])
    meta = {"workload": wl.name, "setting": setting.__dict__, "end_time": end.isoformat(),
            "truth": truth, "vllm": VERSION,
            "step_cost": {"a": STEP_A, "b_token": STEP_B, "c_context": STEP_C}}  # fmt: skip
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")


def run_name(wl: Workload, k: int, setting: Setting) -> str:
    name = f"{wl.name}/s{k}-seqs{setting.max_num_seqs}-blocks{setting.num_blocks}"
    name += f"-mbt{setting.max_num_batched_tokens}"
    if not setting.prefix_caching:
        name += "-nocache"
    if setting.policy != "fcfs":
        name += f"-{setting.policy}"
    return name


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--only", help="comma-separated workload names")
    parser.add_argument("--seed", type=int, default=0, help="held-out runs: another draw")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    model_dir = tempfile.mkdtemp()
    (Path(model_dir) / "config.json").write_text(json.dumps(TINY_LLAMA))
    for wl in workloads(args.seed):
        if only and wl.name not in only:
            continue
        for k, setting in enumerate(SETTINGS[wl.name]):
            result = run(wl, setting, model_dir)
            name = run_name(wl, k, setting)
            write_run(Path(args.out) / name, wl, setting, result)
            truth = summary(result["rows"], result["end"], result["scrapes"][-1][1])
            print(name, json.dumps(truth), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
