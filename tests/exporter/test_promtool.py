"""Rules, Prometheus config, Grafana dashboard and docker-compose: validated with real tools."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PROM = ROOT / "dashboards" / "prometheus"
GRAFANA = ROOT / "dashboards" / "grafana"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@needs_promtool
@pytest.mark.integration
def test_rules_are_valid_and_their_unit_tests_pass() -> None:
    check = promtool("check", "rules", "rules.yml")
    assert check.returncode == 0, check.stdout + check.stderr
    unit = promtool("test", "rules", "rules_test.yml")
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "SUCCESS" in unit.stdout


@needs_promtool
@pytest.mark.integration
def test_rule_unit_tests_can_fail(tmp_path: Path) -> None:
    """A broken threshold must make `promtool test rules` fail: the tests test something."""
    shutil.copy(PROM / "rules_test.yml", tmp_path / "rules_test.yml")
    rules = (PROM / "rules.yml").read_text()
    broken = rules.replace("preemptscope_over_capacity == 1", "preemptscope_over_capacity == 2")
    assert broken != rules
    (tmp_path / "rules.yml").write_text(broken)
    unit = promtool("test", "rules", "rules_test.yml", cwd=tmp_path)
    assert unit.returncode != 0


@needs_promtool
@pytest.mark.integration
def test_prometheus_config_is_valid() -> None:
    check = promtool("check", "config", "prometheus.yml")
    assert check.returncode == 0, check.stdout + check.stderr


def test_vllm_rules_use_vllms_real_metric_names() -> None:
    text = (PROM / "rules.yml").read_text()
    assert "rate(vllm:num_preemptions_total[5m])" in text
    assert "vllm:kv_cache_usage_perc" in text and "vllm:gpu_cache_usage_perc" in text
    groups = yaml.safe_load(text)["groups"]
    exprs = [str(rule["expr"]) for group in groups for rule in group["rules"]]
    # Not the name llm-d's alert used, which never matches (vLLM exposes ..._total).
    assert not any(re.search(r"vllm:num_preemptions(?!_total)\b", e) for e in exprs)


def _exported_names() -> set[str]:
    source = (ROOT / "exporter" / "collector.py").read_text()
    names = set(re.findall(r'"(preemptscope_[a-z0-9_]+)"', source))
    counters = set(re.findall(r'CounterMetricFamily\(\s*"(preemptscope_[a-z0-9_]+)"', source))
    return names | {f"{name}_total" for name in counters} | {"preemptscope_build_info"}


def test_dashboard_and_rules_only_query_metrics_that_exist() -> None:
    exported = _exported_names()
    dashboard = json.loads((GRAFANA / "preemptscope.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs.append((PROM / "rules.yml").read_text())
    used = {name for expr in exprs for name in re.findall(r"\bpreemptscope_[a-z0-9_]+", expr)}
    assert used, "no preemptscope metric queried"
    assert used <= exported, f"queried but never exported: {sorted(used - exported)}"
    vllm = {name for expr in exprs for name in re.findall(r"vllm:[a-z_]+", expr)}
    assert {
        "vllm:num_preemptions_total",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    } <= vllm
    assert dashboard["uid"] and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    providers = yaml.safe_load(
        (GRAFANA / "provisioning" / "dashboards" / "preemptscope.yml").read_text()
    )
    path = providers["providers"][0]["options"]["path"]
    sources = yaml.safe_load(
        (GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    assert sources["datasources"][0]["type"] == "prometheus"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert any(m.endswith(f":{path}/preemptscope.json:ro") for m in mounts)


def test_compose_file_is_complete_and_consistent() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"vllm-demo", "preemptscope", "prometheus", "grafana"}
    for name, service in services.items():
        assert "image" in service or "build" in service, name
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name}: {source} missing from the repo"
            else:
                assert source in compose.get("volumes", {}), f"{name}: undeclared volume {source}"
        for dependency in service.get("depends_on", []):
            assert dependency in services
    assert services["preemptscope"]["build"] == "."
    assert (ROOT / "Dockerfile").exists()
    # preemptscope scrapes the demo vLLM service (the stack runs as processes in
    # tests/deploy/test_compose_stack.py).
    command = services["preemptscope"]["command"]
    assert command[0] == "serve"
    targets = [command[i + 1] for i, arg in enumerate(command) if arg == "--scrape"]
    assert targets and all(t.startswith("http://vllm-demo:8000/") for t in targets)
    assert services["vllm-demo"]["entrypoint"][-1] == "preemptscope.exporter.demo_vllm"
    # The scrape target in prometheus.yml is the compose service.
    prom = yaml.safe_load((PROM / "prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "preemptscope")
    assert job["static_configs"][0]["targets"] == ["preemptscope:18700"]
    prom_mounts = services["prometheus"]["volumes"]
    assert "./dashboards/prometheus/rules.yml:/etc/prometheus/rules.yml:ro" in prom_mounts


def test_dockerfile_installs_the_package_and_runs_unprivileged() -> None:
    text = (ROOT / "Dockerfile").read_text()
    for folder in ("preemptscope", "ingest", "analysis", "exporter", "dashboards"):
        assert f"COPY {folder} ./{folder}" in text
    assert "pip install --no-deps --no-build-isolation ." in text and "USER preemptscope" in text
    assert 'ENTRYPOINT ["preemptscope"]' in text
