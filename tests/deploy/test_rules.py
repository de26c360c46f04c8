"""The fleet alert rules: promtool's unit tests pass, and each fleet property is load-bearing.

Every mutation below undoes one property of the rules (per-pod alerts, one preemption source,
V0's long window, absent(), the vanished-deployment alert); the unit tests must then fail,
so they test that property and not merely the current text.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "dashboards" / "prometheus"
RUNBOOKS = ROOT / "docs" / "runbooks.md"

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def rule_tests(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", "test", "rules", "rules_test.yml"],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=120,
    )


def mutated(tmp_path: Path, old: str, new: str) -> Path:
    rules = (PROM / "rules.yml").read_text()
    assert rules.count(old) == 1, f"{old!r} is not once in rules.yml"
    (tmp_path / "rules.yml").write_text(rules.replace(old, new))
    shutil.copy(PROM / "rules_test.yml", tmp_path / "rules_test.yml")
    return tmp_path


@pytest.mark.integration
def test_shipped_rules_pass_their_unit_tests() -> None:
    run = rule_tests(PROM)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout


SUM_OF_SOURCES = "sum without (source) (rate(preemptscope_preemptions_total[5m]))"
ONE_SOURCE = re.compile(
    r"(- record: deployment:preemptscope_preemptions:rate\n\s+expr: \|\n)(.*?)(\n\n)", re.S
)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("case", "old", "new"),
    [
        # The V0 counter read over 5 minutes, as the old rule did.
        ("V0 step counter", 'v0_warning_counter"}[30m]', 'v0_warning_counter"}[5m]'),
        # Replicas blended: the alert keyed by deployment/model only.
        (
            "two replicas",
            "expr: preemptscope_over_capacity == 1",
            "expr: max by (deployment, model_name) (preemptscope_over_capacity) == 1",
        ),
        (
            "two replicas (vLLM)",
            "and (vllm:num_requests_waiting or ray_vllm_num_requests_waiting) > 0",
            "and on (model_name) sum by (model_name) (vllm:num_requests_waiting) > 0",
        ),
        (
            "two replicas (vLLM preemptions)",
            "sum without (engine) (\n",
            "sum by (model_name) (\n",
        ),
        ("vanished target", "expr: absent(up{job=", "expr: (up{job="),
        ("vanished target", "unless on (deployment) preemptscope_over_capacity", ""),
        # Preemptscope's alert no longer stands back for vLLM's own counter of the same pod.
        ("log and scrape", "unless on (deployment)\n", "or on (deployment)\n"),
        # A sidecar scraping vLLM while it loads its model alerts like a broken target.
        (
            "scrape target down",
            "preemptscope_scrapes_total - preemptscope_scrape_failures_total > 0\n",
            "preemptscope_scrapes_total > 0\n",
        ),
    ],
)
def test_each_fleet_property_is_tested(tmp_path: Path, case: str, old: str, new: str) -> None:
    run = rule_tests(mutated(tmp_path, old, new))
    assert run.returncode != 0, f"the unit tests pass without the {case} property"
    output = run.stdout + run.stderr
    assert case.split(" (")[0] in output, output[-2000:]


@pytest.mark.integration
def test_summing_the_sources_double_counts_a_followed_and_scraped_server(
    tmp_path: Path,
) -> None:
    rules = (PROM / "rules.yml").read_text()
    summed, count = ONE_SOURCE.subn(lambda m: m[1] + "          " + SUM_OF_SOURCES + m[3], rules)
    assert count == 1
    (tmp_path / "rules.yml").write_text(summed)
    shutil.copy(PROM / "rules_test.yml", tmp_path / "rules_test.yml")
    run = rule_tests(tmp_path)
    assert run.returncode != 0
    assert "log and scrape of one server" in run.stdout + run.stderr


def alerts() -> list[dict[str, object]]:
    groups = yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_every_alert_links_a_runbook_that_exists() -> None:
    headings = {
        line.removeprefix("## ").strip().lower()
        for line in RUNBOOKS.read_text().splitlines()
        if line.startswith("## ")
    }
    for rule in alerts():
        annotations = rule["annotations"]
        assert isinstance(annotations, dict)
        url = str(annotations["runbook_url"])
        assert url == f"docs/runbooks.md#{str(rule['alert']).lower()}", url
        assert str(rule["alert"]).lower() in headings, f"no runbook section for {rule['alert']}"


def test_no_rule_aggregates_away_the_target() -> None:
    """`by (...)` keeps only what it names; the rules name what they remove instead."""
    groups = yaml.safe_load((PROM / "rules.yml").read_text())["groups"]
    for group in groups:
        for rule in group["rules"]:
            expr = str(rule["expr"])
            for kept in re.findall(r"\b(?:sum|max|min|avg|count|group) by \(([^)]*)\)", expr):
                # The only `by` is the pod key of vLLM's own series (always namespace, pod).
                assert kept == "namespace, pod", f"{rule.get('alert') or rule.get('record')}"


def test_every_alert_is_exercised_by_a_unit_test() -> None:
    tests = yaml.safe_load((PROM / "rules_test.yml").read_text())["tests"]
    firing = {
        case["alertname"]
        for test in tests
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {str(rule["alert"]) for rule in alerts()} == firing
