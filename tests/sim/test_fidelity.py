"""The one "verified" rule: the replay of now against every figure the deployment showed."""

from __future__ import annotations

import dataclasses

from preemptscope.analysis.sim.fidelity import fidelity
from preemptscope.analysis.sim.observed import ObservedFigures
from preemptscope.analysis.sim.whatif import WhatIfOutcome

NOW = WhatIfOutcome(
    settings={}, num_gpu_blocks=100, kv_cache_tokens=1600, requests=10, finished=10,
    preemptions=10, preempted_requests=5, output_throughput=100.0, request_throughput=1.0,
    e2e_mean=2.0, e2e_p99=10.0, ttft_mean=0.1, ttft_p99=0.5, recomputed_tokens=0,
)  # fmt: skip


def test_within_every_tolerance_is_verified() -> None:
    seen = ObservedFigures(requests=10, preemptions=12, output_throughput=109.0, e2e_p99=8.8)
    f = fidelity(seen, NOW)
    assert f.verified
    assert f.describe().startswith("verified: ")


def test_each_tolerance_edge_fails_alone() -> None:
    base = ObservedFigures(requests=10, preemptions=10, output_throughput=100.0, e2e_p99=10.0)
    cases = (
        ("output_throughput", dataclasses.replace(base, output_throughput=88.0)),
        ("e2e_p99", dataclasses.replace(base, e2e_p99=8.5)),
        ("preemptions", dataclasses.replace(base, preemptions=13)),
    )
    for field, seen in cases:
        f = fidelity(seen, NOW)
        assert not f.verified
        assert [c.name for c in f.misses] == [field]
        assert f.describe().startswith("unverified: the replay of now is off by ")


def test_few_preemptions_get_the_absolute_floor() -> None:
    seen = ObservedFigures(preemptions=0, output_throughput=100.0)
    assert fidelity(seen, dataclasses.replace(NOW, preemptions=2)).verified
    assert not fidelity(seen, dataclasses.replace(NOW, preemptions=3)).verified


def test_nothing_but_preemptions_cannot_verify() -> None:
    f = fidelity(ObservedFigures(preemptions=10), NOW)
    assert not f.verified
    assert "no observed throughput" in f.describe()
    assert fidelity(ObservedFigures(), NOW).to_dict()["verified"] is False
