"""A Prometheus' vLLM servers: found from their series, named from their labels, read raw.

Servers are found from their series (`vllm:`, `ray_vllm_` and `ray_vllm:` names, old and new)
and named from their labels: `namespace/pod` when both are present, else `pod`, `instance`,
`job`. This module owns that discovery, the range and window options (`FleetOptions`), the
raw reads of a group into `DeploymentInputs` (the live service's short polls) and the one
`SourceSummary` of a server (`server_summary`, reduced reads too). It computes no window:
`analysis/fleet_reduce.py` does, and `preemptscope/fleet.py` joins the two.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

import polars as pl
from preemptscope.ingest import promapi
from preemptscope.ingest.gathered import DeploymentInputs, SourceSummary
from preemptscope.ingest.metrics import PREFIXES, RENAMES, canonical_name

from preemptscope.errors import ConfigError

__all__ = [
    "AUTO_WINDOWS",
    "IDENTITY",
    "MAX_AUTO_WINDOWS",
    "SERIES_COLUMNS",
    "FleetOptions",
    "Server",
    "auto_window",
    "base_name",
    "discover",
    "group_name",
    "naming_labels",
    "read_group",
    "server_identity",
    "server_source",
    "server_summary",
]

# The labels that name a server, most specific first.
IDENTITY = (("namespace", "pod"), ("pod",), ("instance",), ("job",))
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The automatic window: the shortest of these giving at most MAX_AUTO_WINDOWS windows.
AUTO_WINDOWS = (60.0, 300.0, 900.0, 3600.0, 6 * 3600.0, 86400.0)
MAX_AUTO_WINDOWS = 1440
# What tells series apart in a source's `series` count.
SERIES_COLUMNS = ["source", "metric", "sample", "le", "model_name", "engine", "labels"]


def auto_window(start: datetime, end: datetime) -> float:
    """The window for a range when --window is not given: 1 min up to a day, 15 min a week."""
    span = (end - start).total_seconds()
    return next((w for w in AUTO_WINDOWS if span / w <= MAX_AUTO_WINDOWS), AUTO_WINDOWS[-1])


def base_name(exposed: str) -> str:
    """Canonical metric name of an exposed series name (suffixes _bucket/_sum/... removed)."""
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        if exposed.endswith(suffix):
            return str(canonical_name(exposed.removesuffix(suffix)))
    return str(canonical_name(exposed))


def _name_regex(canonical: Sequence[str]) -> str:
    """A PromQL regex for every exposed spelling of these canonical names."""
    bases = set(canonical)
    bases |= {old for old, new in RENAMES.items() if new in bases}
    prefixes = "|".join(re.escape(p) for p in PREFIXES)
    return f"({prefixes})({'|'.join(sorted(bases))})(_total|_bucket|_sum|_count|_created)?"


@dataclass(frozen=True)
class FleetOptions:
    url: str
    start: datetime
    end: datetime
    selector: str | None = None
    group_by: tuple[str, ...] = ()
    auth: promapi.PromAuth = field(default_factory=promapi.PromAuth)
    timeout_s: float = 30.0
    # The analysis window the servers are reduced with (AnalysisParams.window_s): Prometheus
    # computes the windows, so it must be the analysis' own. None: auto_window(start, end).
    window_s: float | None = None

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ValueError("start and end must be timezone-aware")
        if self.end <= self.start:
            raise ConfigError(f"--end {self.end.isoformat()} is not after --start")
        for label in self.group_by:
            if not _LABEL.match(label):
                raise ConfigError(f"--group-by {label!r}: not a Prometheus label name")
        if self.window_s is not None and not self.window_s >= 1:
            raise ConfigError("--window: at least 1 s with --prometheus")

    @property
    def window(self) -> float:
        """The window used: --window, else one chosen from the range (auto_window)."""
        return self.window_s if self.window_s is not None else auto_window(self.start, self.end)


@dataclass(frozen=True)
class Server:
    """One scrape target: the matchers that select it and the names it exposes."""

    name: str
    matchers: tuple[tuple[str, str], ...]
    labels: dict[str, str]  # the labels all its series share (namespace, pod, model_name, ...)
    names: tuple[str, ...]  # exposed metric names the analysis needs
    series: int = 0  # how many series it has in the range

    def selector(self, extra: str, names: Sequence[str] | None = None) -> str:
        """Its series (of `names` when given) with the user's matchers `extra`."""
        parts = [f"__name__=~{promapi.quote('|'.join(names or self.names))}"]
        parts += [f"{key}={promapi.quote(value)}" for key, value in self.matchers]
        if extra:
            parts.append(extra)
        return "{" + ",".join(parts) + "}"


def server_identity(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    for keys in IDENTITY:
        if all(key in labels for key in keys):
            return tuple((key, labels[key]) for key in keys)
    return ()


def discover(
    client: promapi.PromClient,
    options: FleetOptions,
    names: Sequence[str],
    core: Sequence[str],
) -> list[Server]:
    """Every vLLM server with a sample in the range, in name order.

    `names`: the canonical metric names looked for; `core`: a server has at least one.
    """
    extra = promapi.matchers(options.selector)
    match = "{" + ",".join([f"__name__=~{promapi.quote(_name_regex(names))}"]
                           + ([extra] if extra else [])) + "}"  # fmt: skip
    found = client.series([match], options.start, options.end)
    by_identity: dict[tuple[tuple[str, str], ...], list[dict[str, str]]] = {}
    for labels in found:
        by_identity.setdefault(server_identity(labels), []).append(labels)
    servers = []
    for identity, series in by_identity.items():
        names = sorted({s["__name__"] for s in series})
        if not any(_canonical(n) in core for n in names):
            continue
        shared = dict(series[0])
        for other in series[1:]:
            shared = {k: v for k, v in shared.items() if other.get(k) == v}
        shared.pop("__name__", None)
        models = sorted({s["model_name"] for s in series if "model_name" in s})
        if models:
            shared.setdefault("model_name", ",".join(models))
        name = "/".join(value for _, value in identity) or "prometheus"
        servers.append(Server(name, identity, shared, tuple(names), len(series)))
    return sorted(servers, key=lambda s: s.name)


def _canonical(exposed: str) -> str:
    return base_name(exposed)


def group_name(server: Server, group_by: Sequence[str]) -> str:
    if not group_by:
        return server.name
    return "/".join(server.labels.get(label) or "-" for label in group_by)


def read_group(
    prom: promapi.PromClient, name: str, members: Sequence[Server], options: FleetOptions
) -> DeploymentInputs:
    """Every raw sample of one deployment's replicas, each replica its own source.

    For the live service's polls (exporter/promsource.py: short spans since the last poll);
    the batch report reads reduced windows instead (Fleet.read).
    """
    extra = promapi.matchers(options.selector)
    target = DeploymentInputs(name)
    frames = []
    for server in members:
        chunks = list(prom.raw(server.selector(extra), options.start, options.end))
        source = server_source(prom, server)
        frame = promapi.series_frame(
            chunks, source=source, deployment=name, drop=naming_labels(server)
        )
        frames.append(frame)
        target.sources.append(
            server_summary(
                source,
                name,
                {
                    "samples": frame.height,
                    "scrapes": frame["timestamp"].n_unique() if frame.height else 0,
                    "series": frame.select(SERIES_COLUMNS).n_unique() if frame.height else 0,
                },
            )
        )
    target.metrics = pl.concat(frames, how="vertical").sort("timestamp", maintain_order=True)
    return target


def server_source(prom: promapi.PromClient, server: Server) -> str:
    return f"{prom.url} {{{','.join(f'{k}={promapi.quote(v)}' for k, v in server.matchers)}}}"


def server_summary(source: str, deployment: str, records: dict[str, int]) -> SourceSummary:
    """One Prometheus server as a source of a deployment, for raw and reduced reads alike;
    `records` counts what was read of it (samples when raw, windows when reduced)."""
    return SourceSummary(path=source, kind="metrics", deployment=deployment, records=records)


def naming_labels(server: Server) -> set[str]:
    """Labels naming the server, left out of `labels` (model_name and engine are columns)."""
    drop = {*server.labels, *(key for key, _ in server.matchers), "job", "instance"}
    return drop - {"model_name", "engine"}
