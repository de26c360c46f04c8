"""Generate a realistic mixed vLLM log of a given size, for bench_parse.py.

The file cycles through three deployments' eras, each a stretch of simulated time:
- V0 (v0.6.3, no prefix): request logging on (Received/Added/Finished request), uvicorn access
  lines, stats every 5 s with a trailing '.', preemption bursts with the every-50th counter;
- V1 v0.10 under docker --timestamps with `(APIServer pid=1)` prefixes: access lines, stats
  every 10 s, KV usage creeping up to 99 %;
- V1 v0.33 (process prefix in the format): access lines for /v1, /health and /metrics, stats
  every 10 s, occasional ERROR tracebacks, tqdm glue and a terminal-wrapped stats record.
With `--profile v1-requests` the file is one V1 v0.33 server with request logging on
(`--enable-log-requests --enable-log-outputs`): 20 requests/s, each a `Received request` line
with its prompt and params, an `Added request <id>-<8 chars>` line, a `Generated response`
line when it finishes (2-40 s later) and an access line; stats every 10 s.
Usage: python bench/gen_logs.py OUT_PATH SIZE_MB [--seed N] [--profile mixed|v1-requests]
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

V0_STATS = (
    "INFO {ts} metrics.py:349] Avg prompt throughput: {pt:.1f} tokens/s, Avg generation "
    "throughput: {gt:.1f} tokens/s, Running: {run} reqs, Swapped: {sw} reqs, Pending: {wait} "
    "reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: {cpu:.1f}%."
)
V0_PREEMPT = (
    "WARNING {ts} scheduler.py:1491] Sequence group chat-{rid:032x} is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect "
    "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
    "provide more KV cache memory. total_num_cumulative_preemption={n}"
)
V0_RECEIVED = (
    "INFO {ts} logger.py:37] Received request chat-{rid:032x}: prompt: '<|start_header_id|>user"
    "<|end_header_id|>\\n\\nSummarise ticket {rid}.<|eot_id|>', params: SamplingParams(n=1, "
    "temperature=0.7, top_p=1.0, max_tokens=512), prompt_token_ids: [128000, 128006, 882, "
    "128007, 271], lora_request: None, prompt_adapter_request: None."
)
V0_ADDED = "INFO {ts} engine.py:267] Added request chat-{rid:032x}."
V0_FINISHED = "INFO {ts} async_llm_engine.py:140] Finished request chat-{rid:032x}."
ACCESS = '{prefix}INFO:     10.0.{a}.{b}:{port} - "{method} {path} HTTP/1.1" {status}'
V1_STATS = (
    "{prefix}INFO {ts} [loggers.py:123] Engine 000: Avg prompt throughput: {pt:.1f} tokens/s, "
    "Avg generation throughput: {gt:.1f} tokens/s, Running: {run} reqs, Waiting: {wait} reqs, "
    "GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {hit:.1f}%"
)
V1_RECEIVED = (
    "{prefix}INFO {ts} [logger.py:43] Received request chatcmpl-{rid:032x}: params: "
    "SamplingParams(n=1, temperature=0.6, top_p=0.95, max_tokens=1024), lora_request: None."
)
TRACEBACK = [
    "(APIServer pid=1) ERROR {ts} [serving_chat.py:1100] Error in chat completion stream.",
    "(APIServer pid=1) ERROR {ts} [serving_chat.py:1100] Traceback (most recent call last):",
    '(APIServer pid=1) ERROR {ts} [serving_chat.py:1100]   File "/usr/lib/python3.12/asyncio/'
    'tasks.py", line 520, in wait_for',
    "(APIServer pid=1) ERROR {ts} [serving_chat.py:1100] asyncio.exceptions.CancelledError",
]


def _ts(moment: datetime) -> str:
    return moment.strftime("%m-%d %H:%M:%S")


def _chat_access(prefix: str, rid: int) -> str:
    """The access line of request `rid`'s chat completion (client address and port from it)."""
    return ACCESS.format(
        prefix=prefix,
        a=rid % 200,
        b=rid % 250,
        port=30000 + rid % 30000,
        method="POST",
        path="/v1/chat/completions",
        status="200 OK",
    )


def _docker(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond:06d}123Z "


def _v0(rng: random.Random, start: datetime, seconds: int) -> Iterator[str]:
    rid = rng.getrandbits(64)
    counter = 0
    yield f"INFO {_ts(start)} api_server.py:528] vLLM API server version 0.6.3.post1"
    yield (
        f"INFO {_ts(start)} api_server.py:529] args: Namespace(host=None, port=8000, "
        "model='meta-llama/Llama-3.1-8B-Instruct', tensor_parallel_size=1, block_size=16, "
        "gpu_memory_utilization=0.9, max_num_seqs=256, scheduling_policy='fcfs')"
    )
    yield f"INFO {_ts(start)} gpu_executor.py:122] # GPU blocks: 2048, # CPU blocks: 2048"
    for second in range(seconds):
        now = start + timedelta(seconds=second)
        ts = _ts(now)
        for _ in range(rng.randint(8, 16)):
            rid += 1
            yield V0_RECEIVED.format(ts=ts, rid=rid)
            yield V0_ADDED.format(ts=ts, rid=rid)
            yield V0_FINISHED.format(ts=ts, rid=rid - 7)
            yield _chat_access("", rid)
        if second % 300 in range(120, 124):  # a preemption burst every five minutes
            for _ in range(rng.randint(1, 3)):
                counter += 50 if counter else 1
                yield V0_PREEMPT.format(ts=ts, rid=rid, n=counter)
        if second % 5 == 0:
            yield V0_STATS.format(
                ts=ts,
                pt=rng.uniform(0, 4000),
                gt=rng.uniform(200, 2000),
                run=rng.randint(40, 256),
                sw=0,
                wait=rng.randint(0, 80),
                kv=rng.uniform(60, 99.9),
                cpu=0.0,
            )


def _v1_docker(rng: random.Random, start: datetime, seconds: int) -> Iterator[str]:
    yield (
        f"{_docker(start)}(APIServer pid=1) INFO {_ts(start)} [api_server.py:1805] vLLM API "
        "server version 0.10.2"
    )
    kv = 40.0
    for second in range(seconds):
        now = start + timedelta(seconds=second, microseconds=rng.randint(0, 999_999))
        prefix = _docker(now) + "(APIServer pid=1) "
        for n in range(rng.randint(20, 40)):
            yield ACCESS.format(
                prefix=prefix,
                a=n,
                b=second % 250,
                port=40000 + n,
                method="POST",
                path="/v1/chat/completions",
                status="200 OK",
            )
        if second % 30 == 0:
            yield V1_RECEIVED.format(prefix=prefix, ts=_ts(now), rid=rng.getrandbits(120))
        if second % 10 == 0:
            kv = min(99.9, kv + rng.uniform(-1, 2))
            yield V1_STATS.format(
                prefix=prefix,
                ts=_ts(now),
                pt=rng.uniform(0, 9000),
                gt=rng.uniform(200, 1500),
                run=rng.randint(10, 64),
                wait=rng.randint(0, 60),
                kv=kv,
                hit=rng.uniform(0, 60),
            )


def _v1_new(rng: random.Random, start: datetime, seconds: int) -> Iterator[str]:
    yield f"(APIServer pid=1) INFO {_ts(start)} [utils.py:300] vLLM server version 0.33.0"
    for second in range(seconds):
        now = start + timedelta(seconds=second)
        ts = _ts(now)
        for n in range(rng.randint(20, 40)):
            path = "/v1/completions" if n % 5 else ("/health" if n % 2 else "/metrics")
            yield ACCESS.format(
                prefix="",
                a=n,
                b=second % 250,
                port=50000 + n,
                method="GET" if path in ("/health", "/metrics") else "POST",
                path=path,
                status="200 OK",
            )
        if second % 10 == 0:
            line = V1_STATS.format(
                prefix="(APIServer pid=1) ",
                ts=ts,
                pt=rng.uniform(0, 9000),
                gt=rng.uniform(200, 1500),
                run=rng.randint(10, 64),
                wait=rng.randint(0, 60),
                kv=rng.uniform(50, 99.9),
                hit=rng.uniform(0, 60),
            )
            if second % 600 == 0:  # a terminal hard-wrap now and then
                yield line[:80]
                yield line[80:]
            elif second % 610 == 0:  # tqdm output glued before a record
                yield "Processed prompts:  40%|████      | 4/10 [00:01<00:02,  2.1it/s]" + line
            else:
                yield line
        if second % 900 == 450:
            yield from (template.format(ts=ts) for template in TRACEBACK)


V1_RECEIVED_FULL = (
    "(APIServer pid=1) INFO {ts} [logger.py:49] Received request chatcmpl-{rid:032x}: prompt: "
    "'<|im_start|>user\\nWhat is the capital of country {rid}? Answer in one word."
    "<|im_end|>\\n<|im_start|>assistant\\n', params: SamplingParams(n=1, presence_penalty=0.0, "
    "frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, top_p=0.8, top_k=20, "
    "max_tokens=512), prompt_token_ids: None, prompt_embeds shape: None, lora_request: None."
)
V1_ADDED = "(APIServer pid=1) INFO {ts} [async_llm.py:347] Added request chatcmpl-{rid:032x}-{tag}."
V1_GENERATED = (
    "(APIServer pid=1) INFO {ts} [logger.py:71] Generated response chatcmpl-{rid:032x}: output: "
    "'Paris.', finish_reason: stop"
)


def _v1_requests(rng: random.Random, start: datetime, seconds: int) -> Iterator[str]:
    """One V1 v0.33 server with request logging on: 20 requests/s, stats every 10 s."""
    yield f"(APIServer pid=1) INFO {_ts(start)} [utils.py:300] vLLM server version 0.33.0"
    rid = rng.getrandbits(100) << 20
    ends: dict[int, list[int]] = {}
    for second in range(seconds):
        now = start + timedelta(seconds=second)
        ts = _ts(now)
        for _ in range(20):
            rid += 1
            yield V1_RECEIVED_FULL.format(ts=ts, rid=rid)
            yield V1_ADDED.format(ts=ts, rid=rid, tag=f"{rng.getrandbits(32):08x}")
            ends.setdefault(second + rng.randint(2, 40), []).append(rid)
        for done in ends.pop(second, []):
            yield V1_GENERATED.format(ts=ts, rid=done)
            yield _chat_access("(APIServer pid=1) ", done)
        if second % 10 == 0:
            yield V1_STATS.format(
                prefix="(APIServer pid=1) ",
                ts=ts,
                pt=rng.uniform(0, 9000),
                gt=rng.uniform(200, 1500),
                run=rng.randint(10, 64),
                wait=rng.randint(0, 60),
                kv=rng.uniform(50, 99.9),
                hit=rng.uniform(0, 60),
            )


PROFILES = {"mixed": (_v0, _v1_docker, _v1_new), "v1-requests": (_v1_requests,)}


def generate(path: str, size_mb: float, seed: int = 0, profile: str = "mixed") -> int:
    """Write about size_mb MiB of log lines to path; returns the number of bytes written."""
    rng = random.Random(seed)
    target = int(size_mb * 1024 * 1024)
    written = 0
    moment = datetime(2025, 12, 31, 20, 0, tzinfo=UTC)  # crosses a new year on purpose
    eras = PROFILES[profile]
    era = 0
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        while written < target:
            block: list[str] = []
            for line in eras[era % len(eras)](rng, moment, 1800):
                block.append(line)
            text = "\n".join(block) + "\n"
            last = written + len(text) > target
            if last:
                cut = text.rfind("\n", 0, target - written)
                text = text[: cut + 1] if cut > 0 else ""
            out.write(text)
            written += len(text.encode("utf-8"))
            if last:
                break
            moment += timedelta(seconds=1800)
            era += 1
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("size_mb", type=float)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", choices=sorted(PROFILES), default="mixed")
    args = parser.parse_args()
    size = generate(args.out, args.size_mb, args.seed, args.profile)
    print(f"wrote {size / 1e6:.1f} MB to {args.out}")


if __name__ == "__main__":
    main()
