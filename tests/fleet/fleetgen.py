"""A simulated vLLM fleet with Kubernetes labels, as /metrics snapshots and as Prometheus history.

Each server's history is the scheduler simulator's exposition output (analysis/sim/writers.py)
over days: quiet traffic, daily busy hours and surges, on an A10G (too little KV cache for the
surges) or an A100-40G. The same texts are written as snapshot files (`report --metrics`) and
as one OpenMetrics file with namespace/pod/instance/job/container labels and timestamps, which
`promtool tsdb create-blocks-from openmetrics` turns into TSDB blocks for a real Prometheus.
Used by tests/fleet/ and bench/bench_fleet.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import polars as pl
from preemptscope.analysis.kvmodel import GPU_PRESETS, MODEL_PRESETS
from preemptscope.analysis.sim import writers
from preemptscope.analysis.sim.config import SimConfig
from preemptscope.analysis.sim.engine import simulate
from preemptscope.analysis.sim.scenarios import chat_traffic

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
START = datetime(2026, 11, 2, tzinfo=UTC)
MODEL_NAME = "llama-8b"
HOUR = 3600.0


@dataclass(frozen=True)
class Profile:
    name: str
    gpu: str
    surge_last_day: bool  # a surge that ends 30 min before the history does


PROFILES = (
    Profile("chat", "A10G", surge_last_day=True),  # over capacity now
    Profile("big", "A100-40G", surge_last_day=True),  # same traffic, KV to spare
    Profile("old", "A10G", surge_last_day=False),  # over capacity on day 1 only
)


@dataclass(frozen=True)
class FleetServer:
    namespace: str
    pod: str
    instance: str
    start: datetime
    shift: timedelta
    rendered: list[tuple[datetime, str]]  # the simulation's snapshots, before the shift

    @property
    def texts(self) -> list[tuple[datetime, str]]:
        return [(when + self.shift, text) for when, text in self.rendered]

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.pod}"


def schedule(days: float, profile: Profile) -> list[tuple[float, float]]:
    """A trickle, two busy hours a day at 0.3 req/s and a one-hour surge at 1.0 req/s."""
    points: list[tuple[float, float]] = [(0.0, 0.01)]
    end = days * 86400
    for day in range(int(days + 0.999)):
        base = day * 86400
        busy = base + 10 * HOUR
        if busy + 2 * HOUR < end:
            points += [(busy, 0.3), (busy + 2 * HOUR, 0.01)]
        last = day == int(days + 0.999) - 1
        surge = end - 1.5 * HOUR if last else base + 14 * HOUR
        if surge + HOUR < end and (not last or profile.surge_last_day) and (last or day == 0):
            points += [(surge, 1.0), (surge + HOUR, 0.01)]
    return sorted(points)


def build_fleet(
    *,
    servers: int = 24,
    days: float = 2.0,
    interval: float = 60.0,
    seeds: int = 2,
    start: datetime = START,
) -> list[FleetServer]:
    """`servers` servers cycling over PROFILES x `seeds` simulations, each its own time shift."""
    rendered: dict[tuple[int, int], list[tuple[datetime, str]]] = {}
    model = MODEL_PRESETS["llama-3.1-8b"]
    fleet = []
    for i in range(servers):
        p, seed = i % len(PROFILES), (i // len(PROFILES)) % seeds
        profile = PROFILES[p]
        if (p, seed) not in rendered:
            config = SimConfig(
                model=model, gpu=GPU_PRESETS[profile.gpu], max_num_seqs=128, max_model_len=8192
            )
            traffic = chat_traffic(
                duration=days * 86400, rate_schedule=schedule(days, profile), seed=seed
            )
            result = simulate(traffic, config, record_tokens=False)
            rendered[(p, seed)] = writers.render_metrics_snapshots(
                result, start=start, interval=interval, model_name=MODEL_NAME
            )
        shift = timedelta(seconds=(i // (len(PROFILES) * seeds)) * 7 * 60 + i)
        fleet.append(
            FleetServer(
                namespace="llm" if i % 2 == 0 else "batch",
                pod=f"{profile.name}-{i:03d}",
                instance=f"10.0.{i // 250}.{i % 250 + 1}:8000",
                start=start + shift,
                shift=shift,
                rendered=rendered[(p, seed)],
            )
        )
    return fleet


def write_snapshots(server: FleetServer, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for when, text in server.texts:
        (directory / f"{when:%Y-%m-%dT%H-%M-%S}Z.prom").write_text(text)
    return directory


def _columns(rendered: list[tuple[datetime, str]]) -> tuple[list[tuple[str, str]], pl.DataFrame]:
    """A simulation's snapshots as (family, type) in order and one row per sample line:
    family index, series (name{labels without the braces' end), value text, time in ms."""
    families: list[tuple[str, str]] = []
    fam: list[int] = []
    keys: list[str] = []
    values: list[str] = []
    stamps: list[int] = []
    for when, text in rendered:
        ms = round(when.timestamp() * 1000)
        f = -1
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                f += 1
                if len(families) <= f:
                    _, _, name, kind = line.split(None, 3)
                    families.append((name, kind))
            elif line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                fam.append(f)
                keys.append(key)
                values.append(value)
                stamps.append(ms)
    frame = pl.DataFrame(
        {"family": fam, "key": keys, "value": values, "ms": stamps},
        schema={"family": pl.Int32, "key": pl.String, "value": pl.String, "ms": pl.Int64},
    )
    # One series' samples together, in time order (OpenMetrics asks for that per family).
    frame = frame.sort("family", "key", "ms", maintain_order=True)
    parts = pl.col("key").str.splitn("{", 2)
    frame = frame.with_columns(
        head=parts.struct.field("field_0") + "{",
        tail=pl.when(parts.struct.field("field_1").is_null())
        .then(pl.lit("} "))
        .otherwise("," + parts.struct.field("field_1") + " "),
    ).drop("key")
    return families, frame


def write_openmetrics(fleet: list[FleetServer], path: Path) -> None:
    """Every server's history as one OpenMetrics file, families contiguous (as the format asks)."""
    parsed: dict[int, pl.DataFrame] = {}
    families: list[tuple[str, str]] = []
    for server in fleet:
        if id(server.rendered) not in parsed:
            families, parsed[id(server.rendered)] = _columns(server.rendered)
    per_family = {
        key: dict(frame.partition_by("family", as_dict=True, include_key=False))
        for key, frame in parsed.items()
    }
    with path.open("wb") as out:
        for f, (family, kind) in enumerate(families):
            om_name = family.removesuffix("_total") if kind == "counter" else family
            out.write(f"# TYPE {om_name} {kind}\n".encode())
            for server in fleet:
                extra = (
                    f'namespace="{server.namespace}",pod="{server.pod}",'
                    f'instance="{server.instance}",job="vllm",container="vllm"'
                )
                rows = per_family[id(server.rendered)].get((f,))
                if rows is None:
                    continue
                ms = pl.col("ms") + round(server.shift.total_seconds() * 1000)
                line = pl.concat_str(
                    pl.col("head"), pl.lit(extra), pl.col("tail"), pl.col("value"), pl.lit(" "),
                    (ms // 1000).cast(pl.String), pl.lit("."),
                    (ms % 1000).cast(pl.String).str.zfill(3),
                )  # fmt: skip
                rows.select(line).write_csv(
                    out, include_header=False, quote_style="never", line_terminator="\n"
                )
        out.write(b"# EOF\n")


def backfill(openmetrics: Path, tsdb: Path) -> None:
    start_backfill(openmetrics, tsdb).check_returncode()


def start_backfill(openmetrics: Path, tsdb: Path, *, wait: bool = True) -> Any:
    """promtool's backfill of `openmetrics` into `tsdb` (a CompletedProcess, or a Popen)."""
    assert PROMTOOL is not None
    tsdb.mkdir(parents=True, exist_ok=True)
    run = subprocess.run if wait else subprocess.Popen
    return run(
        # One block over the whole span: promtool reads the input once per block (default 2h).
        [
            PROMTOOL,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=10000h",
            "-q",
            str(openmetrics),
            str(tsdb),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_prometheus(
    tsdb: Path, workdir: Path, *, web_config: Path | None = None, ready: httpx.Client | None = None
) -> Iterator[str]:
    """Debian's prometheus on 127.0.0.1 serving `tsdb` (scraping nothing); yields its URL.

    `web_config`: Prometheus' web configuration (TLS, basic auth); `ready` then is a client
    able to pass it, used to wait for /-/ready.
    """
    assert PROMETHEUS is not None
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
    port = free_port()
    err = (workdir / "prometheus.err").open("w")
    argv = [
        PROMETHEUS,
        f"--config.file={config}",
        f"--storage.tsdb.path={tsdb}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    if web_config is not None:
        argv.append(f"--web.config.file={web_config}")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
    tls = web_config is not None and "tls_server_config" in web_config.read_text()
    scheme = "https" if tls else "http"
    url = f"{scheme}://127.0.0.1:{port}"
    probe = ready or httpx.Client()
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if probe.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prometheus did not start: {(workdir / 'prometheus.err')}")
            time.sleep(0.2)
        yield url
    finally:
        if ready is None:
            probe.close()
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
