"""Traffic shared by the simulator tests."""

from __future__ import annotations

from collections.abc import Sequence

from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic


def long_chat(
    *, rate: float, duration: float, seed: int, priorities: Sequence[int] = (0,)
) -> Workload:
    """Prompts ~1,024 and outputs ~512 tokens: enough to preempt heavily on an L4."""
    return synthetic(
        rate=rate,
        duration=duration,
        seed=seed,
        priorities=priorities,
        prompt=LengthDist("lognormal", 1024, 0.5, 16, 4096),
        output=LengthDist("lognormal", 512, 0.5, 16, 2048),
    )
