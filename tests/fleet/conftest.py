"""A simulated fleet of 21 servers over two days, as snapshot directories and as the TSDB of a
real Prometheus (backfilled with promtool), built once per test session."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from preemptscope.cli import main
from tests.fleet import fleetgen

# Scrapes every 2 minutes over two days keep the backfill under a minute on a shared machine.
SERVERS, DAYS, INTERVAL = 21, 2.0, 120.0
WINDOW = "5m"


@dataclass(frozen=True)
class FleetData:
    servers: list[fleetgen.FleetServer]
    snapshots: dict[str, Path]  # server name -> its snapshot directory
    tsdb: Path
    start: str
    end: str  # ISO, one second after the last scrape


@pytest.fixture(scope="session")
def fleet_data(tmp_path_factory: pytest.TempPathFactory) -> FleetData:
    if fleetgen.PROMETHEUS is None or fleetgen.PROMTOOL is None:
        pytest.skip("needs Debian's prometheus and promtool")
    root = tmp_path_factory.mktemp("fleet")
    servers = fleetgen.build_fleet(servers=SERVERS, days=DAYS, interval=INTERVAL)
    snapshots = {
        s.name: fleetgen.write_snapshots(s, root / "snapshots" / s.namespace / s.pod)
        for s in servers
    }
    fleetgen.write_openmetrics(servers, root / "history.om")
    fleetgen.backfill(root / "history.om", root / "tsdb")
    (root / "history.om").unlink()
    last = max(when for s in servers for when, _ in s.texts)
    first = min(s.start for s in servers)
    return FleetData(
        servers,
        snapshots,
        root / "tsdb",
        start=first.isoformat(),
        end=(last + timedelta(seconds=1)).isoformat(),
    )


@pytest.fixture(scope="session")
def prometheus(fleet_data: FleetData, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("prometheus")
    with fleetgen.running_prometheus(fleet_data.tsdb, work) as url:
        yield url


def report_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:  # type: ignore[type-arg]
    capsys.readouterr()
    code = main(["report", "--json", *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    result: dict = json.loads(out.out)  # type: ignore[type-arg]
    return result


def report_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    code = main(["report", *argv])
    out = capsys.readouterr()
    assert code == 2, out
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    return lines[0]
