"""`serve --prometheus`: one central service reads a fleet from a real Prometheus and exports a
verdict per server, named namespace/pod."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.exporter.conftest import metric_value, running_service, wait_for
from tests.fleet import fleetgen

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(
        fleetgen.PROMETHEUS is None or fleetgen.PROMTOOL is None,
        reason="needs Debian's prometheus and promtool",
    ),
]


def test_a_verdict_per_server_from_prometheus(tmp_path: Path) -> None:
    # Two hours ending now: a surge from 0:30 to 1:30 (over capacity on the A10G, not on the
    # A100), then 30 quiet minutes; every 15 s.
    now = datetime.now(UTC).replace(microsecond=0)
    servers = fleetgen.build_fleet(
        servers=3, days=2 / 24, interval=15, seeds=1, start=now - timedelta(hours=2)
    )
    fleetgen.write_openmetrics(servers, tmp_path / "recent.om")
    fleetgen.backfill(tmp_path / "recent.om", tmp_path / "tsdb")
    names = {s.pod.split("-")[0]: s.name for s in servers}
    with fleetgen.running_prometheus(tmp_path / "tsdb", tmp_path) as url:
        argv = ("--prometheus", url, "--history", "3h", "--window", "60s",
                "--prometheus-interval", "1s", "--resolve-after", "2h")  # fmt: skip
        with running_service(tmp_path / "state", *argv) as live:

            def exported() -> str | None:
                text = httpx.get(f"{live.url}/metrics", timeout=5).text
                found = [metric_value(text, "preemptscope_over_capacity", deployment=n)
                         for n in names.values()]  # fmt: skip
                return text if all(v is not None for v in found) else None

            text = wait_for(exported, timeout=90, interval=0.5)
            over = metric_value(text, "preemptscope_over_capacity", deployment=names["chat"])
            assert over == 1.0
            healthy = metric_value(text, "preemptscope_over_capacity", deployment=names["big"])
            assert healthy == 0.0
            counted = metric_value(
                text, "preemptscope_preemptions_total", deployment=names["chat"],
                source="metrics_counter",
            )  # fmt: skip
            assert counted is not None and counted > 0
            detail = httpx.get(f"{live.url}/api/deployments/{names['chat']}", timeout=5)
            assert detail.status_code == 200, detail.text
            # Each server's windows are complete up to its newest sample read, not up to the
            # analysis clock (docs/exporter.md): the gauges' window ends at or before it.
            body = detail.json()
            cut = datetime.fromisoformat(body["parameters"]["complete_before"][names["chat"]])
            assert now - timedelta(minutes=5) <= cut <= now
            gauged = datetime.fromisoformat(body["live"]["latest_window_start"])
            assert gauged + timedelta(seconds=60) <= cut
