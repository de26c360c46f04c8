"""Simulated logs with prompt token ids (writers.render_log(prompt_ids=True)): members of a
shared-prefix group print the same first ids, others differ from the first token on."""

from __future__ import annotations

import ast
import re
from datetime import UTC, datetime

import numpy as np
import pytest
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.workload import LengthDist, Workload, synthetic
from preemptscope.analysis.sim.writers import prompt_token_ids, render_log

START = datetime(2026, 11, 20, 10, 0, tzinfo=UTC)


def shared_workload(n: int = 40, prefix: int = 1024, seed: int = 0) -> Workload:
    """Poisson arrivals; every prompt but the last 5 starts with one `prefix`-token prompt."""
    wl = synthetic(
        rate=2.0,
        duration=n / 2.0,
        seed=seed,
        prompt=LengthDist("uniform", low=prefix + 50, high=prefix + 400),
        output=LengthDist("uniform", low=20, high=80),
    )
    group = np.where(np.arange(len(wl)) < len(wl) - 5, 0, -1).astype(np.int64)
    return wl.with_prefix(group, np.where(group == 0, prefix, 0).astype(np.int64))


def test_group_members_share_their_first_ids() -> None:
    wl = shared_workload()
    first, second, alone = (
        prompt_token_ids(wl, 0),
        prompt_token_ids(wl, 1),
        prompt_token_ids(wl, len(wl) - 1),
    )
    assert len(first) == wl.prompt_len[0] and len(alone) == wl.prompt_len[-1]
    assert first[:1024] == second[:1024] and first[1024:1040] != second[1024:1040]
    assert alone[:16] != first[:16]


@pytest.mark.parametrize("era", ["v0", "v1", "v1-preemptions"])
def test_the_log_prints_the_ids_each_era_prints(era: str) -> None:
    wl = shared_workload(n=12)
    result = simulate(wl, SimConfig(num_gpu_blocks_override=2000, enable_prefix_caching=True))
    lines = render_log(result, era=era, start=START, prompt_ids=True)
    shown = [
        ast.literal_eval(m.group(1))
        for line in lines
        if (m := re.search(r"prompt_token_ids: (\[[\d, ]*\])", line))
    ]
    assert len(shown) == len(wl)
    assert shown[0] == prompt_token_ids(wl, 0)
    if era == "v1-preemptions":  # 0.11.1+: the ids are on the DEBUG details line
        assert all("Request " in line and " details: " in line
                   for line in lines if "prompt_token_ids: [" in line)  # fmt: skip
    plain = render_log(result, era=era, start=START)
    assert not any("prompt_token_ids: [" in line for line in plain)
