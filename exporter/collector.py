"""preemptscope's own /metrics: a custom Collector over the live snapshot, on its own registry.

Conventions: `preemptscope_` prefix, snake_case, base units (seconds, ratios 0..1), `_total`
counters, labels `deployment` (+ `model_name` on deployment gauges, `metric` on latency,
`source` on preemption counts). Window gauges describe the last complete analysis window that
has data (never the one still filling), so a series stays put through a window boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from preemptscope.analysis.report import DeploymentReport, Report, Window
from preemptscope.dashboards.live import window_split
from preemptscope.exporter.live import PREEMPTION_SOURCES, Snapshot
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
)

from preemptscope import __version__

VERDICT_STATES = ("ok", "at_risk", "over_capacity", "insufficient_data")
ROTATION_KINDS = ("rename", "copytruncate", "truncate", "missing")


def latest_window(deployment: DeploymentReport, report: Report) -> Window | None:
    """The last complete window holding data: gauges never describe a window that can still
    change (dashboards/live.py window_split)."""
    return window_split(deployment, report)[0]


class SnapshotCollector:
    """Renders a Snapshot as metric families; `get_snapshot` is called on every scrape."""

    def __init__(self, get_snapshot: Callable[[], Snapshot]) -> None:
        self._get_snapshot = get_snapshot

    def describe(self) -> list[Metric]:
        return []  # families depend on the data; nothing to pre-register

    def collect(self) -> Iterator[Metric]:
        snap = self._get_snapshot()
        yield from _build_info()
        yield from _counters(snap)
        yield from _scrape_families(snap)
        yield from _analysis_families(snap)


def _build_info() -> Iterator[Metric]:
    info = InfoMetricFamily("preemptscope_build", "preemptscope version.")
    info.add_metric([], {"version": __version__})
    yield info


def _counters(snap: Snapshot) -> Iterator[Metric]:
    preemptions = CounterMetricFamily(
        "preemptscope_preemptions",
        "KV-cache preemptions counted since first start, by evidence source: vLLM's counter"
        " (exact), V1 stats Preemptions field (exact), V0 warning counter (a lower bound)."
        " Only sources that exist for the deployment have a series.",
        labels=["deployment", "source"],
    )
    lines = CounterMetricFamily(
        "preemptscope_log_lines_read", "Physical log lines read.", labels=["deployment"]
    )
    unrecognized = CounterMetricFamily(
        "preemptscope_log_lines_unrecognized",
        "Log lines no known vLLM format matched.",
        labels=["deployment"],
    )
    rotations = CounterMetricFamily(
        "preemptscope_log_rotations",
        "Log rotations seen, by kind (truncate: no copy found; missing: the file was deleted,"
        " not renamed).",
        labels=["deployment", "kind"],
    )
    gaps = CounterMetricFamily(
        "preemptscope_log_gaps",
        "Rotations after which unread lines may have been lost (copy not found).",
        labels=["deployment"],
    )
    last_event = GaugeMetricFamily(
        "preemptscope_last_event_timestamp_seconds",
        "Time of the newest record read, by input (log: the record's own time; metrics: scrape).",
        labels=["deployment", "input"],
    )
    for name, totals in sorted(snap.totals.items()):
        for source in PREEMPTION_SOURCES:
            # A series only where the source exists: an absent count is no series, never 0.
            if source in totals.preemptions:
                preemptions.add_metric([name, source], float(totals.preemptions[source]))
        lines.add_metric([name], float(totals.lines))
        unrecognized.add_metric([name], float(totals.unrecognized_lines))
        for kind in ROTATION_KINDS:
            rotations.add_metric([name, kind], float(totals.rotations.get(kind, 0)))
        gaps.add_metric([name], float(totals.gaps))
        for source, stamp in sorted(totals.last_event.items()):
            last_event.add_metric([name, source], stamp)
    yield from (preemptions, lines, unrecognized, rotations, gaps, last_event)


def _scrape_families(snap: Snapshot) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "preemptscope_scrape_up",
        "1 when the last scrape of the vLLM /metrics target succeeded.",
        labels=["deployment", "target"],
    )
    duration = GaugeMetricFamily(
        "preemptscope_scrape_duration_seconds",
        "Duration of the last scrape of the target.",
        labels=["deployment", "target"],
    )
    scrapes = CounterMetricFamily(
        "preemptscope_scrapes", "Scrapes attempted.", labels=["deployment", "target"]
    )
    failures = CounterMetricFamily(
        "preemptscope_scrape_failures", "Scrapes that failed.", labels=["deployment", "target"]
    )
    for url, status in sorted(snap.scrapes.items()):
        labels = [status.deployment, url]
        up.add_metric(labels, 1.0 if status.up else 0.0)
        if status.duration_s is not None:
            duration.add_metric(labels, status.duration_s)
        scrapes.add_metric(labels, float(status.scrapes))
        failures.add_metric(labels, float(status.failures))
    yield from (up, duration, scrapes, failures)


def _analysis_families(snap: Snapshot) -> Iterator[Metric]:
    report = snap.report
    analysed = GaugeMetricFamily(
        "preemptscope_analysis_timestamp_seconds", "When the live analysis last ran."
    )
    took = GaugeMetricFamily(
        "preemptscope_analysis_duration_seconds", "How long the last live analysis took."
    )
    if snap.analysed_at is not None:
        analysed.add_metric([], snap.analysed_at)
    if snap.analysis_seconds is not None:
        took.add_metric([], snap.analysis_seconds)
    yield from (analysed, took)
    if report is None:
        return
    labels = ["deployment", "model_name"]
    over = GaugeMetricFamily(
        "preemptscope_over_capacity",
        "1 when the verdict over the live history is over_capacity.",
        labels=labels,
    )
    verdict = StateSetMetricFamily(
        "preemptscope_verdict", "Verdict over the live history.", labels=labels
    )
    gauges: dict[str, GaugeMetricFamily] = {
        name: GaugeMetricFamily(name, doc, labels=labels)
        for name, doc in (
            ("preemptscope_kv_cache_usage_ratio", "Mean KV-cache usage, last complete window."),
            ("preemptscope_kv_cache_usage_max_ratio", "Peak KV-cache usage, last complete window."),
            ("preemptscope_requests_running", "Mean running requests, last complete window."),
            ("preemptscope_requests_waiting", "Mean waiting requests, last complete window."),
            ("preemptscope_requests_waiting_max", "Peak waiting requests, last complete window."),
            ("preemptscope_window_preemptions", "Preemptions counted in the last complete window."),
            (
                "preemptscope_window_over_capacity",
                "1 when the last complete window is over capacity.",
            ),
            ("preemptscope_window_seconds", "Length of the analysis windows."),
            (
                "preemptscope_window_end_timestamp_seconds",
                "End of the last complete window, the one the window gauges describe.",
            ),
        )
    }
    latency_labels = ["deployment", "model_name", "metric"]
    p99 = GaugeMetricFamily(
        "preemptscope_latency_p99_seconds",
        "p99 latency, last complete window (none for a p99 in the first bucket).",
        labels=latency_labels,
    )
    mean = GaugeMetricFamily(
        "preemptscope_latency_mean_seconds",
        "Mean latency, last complete window.",
        labels=latency_labels,
    )
    ratio = GaugeMetricFamily(
        "preemptscope_latency_p99_over_mean_ratio",
        "p99 / mean latency in the last complete window: the tail that averages hide (only"
        " where the buckets resolve it).",
        labels=latency_labels,
    )
    window_s = float(report.parameters.get("window_s", 0.0))
    for deployment in report.deployments:
        model = snap.model_names.get(deployment.name) or deployment.capacity.model or ""
        values = [deployment.name, model]
        state = deployment.verdict.state
        over.add_metric(values, 1.0 if state == "over_capacity" else 0.0)
        verdict.add_metric(values, {s: s == state for s in VERDICT_STATES})
        gauges["preemptscope_window_seconds"].add_metric(values, window_s)
        window = latest_window(deployment, report)
        if window is None:
            continue
        _add(gauges["preemptscope_kv_cache_usage_ratio"], values, window.kv_usage_mean)
        _add(gauges["preemptscope_kv_cache_usage_max_ratio"], values, window.kv_usage_max)
        _add(gauges["preemptscope_requests_running"], values, window.running_mean)
        _add(gauges["preemptscope_requests_waiting"], values, window.waiting_mean)
        _add(gauges["preemptscope_requests_waiting_max"], values, window.waiting_max)
        _add(gauges["preemptscope_window_preemptions"], values, window.preemptions)
        gauges["preemptscope_window_over_capacity"].add_metric(
            values, 1.0 if window.over_capacity else 0.0
        )
        gauges["preemptscope_window_end_timestamp_seconds"].add_metric(
            values, window.end.timestamp()
        )
        for metric, stats in sorted(_latest_latency(deployment, window).items()):
            _add(p99, [*values, metric], stats.p99)
            _add(mean, [*values, metric], stats.mean)
            _add(ratio, [*values, metric], stats.p99_over_mean)
    yield from (over, verdict, *gauges.values(), p99, mean, ratio)


def _latest_latency(deployment: DeploymentReport, last: Window) -> dict[str, Any]:
    """Per latency metric, the stats of the latest complete window (`last` or before) that has
    them."""
    found: dict[str, Any] = {}
    for window in reversed(deployment.windows):
        if window.end > last.end:
            continue
        for metric, stats in window.latency.items():
            if metric not in found and stats.count > 0:
                found[metric] = stats
    return found


def _add(family: GaugeMetricFamily, labels: list[str], value: float | int | None) -> None:
    if value is not None:
        family.add_metric(labels, float(value))


def build_registry(get_snapshot: Callable[[], Snapshot]) -> CollectorRegistry:
    """A registry holding only preemptscope's collector (no process/platform defaults)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(get_snapshot))
    return registry
