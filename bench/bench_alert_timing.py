"""From an overload's start to the alert (issue 25: "heard within 3 minutes"), default settings.

    python bench/bench_alert_timing.py [--timeout 300]

The demo vLLM endpoints start (the overloaded one preempts about once a second from its first
second), `preemptscope serve` scrapes them with its defaults (10 s scrapes, 60 s windows,
--min-episode 2 min), Debian's Prometheus scrapes serve with dashboards/prometheus/
prometheus.yml's own intervals (15 s) and the shipped rules. Printed: seconds from the demo's
start to serve's verdict over_capacity, and to PreemptscopeOverCapacity firing in Prometheus.
About 3 minutes of wall time, little CPU.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import httpx
import yaml
from preemptscope.exporter import demo_vllm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.exporter.conftest import serve_process  # noqa: E402
from tests.exporter.test_prometheus_integration import (  # noqa: E402
    alerts,
    start_prometheus,
    stop_process,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    httpd = demo_vllm.serve(0)
    started = time.monotonic()
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    verdict_at = firing_at = None
    with TemporaryDirectory() as tmp:
        process, url, _ = serve_process(
            "--port", "0", "--state-dir", f"{tmp}/state",
            "--scrape", f"{base}/overloaded/metrics=over",
            "--scrape", f"{base}/healthy/metrics=ok", drain=True,
        )  # fmt: skip
        config = yaml.safe_load((ROOT / "dashboards" / "prometheus" / "prometheus.yml").read_text())
        config["rule_files"] = [str(ROOT / "dashboards" / "prometheus" / "rules.yml")]
        job = next(j for j in config["scrape_configs"] if j["job_name"] == "preemptscope")
        job["static_configs"][0]["targets"] = [url.removeprefix("http://")]
        prom, client = start_prometheus(Path(tmp), config)
        try:
            with httpx.Client(base_url=url, timeout=5) as service:
                while time.monotonic() - started < args.timeout and firing_at is None:
                    now = time.monotonic()
                    listing = service.get("/api/deployments").json()["deployments"]
                    states = {d["name"]: d["verdict"] for d in listing}
                    if verdict_at is None and states.get("over") == "over_capacity":
                        verdict_at = now - started
                    fired = [
                        a
                        for a in alerts(client, "PreemptscopeOverCapacity")
                        if a["state"] == "firing"
                    ]
                    if fired:
                        firing_at = now - started
                        others = {a["labels"]["deployment"] for a in fired} - {"over"}
                        assert not others, others
                    time.sleep(1.0)
        finally:
            stop_process(prom)
            stop_process(process)
            httpd.shutdown()
            httpd.server_close()

    def shown(value: float | None) -> str:
        return "not within the timeout" if value is None else f"{value:.0f} s"

    print(f"verdict over_capacity          {shown(verdict_at)} after the overload's start")
    print(f"PreemptscopeOverCapacity fires {shown(firing_at)} after the overload's start")
    print("(serve defaults; Prometheus scrape and evaluation every 15 s, as prometheus.yml)")


if __name__ == "__main__":
    main()
