"""The shipped rules against a recorded /metrics of `preemptscope serve` (tests/deploy/fixtures/
serve-demo.prom: serve scraping the two demo vLLM servers, exporter/demo_vllm.py), held for
30 minutes in `promtool test rules`: the healthy deployment fires no alert at all, the
overloaded one fires PreemptscopeOverCapacity at the first evaluation. Issue 25's false tail
alarm (a queue p99/mean of ~14,000 from vLLM's 0.3 s first bucket) fires when put back, so the
replay can fail."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "dashboards" / "prometheus"
SNAPSHOT = Path(__file__).parent / "fixtures" / "serve-demo.prom"
TARGET = {"job": "preemptscope", "instance": "10.0.0.9:18700"}
MINUTES = 30
# What serve exported for the healthy server before the fix (issue 25).
FALSE_TAIL = (
    'preemptscope_latency_p99_over_mean_ratio{deployment="ok",metric="queue",'
    'model_name="meta-llama/Llama-3.1-8B-Instruct"} 14276.97\n'
)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool"),
]


def _series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, **TARGET}.items()))
    return f"{name}{{{inner}}}"


def replay(text: str, deployment: str) -> list[dict[str, str]]:
    """Every sample of `deployment` (and the service's own), held for MINUTES: values
    constant, timestamps moving with the replay's clock, as a steady service exports them."""
    series = [{"series": _series("up", {}), "values": f"1x{MINUTES}"}]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("deployment", deployment) != deployment:
                continue
            if sample.name.endswith("_timestamp_seconds"):
                values = f"0+60x{MINUTES}"
            else:
                values = f"{sample.value:g}x{MINUTES}"
            series.append({"series": _series(sample.name, sample.labels), "values": values})
    return series


def alert_names() -> list[str]:
    groups = yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule]


def run_tests(tmp_path: Path, tests: list[dict[str, Any]]) -> subprocess.CompletedProcess[str]:
    shutil.copy(PROM / "rules.yml", tmp_path / "rules.yml")
    spec = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": tests}
    (tmp_path / "replay_test.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return subprocess.run(
        ["promtool", "test", "rules", "replay_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def quiet(text: str) -> dict[str, Any]:
    return {
        "name": "healthy replay",
        "interval": "1m",
        "input_series": replay(text, "ok"),
        "alert_rule_test": [
            {"eval_time": f"{minute}m", "alertname": name, "exp_alerts": []}
            for minute in (1, 5, 15, MINUTES)
            for name in alert_names()
        ],
    }


def test_the_recording_is_of_the_fixed_service() -> None:
    text = SNAPSHOT.read_text()
    assert 'preemptscope_over_capacity{deployment="ok"' in text
    # The healthy server's queue times: a mean, but no p99 or ratio from the 0.3 s floor.
    assert 'preemptscope_latency_mean_seconds{deployment="ok",metric="queue"' in text
    assert 'preemptscope_latency_p99_over_mean_ratio{deployment="ok",metric="queue"' not in text
    assert 'preemptscope_latency_p99_seconds{deployment="ok",metric="queue"' not in text
    assert 'preemptscope_latency_p99_over_mean_ratio{deployment="ok",metric="e2e"' in text


def test_no_alert_fires_on_the_healthy_replay(tmp_path: Path) -> None:
    run = run_tests(tmp_path, [quiet(SNAPSHOT.read_text())])
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_false_tail_of_issue_25_would_fire(tmp_path: Path) -> None:
    run = run_tests(tmp_path, [quiet(SNAPSHOT.read_text() + FALSE_TAIL)])
    assert run.returncode != 0
    out = run.stdout + run.stderr
    assert "PreemptscopeTailLatencyBlowup" in out and 'metric="queue"' in out


def test_the_overloaded_replay_is_heard_at_once(tmp_path: Path) -> None:
    """Expecting no alert at 0m fails, and the alert promtool got instead is the over-capacity
    one of the overloaded deployment (annotations left out of the comparison this way)."""
    test = {
        "name": "overloaded replay",
        "interval": "1m",
        "input_series": replay(SNAPSHOT.read_text(), "over"),
        "alert_rule_test": [
            {"eval_time": "0m", "alertname": "PreemptscopeOverCapacity", "exp_alerts": []}
        ],
    }
    run = run_tests(tmp_path, [test])
    assert run.returncode != 0
    got = (run.stdout + run.stderr).split("got:", 1)[1]
    assert 'alertname="PreemptscopeOverCapacity", deployment="over"' in got, got
