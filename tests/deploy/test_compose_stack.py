"""docker-compose.yml's stack as processes (no Docker here): the `vllm-demo` and `preemptscope`
services run their compose commands on 127.0.0.1, Debian's Prometheus scrapes preemptscope with
dashboards/prometheus/prometheus.yml and the shipped rules. The preemption panels fill, the
over-capacity alert fires for the overloaded deployment and nothing fires for the healthy one,
and /readyz stays ready.

Shortened for a test (environment, the compose command untouched): --window 10s,
--min-episode 20s, --scrape-interval 1s; Prometheus scrapes and evaluates every second."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.exporter.conftest import serve_process, wait_for
from tests.exporter.test_prometheus_integration import (
    alerts,
    free_port,
    query,
    start_prometheus,
    stop_process,
)

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = shutil.which("prometheus")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs Debian's prometheus binary"),
]


def compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def test_the_demo_stack_fills_the_panels_and_fires_the_alert(tmp_path: Path) -> None:
    services = compose()
    demo = services["vllm-demo"]
    demo_port = free_port()
    argv = list(demo["command"])
    argv[argv.index("--port") + 1] = str(demo_port)
    argv[argv.index("--host") + 1] = "127.0.0.1"
    assert demo["entrypoint"][:2] == ["python", "-m"]
    fake = subprocess.Popen(
        [sys.executable, "-m", demo["entrypoint"][2], *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    service = services["preemptscope"]
    command = [
        arg.replace("http://vllm-demo:8000/", f"http://127.0.0.1:{demo_port}/")
        for arg in service["command"]
    ]
    assert command[0] == "serve"
    env = {
        **{k: str(v) for k, v in service["environment"].items()},
        "PREEMPTSCOPE_STATE_DIR": str(tmp_path / "state"),
        "PREEMPTSCOPE_PORT": "0",
        "PREEMPTSCOPE_WINDOW": "10s",
        "PREEMPTSCOPE_MIN_EPISODE": "20s",
        "PREEMPTSCOPE_SCRAPE_INTERVAL": "1s",
    }
    process: subprocess.Popen[str] | None = None
    prom: subprocess.Popen[bytes] | None = None
    try:
        process, url, _ = serve_process(*command[1:], env=env, drain=True)
        config = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [str(ROOT / "dashboards" / "prometheus" / "rules.yml")]
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "preemptscope")
        assert job["static_configs"][0]["targets"] == ["preemptscope:18700"]
        job["static_configs"][0]["targets"] = [url.removeprefix("http://")]
        prom, client = start_prometheus(tmp_path, config)
        firing = wait_for(
            lambda: [
                a for a in alerts(client, "PreemptscopeOverCapacity") if a["state"] == "firing"
            ],
            timeout=120,
            interval=1.0,
        )
        assert [a["labels"]["deployment"] for a in firing] == ["chat-overloaded"]
        # The preemption panels: vLLM's counter, counted by preemptscope, as a rate.
        rate = wait_for(
            lambda: query(client, "deployment:preemptscope_preemptions:rate"), timeout=30
        )
        by_name = {r["metric"]["deployment"]: float(r["value"][1]) for r in rate}
        # (rate()[5m] divides by the whole 5 minutes: it reaches 1/s only after them.)
        assert by_name["chat-overloaded"] > 0 and by_name["chat-healthy"] == 0.0
        for expr in (
            "preemptscope_window_preemptions",
            "preemptscope_kv_cache_usage_max_ratio",
            "preemptscope_requests_waiting",
            'preemptscope_latency_p99_over_mean_ratio{metric="e2e"}',
        ):
            names = {r["metric"]["deployment"] for r in query(client, expr)}
            assert names == {"chat-overloaded", "chat-healthy"}, expr
        # Every preemptscope panel of the Grafana dashboard has data (the vLLM panels read
        # vLLM's own metrics, which this stack's Prometheus does not scrape: its `vllm` job
        # is for your servers).
        dashboard = json.loads((ROOT / "dashboards" / "grafana" / "preemptscope.json").read_text())
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                expr = str(target.get("expr", ""))
                if not expr or "vllm:" in expr:
                    continue
                for variable in ("namespace", "pod", "instance", "deployment", "model_name"):
                    expr = expr.replace(f"${variable}", ".*")
                expr = expr.replace("$__rate_interval", "1m")
                assert query(client, expr), (panel["title"], expr)
        # Nothing fires for the healthy deployment (its queue p99 lies in vLLM's first bucket).
        every = client.get("/api/v1/alerts").json()["data"]["alerts"]
        assert not [a for a in every if a["labels"].get("deployment") == "chat-healthy"]
        assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    finally:
        if prom is not None:
            stop_process(prom)
        if process is not None:
            stop_process(process)
        stop_process(fake)
