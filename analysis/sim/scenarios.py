"""The built-in demo's deployments: one over capacity during a traffic surge, one healthy.

Both serve the same traffic (same seed, same arrivals and lengths) with Llama-3.1-8B: an A10G
(22 GiB, about 5 GiB of KV cache left after the weights) and an A100-40G. The surge between
minutes 3 and 7 pushes the A10G's KV demand past its blocks, so it preempts; the A100 does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic

from preemptscope.errors import ConfigError


@dataclass(frozen=True)
class Scenario:
    name: str
    config: SimConfig
    workload: Workload
    summary: str


# Chat-like lengths: prompts ~1,024 tokens, outputs ~384 (lognormal), as the demo, the load
# sweep and the max_num_seqs sweep use them.
CHAT_PROMPT = LengthDist("lognormal", 1024, 0.5, 32, 6144)
CHAT_OUTPUT = LengthDist("lognormal", 384, 0.6, 16, 2048)


def chat_traffic(
    *,
    duration: float,
    seed: int = 0,
    rate: float | None = None,
    rate_schedule: list[tuple[float, float]] | None = None,
) -> Workload:
    """Poisson chat traffic at `rate` req/s (or following `rate_schedule`)."""
    return synthetic(
        rate=rate,
        rate_schedule=rate_schedule,
        duration=duration,
        seed=seed,
        prompt=CHAT_PROMPT,
        output=CHAT_OUTPUT,
    )


def demo_traffic(*, seed: int = 0, duration: float = 600.0) -> Workload:
    """Chat traffic: 0.3 req/s, a surge to 1.1 req/s from 30% to 70% of the run."""
    if duration < 60:
        raise ConfigError(f"the demo needs at least 60 s of traffic, got {duration:g}")
    surge = [(0.0, 0.3), (0.3 * duration, 1.1), (0.7 * duration, 0.3)]
    return chat_traffic(rate_schedule=surge, duration=duration, seed=seed)


def demo_scenarios(*, seed: int = 0, duration: float = 600.0) -> list[Scenario]:
    traffic = demo_traffic(seed=seed, duration=duration)
    model = MODEL_PRESETS["llama-3.1-8b"]
    return [
        Scenario(
            name="chat-a10g",
            # The demo's logs name vLLM 0.11.0, which admits a prompt when its first chunk fits.
            config=SimConfig(
                model=model,
                gpu=GPU_PRESETS["A10G"],
                max_num_seqs=128,
                max_model_len=8192,
                scheduler_reserve_full_isl=False,
            ),
            workload=traffic,
            summary="Llama-3.1-8B on one A10G: too little KV cache for the surge",
        ),
        Scenario(
            name="chat-a100",
            config=SimConfig(
                model=model,
                gpu=GPU_PRESETS["A100-40G"],
                max_num_seqs=128,
                max_model_len=8192,
                scheduler_reserve_full_isl=False,
            ),
            workload=traffic,
            summary="the same traffic on one A100-40G: KV cache to spare",
        ),
    ]
