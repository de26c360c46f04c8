"""Workloads for the simulator's A/B check and full-output fingerprints (bench/sim_ab.py,
tests/sim/test_golden.py): every array of every SimResult, bit for bit."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
from preemptscope.analysis.kvmodel import GPU_PRESETS
from preemptscope.analysis.sim.config import FittedStepCost, SimConfig
from preemptscope.analysis.sim.scenarios import demo_scenarios
from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "sim_golden.json"
Case = tuple[str, Workload, SimConfig, dict[str, Any]]

RESULT_ARRAYS = (
    "prompt_len",
    "output_len",
    "first_scheduled",
    "first_token",
    "finish",
    "num_preemptions",
    "preempt_time",
    "preempt_request",
    "resume_time",
    "token_request",
    "token_time",
)
STEP_ARRAYS = (
    "start",
    "end",
    "running",
    "waiting",
    "used_blocks",
    "scheduled_tokens",
    "prefill_tokens",
    "first_token_prompt_tokens",
    "generation_tokens",
    "preemptions",
    "kv_blocked",
    "finished",
)
FITTED = FittedStepCost(per_step_s=0.0374, per_prefill_token_s=4.7e-4, per_decode_token_s=5.1e-4)
PROMPT = LengthDist("lognormal", 1024, 0.5, 16, 4096)
OUTPUT = LengthDist("lognormal", 512, 0.5, 16, 2048)


def cases(quick: bool = False) -> list[Case]:
    """Workloads and settings that reach every path of the engine (quick: the test's subset).

    Heavy and light preemption, fcfs and priority, with and without chunked prefill (and a
    budget that binds resumed requests), prefix caching, whole-prompt admission and a
    watermark, roofline and fitted step costs, a small token budget and block size, tokens
    recorded or not, a time limit.
    """
    a10g, l4 = GPU_PRESETS["A10G"], GPU_PRESETS["L4"]
    span = 120.0 if quick else 300.0
    chat = synthetic(rate=1.5, duration=span, seed=3, prompt=PROMPT, output=OUTPUT)
    prio = synthetic(
        rate=1.5, duration=span, seed=4, priorities=(0, 1, 2), prompt=PROMPT, output=OUTPUT
    )
    short = synthetic(rate=12.0, duration=60.0 if quick else 240.0, seed=5)  # ~512 / ~256
    demo = demo_scenarios(duration=300.0 if quick else 600.0)[0]
    # Prompts near max_model_len without chunked prefill (budget = max_model_len): resumed
    # requests fit the budget only with their cache hit (tests/sim/test_lazy_decode.py).
    near_max = LengthDist("lognormal", 220, 0.1, 16, 4096)
    tight_out = LengthDist("lognormal", 60, 0.6, 4, 2048)
    near = {
        policy: synthetic(
            rate=20.0,
            duration=60.0,
            seed=seed,
            priorities=(0, 1, 2),
            prompt=near_max,
            output=tight_out,
        )
        for policy, seed in (("fcfs", 6), ("priority", 5))
    }
    near_config = SimConfig(
        gpu=l4, num_gpu_blocks_override=200, block_size=8, max_num_seqs=64,
        enable_chunked_prefill=False, max_model_len=256, max_num_batched_tokens=256,
    )  # fmt: skip
    base = SimConfig(gpu=l4, max_num_seqs=64)

    def on_l4(**changes: Any) -> SimConfig:
        return dataclasses.replace(base, **changes)

    tokens = {"record_tokens": True}
    out: list[Case] = [
        ("l4-chat-fcfs", chat, base, {}),
        ("l4-chat-fcfs-tokens", chat, base, tokens),
        ("l4-chat-fitted", chat, on_l4(step_cost=FITTED), {}),
        (
            "l4-chat-partial-admission",
            chat,
            on_l4(scheduler_reserve_full_isl=False, step_cost=FITTED, max_num_batched_tokens=512),
            {},
        ),
        (
            "l4-chat-no-chunked",
            chat,
            on_l4(enable_chunked_prefill=False, max_model_len=6144, max_num_batched_tokens=6144),
            {},
        ),
        (
            "l4-chat-no-caching-watermark",
            chat,
            on_l4(enable_prefix_caching=False, watermark=0.01),
            {},
        ),
        ("l4-chat-small-budget-bs8", chat, on_l4(max_num_batched_tokens=512, block_size=8), {}),
        ("l4-chat-until", chat, base, {"until": 60.0, **tokens}),
        ("l4-priority", prio, on_l4(scheduling_policy="priority"), {}),
        (
            "l4-priority-tokens",
            prio,
            on_l4(scheduling_policy="priority", scheduler_reserve_full_isl=False),
            tokens,
        ),
        ("tiny-no-chunked-near-max-len", near["fcfs"], near_config, {}),
        (
            "tiny-no-chunked-near-max-len-priority",
            near["priority"],
            dataclasses.replace(near_config, scheduling_policy="priority"),
            {},
        ),
        ("a10g-short-seqs256", short, SimConfig(gpu=a10g), {}),
        ("a10g-short-seqs16", short, SimConfig(gpu=a10g, max_num_seqs=16), {}),
        # A shared 512-token system prompt (and no sharing for every fifth request).
        ("l4-chat-shared-prefix", system(chat), base, {}),
        (
            "l4-priority-shared-prefix-tokens",
            system(prio),
            on_l4(scheduling_policy="priority"),
            tokens,
        ),
        ("demo-a10g", demo.workload, demo.config, tokens),
        (
            "demo-a10g-fitted-seqs20",
            demo.workload,
            dataclasses.replace(demo.config, step_cost=FITTED, max_num_seqs=20),
            {},
        ),
    ]
    if not quick:
        h100 = SimConfig(gpu=GPU_PRESETS["H100"])
        out += [
            ("h100-20rps", synthetic(rate=20.0, duration=600.0, seed=1), h100, {}),
            ("a10g-2rps", synthetic(rate=2.0, duration=1800.0, seed=1), SimConfig(gpu=a10g), {}),
        ]
    return out


def system(workload: Workload) -> Workload:
    """The workload with a 512-token prefix before four prompts in five (prefix caching)."""
    n = len(workload)
    group = np.where(np.arange(n) % 5 == 4, -1, 0).astype(np.int64)
    shifted = dataclasses.replace(workload, prompt_len=workload.prompt_len + 512)
    return shifted.with_prefix(group, np.where(group == 0, 512, 0).astype(np.int64))


def run_case(simulate: Any, case: Case) -> Any:
    _, workload, config, kwargs = case
    return simulate(workload, config, **{"record_tokens": False, **kwargs})


def fingerprint(result: Any) -> dict[str, Any]:
    """sha256 of every output array (bytes as computed), and a few readable totals."""
    digests = {name: _digest(getattr(result, name)) for name in RESULT_ARRAYS}
    digests.update({f"steps.{name}": _digest(getattr(result.steps, name)) for name in STEP_ARRAYS})
    return {
        "steps": len(result.steps),
        "preemptions": len(result.preempt_time),
        "end_time": float(result.end_time).hex(),
        "clamped": int(result.clamped_requests),
        "digests": digests,
    }


def _digest(values: np.ndarray[Any, Any]) -> str:
    arr = np.ascontiguousarray(values)
    return hashlib.sha256(str(arr.dtype).encode() + arr.tobytes()).hexdigest()[:16]


def differences(want: dict[str, Any], got: dict[str, Any]) -> list[str]:
    """Names of the totals and arrays that differ (empty: identical)."""
    keys = [k for k in ("steps", "preemptions", "end_time", "clamped") if want[k] != got[k]]
    return keys + [k for k in want["digests"] if want["digests"][k] != got["digests"].get(k)]
