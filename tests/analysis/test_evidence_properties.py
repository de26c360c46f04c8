"""Every evidence sentence agrees with the JSON fields it quotes, over generated deployments."""

from __future__ import annotations

import math
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis.analyze import DeploymentInputs, analyze
from preemptscope.analysis.params import AnalysisParams

from .builders import latencies_frame, logframes, request, stat, warning

P = AnalysisParams()


def resolve(document: dict[str, Any], path: str) -> Any:
    value: Any = document
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def check_quotes(deployment: dict[str, Any]) -> None:
    """Each quoted field equals the JSON's, and each quoted number is in the sentence."""
    for evidence in deployment["verdict"]["evidence"]:
        message = evidence["message"]
        for path, quoted in evidence["quotes"].items():
            actual = resolve(deployment, path)
            if isinstance(quoted, float) and actual is not None:
                assert math.isclose(quoted, actual, rel_tol=1e-9), (path, quoted, actual)
            else:
                assert quoted == actual, (path, quoted, actual, message)
            name = path.rsplit(".", 1)[-1]
            if isinstance(quoted, int | float) and not isinstance(quoted, bool):
                if name == "unplaced" and quoted == 0:
                    continue  # "of them without a timestamp" is only said when there are some
                if name in ("p_value", "rho_low", "rho_high") or shown(quoted, message):
                    continue
                raise AssertionError(f"{path}={quoted} not in {message!r}")


def shown(value: float | int, message: str) -> bool:
    """The number appears in the sentence as the sentence formats it (int, or any rounding)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return re.search(rf"(?<![\d.]){value}(?![\d])", message.replace(",", "")) is not None
    candidates = {f"{value:.{n}f}" for n in range(4)} | {f"{value:+.2f}", f"{value:.2g}"}
    candidates |= {f"{value * 1000:.0f} ms", f"{value:.1f} s"}
    return any(c in message for c in candidates)


@st.composite
def deployments(draw: st.DrawFn) -> DeploymentInputs:
    era = draw(st.sampled_from(["v1", "v0"]))
    version = draw(st.sampled_from([None, "0.3.3", "0.6.3", "0.9.1"]))
    with_count = era == "v1" and draw(st.booleans())
    n = draw(st.integers(0, 60))
    step = draw(st.sampled_from([5, 10, 30]))
    rows = []
    for i in range(n):
        kv = draw(st.floats(0.0, 1.0))
        running = draw(st.integers(0, 64))
        waiting = draw(st.integers(0, 40))
        preempted = draw(st.integers(0, 5)) if with_count else None
        rows.append(stat(i * step, running=running, waiting=waiting, kv=kv, era=era,
                         preemptions=preempted))  # fmt: skip
    warnings = []
    if era == "v0":
        cumulative = 0
        for t in sorted(draw(st.lists(st.integers(-1, n * step), max_size=6))):
            cumulative += 50 if cumulative else 1
            warnings.append(warning(None if t < 0 else t, cumulative))
    latencies = None
    if draw(st.booleans()) and n:
        reqs = [request(i * step, draw(st.floats(0.1, 30.0))) for i in range(n)]
        latencies = latencies_frame(reqs)
    # The cap and the budget printed or not, so the limit is measured, inferred or unknown.
    config: dict[str, str] = {}
    if draw(st.booleans()):
        config["max_num_seqs"] = str(draw(st.integers(1, 64)))
    if draw(st.booleans()):
        config["max_num_batched_tokens"] = str(draw(st.sampled_from([64, 256, 2048, 8192])))
    return DeploymentInputs(
        "d",
        logs=[logframes(rows, warnings, config=config, era=era, version=version)],
        latencies=latencies,
    )


@settings(max_examples=100, deadline=None)
@given(deployments())
def test_evidence_quotes_the_json(inputs: DeploymentInputs) -> None:
    check_quotes(analyze([inputs], P).to_dict()["deployments"][0])


@settings(max_examples=100, deadline=None)
@given(deployments())
def test_the_limit_follows_the_windows(inputs: DeploymentInputs) -> None:
    """A named limit held requests back in flagged windows; a saturated window is never ok."""
    dep = analyze([inputs], P).deployments[0]
    v, f = dep.verdict, dep.verdict.limit_detail
    assert f is not None and f.reason
    flagged = [w for w in dep.windows if (w.over_capacity or w.queue_bound) and not w.idle]
    if v.limit in ("kv_cache", "max_num_seqs", "max_num_batched_tokens"):
        assert f.windows[v.limit] == sum(1 for w in flagged if v.limit in w.limits) > 0
        assert v.state != "ok" or not any(w.queue_bound for w in dep.windows)
    if v.state == "ok":
        assert not any(w.queue_bound for w in dep.windows if w.samples)
    if v.state == "insufficient_data":
        assert v.limit == "unknown"


@settings(max_examples=100, deadline=None)
@given(deployments())
def test_no_count_is_null_and_counts_add_up(inputs: DeploymentInputs) -> None:
    dep = analyze([inputs], P).deployments[0]
    p = dep.preemptions
    counted = [w for w in dep.windows if w.preemptions is not None]
    assert p.windows_counted == len(counted)
    if p.total is None:
        assert not counted and p.unplaced == 0
    else:
        assert p.total == sum(w.preemptions or 0 for w in counted) + p.unplaced
    with_p = [w for w in counted if (w.preemptions or 0) > 0 and not w.forced_preemptions]
    assert p.windows_with_preemption == len(with_p) <= p.windows_counted
    log = inputs.logs[0]
    if log.log_era == "v0" and not log["preemption_warning"].height:
        warns = log.vllm_version in ("0.6.3", "0.9.1")
        assert (p.total is not None) == (warns and bool(counted))
    # The correlation is evidence only when it supports the claim, from enough windows.
    codes = {e.code for e in dep.verdict.evidence}
    if "spearman_rho" in codes:
        c = dep.correlation
        assert c.spearman_rho is not None and c.spearman_rho > 0
        assert c.pairs >= P.min_correlation_windows and c.p_value is not None
        assert c.p_value < P.correlation_alpha
