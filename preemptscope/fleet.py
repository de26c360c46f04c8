"""A fleet from Prometheus: every vLLM server of a time range, read for the analysis.

Discovery and naming are `ingest/promfleet.py`'s (through `ingest/promapi.py`); the windows a
Prometheus reduces are `analysis/fleet_reduce.py`'s. This module owns the one step that needs
both rooms: the names the analysis reads, the batches, each deployment's `DeploymentInputs`
(reduced windows and raw samples), the join with local inputs, and the fleet table the CLI
prints. It never judges a server: the analysis does.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import polars as pl
from rich.table import Table

from preemptscope.analysis import latency
from preemptscope.analysis.analyze import DeploymentInputs
from preemptscope.analysis.events import RESTART_COUNTERS
from preemptscope.analysis.fleet_reduce import (
    BATCH_POINTS,
    Batch,
    FleetReducer,
    ServerWindows,
    group_windows,
    server_windows,
)
from preemptscope.analysis.params import AnalysisParams
from preemptscope.analysis.report import Report, Window
from preemptscope.analysis.windows import (
    M_GENERATION_TOKENS,
    M_KV,
    M_PREEMPTIONS,
    M_PROMPT_TOKENS,
    M_RUNNING,
    M_WAITING,
    M_WAITING_BY_REASON,
)
from preemptscope.errors import ConfigError
from preemptscope.ingest import promapi, promfleet
from preemptscope.ingest.promfleet import (
    IDENTITY,
    MAX_AUTO_WINDOWS,
    FleetOptions,
    Server,
    group_name,
    naming_labels,
    read_group,
    server_identity,
    server_source,
    server_summary,
)

__all__ = [
    "Fleet",
    "FleetOptions",
    "Server",
    "discover",
    "fleet_assumptions",
    "fleet_html",
    "fleet_rows",
    "fleet_table",
    "join_local",
    "needed_metrics",
    "read_group",
]

# A vLLM server has at least one of these (canonical names).
CORE = (M_RUNNING, M_KV, M_PREEMPTIONS, M_WAITING)
# Deployments whose servers are reduced in the background ahead of the one being analyzed.
PREPARE_AHEAD = 1


def needed_metrics() -> tuple[str, ...]:
    """Canonical names the analysis reads (windows, latency, events, capacity)."""
    names = [
        M_PREEMPTIONS,
        M_KV,
        M_RUNNING,
        M_WAITING,
        M_WAITING_BY_REASON,
        M_PROMPT_TOKENS,
        M_GENERATION_TOKENS,
        *RESTART_COUNTERS,
        "cache_config_info",
        "request_prompt_tokens",
        "request_generation_tokens",
        *(name for names in latency.HISTOGRAM_METRICS.values() for name in names),
    ]
    return tuple(dict.fromkeys(names))


def discover(client: promapi.PromClient, options: FleetOptions) -> list[Server]:
    """Every vLLM server with a sample in the range, in name order (ingest/promfleet.py),
    looking for the names the analysis reads."""
    return promfleet.discover(client, options, needed_metrics(), CORE)


class Fleet:
    """The servers of one Prometheus and range, discovered up front, read one group at a time.

    Raises PrometheusError (unreachable, HTTP error, bad selector, no vLLM server found).
    """

    def __init__(self, options: FleetOptions, *, client: promapi.PromClient | None = None):
        self.options = options
        self._own = client is None
        self.client = client or promapi.PromClient(
            options.url, auth=options.auth, timeout=options.timeout_s
        )
        try:
            servers = discover(self.client, options)
        except BaseException:
            self.close()
            raise
        if not servers:
            self.close()
            where = f" matching {options.selector}" if options.selector else ""
            raise promapi.PrometheusError(
                self.client.url,
                f"no vLLM server{where} between {options.start.isoformat()} and "
                f"{options.end.isoformat()} (looked for vllm:, ray_vllm_ series)",
            )
        self.groups: dict[str, list[Server]] = {}
        for server in servers:
            self.groups.setdefault(group_name(server, options.group_by), []).append(server)
        self.params = AnalysisParams(window_s=options.window)
        # Read in this order (join_local), so the batches' queries run ahead of the analysis.
        order = [server for members in self.groups.values() for server in members]
        windows = math.ceil((options.end - options.start).total_seconds() / options.window) + 1
        self.batches = plan_batches(order, windows)
        self._reducer: FleetReducer | None = FleetReducer(
            self.client,
            self.batches,
            start=options.start,
            end=options.end,
            window_s=options.window,
            selector=promapi.matchers(options.selector),
            identify=server_identity,
        )
        # One thread reduces servers (FleetReducer.take and server_windows run in it only).
        self._prep = ThreadPoolExecutor(1, thread_name_prefix="reduce")
        self._prepared: dict[str, Future[list[tuple[str, ServerWindows]]]] = {}
        self._order = {name: i for i, name in enumerate(self.groups)}
        try:
            self._reducer.wait_first()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        prep = getattr(self, "_prep", None)
        if prep is not None:
            prep.shutdown(wait=True, cancel_futures=True)
        reducer, self._reducer = getattr(self, "_reducer", None), None
        if reducer is not None:
            reducer.close()
        if self._own:
            self.client.close()

    def __enter__(self) -> Fleet:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def read(self, name: str) -> DeploymentInputs:
        """One deployment: its windows reduced by Prometheus and the samples read raw.

        Its servers' own reduction (server_windows: the raw reads, the gauges) is done in
        the background, PREPARE_AHEAD deployments ahead in `groups` order, while the caller
        analyzes the one before; the windows of the group are combined here.
        """
        assert self._reducer is not None, "read after close"
        at = self._order.get(name, 0)
        for ahead in [name, *list(self.groups)[at + 1 : at + 1 + PREPARE_AHEAD]]:
            if ahead not in self._prepared:
                self._prepared[ahead] = self._prep.submit(self._reduce, ahead)
        parts = self._prepared.pop(name).result()
        target = DeploymentInputs(name)
        for source, one in parts:
            scrapes = one.table["m_scrapes"].sum() if one.table.height else 0
            target.sources.append(
                server_summary(
                    source,
                    name,
                    {
                        "scrapes": int(scrapes or 0),
                        "series": one.series,
                        "windows": one.table.height,
                        "windows_read_raw": len(one.raw | one.busy),
                        "samples_read_raw": one.samples.height,
                    },
                )
            )
        windows = [one for _, one in parts]
        data = sorted({k for one in windows if one.table.height for k in one.table["win"]})
        target.reduced = group_windows(windows, data, self.params)
        target.metrics = pl.concat([one.samples for one in windows], how="vertical").sort(
            "timestamp", maintain_order=True
        )
        return target

    def _reduce(self, name: str) -> list[tuple[str, ServerWindows]]:
        """Each server of a group: (its source, its windows); in the background thread."""
        assert self._reducer is not None, "read after close"
        parts = []
        for server in self.groups[name]:
            reduced = self._reducer.take(server.name)
            source = server_source(self.client, server)
            one = server_windows(
                self.client,
                reduced,
                selector=lambda names, s=server: s.selector(  # type: ignore[misc]
                    promapi.matchers(self.options.selector), names
                ),
                names=server.names,
                source=source,
                deployment=name,
                drop=naming_labels(server),
                start=self.options.start,
                end=self.options.end,
                params=self.params,
            )
            parts.append((source, one))
        return parts


def plan_batches(servers: Sequence[Server], windows: int) -> list[Batch]:
    """Consecutive servers in batches of at most BATCH_POINTS window values (series x windows).

    The first batches hold 1, 2, 4, ... servers, so the first analysis waits for little; a
    batch holds servers of one identity kind (its matchers select them and no others).
    """
    batches: list[Batch] = []
    current: list[Server] = []
    cap = 1

    def flush() -> None:
        specs = [(s.name, s.matchers, s.names) for s in current]
        batches.append(Batch(specs, _batch_matchers(current), sum(s.series for s in current)))

    for server in servers:
        kind = [key for key, _ in server.matchers]
        if current and (
            kind != [key for key, _ in current[0].matchers]
            or len(current) >= cap
            or (sum(s.series for s in current) + server.series) * windows > BATCH_POINTS
        ):
            flush()
            current, cap = [], cap * 2
        current.append(server)
    if current:
        flush()
    return batches


def _batch_matchers(servers: Sequence[Server]) -> str:
    """Matchers selecting these servers' series: their identity labels' values, and the
    labels a less specific identity lacks (an `instance` server has no `pod`)."""
    keys = [key for key, _ in servers[0].matchers]
    parts = []
    for i, key in enumerate(keys):
        values = sorted({s.matchers[i][1] for s in servers})
        if len(values) == 1:
            parts.append(f"{key}={promapi.quote(values[0])}")
        else:
            alternatives = "|".join(_RE2_SPECIAL.sub(r"\\\g<0>", v) for v in values)
            parts.append(f"{key}=~{promapi.quote(alternatives)}")
    kind = tuple(keys)
    earlier = IDENTITY[: IDENTITY.index(kind)] if kind in IDENTITY else IDENTITY
    absent = {key for entry in earlier if len(entry) == 1 for key in entry}
    for entry in earlier:
        missing = [key for key in entry if key not in kind]
        if len(missing) == 1 and not absent & set(entry):
            absent.add(missing[0])
    parts += [f'{key}=""' for key in sorted(absent)]
    return ",".join(parts)


_RE2_SPECIAL = re.compile(r"[\\.+*?()|\[\]{}^$]")


def fleet_assumptions(options: FleetOptions) -> list[str]:
    """What the fleet report assumed, in words (the JSON `fleet.assumptions`, the terminal)."""
    minutes = options.window / 60
    size = f"{minutes:g} min" if minutes < 60 else f"{minutes / 60:g} h"
    days = (options.end - options.start).total_seconds() / 86400
    if options.window_s is None:
        why = (
            f"chosen for a {days:.2g}-day range (the shortest of 1 min, 5 min, 15 min, 1 h, "
            f"6 h, 1 day giving at most {MAX_AUTO_WINDOWS:,} windows; --window sets it)"
        )
    else:
        why = "as --window asked"
    return [
        f"windows of {size} {why}",
        "per window, Prometheus computed the gauges (max, mean, scrapes) and each counter's "
        "value at the window's end; the range's edges, restarts, gaps and busy windows were "
        "read raw (docs/fleet.md)",
    ]


def join_local(fleet: Fleet, local: Sequence[DeploymentInputs]) -> Iterator[DeploymentInputs]:
    """Each group's inputs, with the logs and client results named after it (PATH=NAME).

    Read lazily: one group's samples are in memory while the caller analyzes it.
    """
    by_name = {item.name: item for item in local}
    stray = [name for name in by_name if name not in fleet.groups]
    if stray:
        known = ", ".join(list(fleet.groups)[:8]) + (", ..." if len(fleet.groups) > 8 else "")
        raise ConfigError(
            f"{', '.join(stray)}: no server of that name in Prometheus; name each log or "
            f"bench file after its server with PATH=NAME (servers: {known})"
        )
    for name in fleet.groups:
        item = fleet.read(name)
        extra = by_name.get(name)
        if extra is not None:
            item.logs.extend(extra.logs)
            item.sources[:0] = extra.sources
            item.latencies = extra.latencies
            if extra.metrics is not None and item.metrics is not None:
                item.metrics = pl.concat([extra.metrics, item.metrics]).sort(
                    "timestamp", maintain_order=True
                )
        yield item


# --- The fleet overview: one row per deployment, from the report's own values ---------------

_SEVERITY = {"over_capacity": 0, "at_risk": 1, "insufficient_data": 2, "ok": 3}


def _worst_window(windows: Sequence[Window]) -> Window | None:
    """The window with the most preemptions (then the fullest KV cache); None without windows."""
    candidates = [w for w in windows if w.samples]
    if not candidates:
        return None
    return max(candidates, key=lambda w: (w.preemptions or 0, w.kv_usage_max or 0.0))


def fleet_rows(report: Report, servers: Mapping[str, Sequence[Server]]) -> list[dict[str, Any]]:
    """Per deployment, worst first: verdict, worst window, preemptions and its p99/mean.

    Every value is one of the report's (the JSON `fleet.servers`, the terminal table and the
    HTML overview all read these rows).
    """
    rows = []
    for d in report.deployments:
        worst = _worst_window(d.windows)
        metric = d.correlation.metric
        tail = None
        if worst is not None:
            names = [metric] if metric else []
            names += [n for n in ("itl", "e2e", "tpot", "ttft") if n not in names]
            tail = next(
                (
                    (name, worst.latency[name])
                    for name in names
                    if name in worst.latency and worst.latency[name].p99_over_mean is not None
                ),
                None,
            )
        members = servers.get(d.name, ())
        models = sorted({s.labels["model_name"] for s in members if "model_name" in s.labels})
        rows.append(
            {
                "name": d.name,
                "model_name": ",".join(models) or None,
                "replicas": [s.name for s in members],
                "verdict": d.verdict.state,
                "preemptions": d.preemptions.total,
                "worst_window": worst.start.isoformat() if worst is not None else None,
                "worst_window_preemptions": worst.preemptions if worst is not None else None,
                "worst_window_kv_usage_max": worst.kv_usage_max if worst is not None else None,
                "worst_window_p99_over_mean": tail[1].p99_over_mean if tail else None,
                "worst_window_latency_metric": tail[0] if tail else None,
            }
        )
    return sorted(
        rows, key=lambda r: (_SEVERITY.get(r["verdict"], 9), -(r["preemptions"] or 0), r["name"])
    )


def _cells(row: Mapping[str, Any]) -> list[str]:
    kv = row["worst_window_kv_usage_max"]
    when = row["worst_window"]
    worst = "-"
    if when is not None:
        facts = []
        if row["worst_window_preemptions"] is not None:
            facts.append(f"{row['worst_window_preemptions']} preempted")
        if kv is not None:
            facts.append(f"KV {kv:.0%}")
        worst = when[5:16].replace("T", " ") + (f" ({', '.join(facts)})" if facts else "")
    ratio = row["worst_window_p99_over_mean"]
    tail = f"{ratio:.1f} ({row['worst_window_latency_metric']})" if ratio is not None else "-"
    total = row["preemptions"]
    return [
        row["name"],
        row["model_name"] or "-",
        row["verdict"],
        worst,
        "-" if total is None else str(total),
        tail,
    ]


FLEET_COLUMNS = ("server", "model", "verdict", "worst window (UTC)", "preemptions", "p99/mean")


def fleet_table(rows: Sequence[Mapping[str, Any]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for name in FLEET_COLUMNS:
        table.add_column(name, justify="right" if name == "preemptions" else "left")
    styles = {"over_capacity": "bold red", "at_risk": "yellow", "ok": "green"}
    for row in rows:
        table.add_row(*_cells(row), style=styles.get(row["verdict"]))
    return table


def fleet_html(rows: Sequence[Mapping[str, Any]], title: str) -> str:
    """A self-contained overview section for the top of the HTML report."""
    head = "".join(f"<th>{html.escape(name)}</th>" for name in FLEET_COLUMNS)
    body = []
    for row in rows:
        cells = _cells(row)
        state = html.escape(row["verdict"])
        cells_html = "".join(f"<td>{html.escape(c)}</td>" for c in cells[:2])
        cells_html += f'<td><span class="badge state-{state}">{state}</span></td>'
        cells_html += "".join(f"<td>{html.escape(c)}</td>" for c in cells[3:])
        body.append(f"<tr>{cells_html}</tr>")
    return (
        f'<section class="panel" id="fleet"><h3>{html.escape(title)}</h3>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></section>"
    )
