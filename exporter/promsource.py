"""`serve --prometheus`: the live service reads its servers from Prometheus, not from pods.

Every poll discovers the vLLM servers with samples in the last `--history` (new pods join, gone
ones age out), reads each server's samples since the last one already read (the first poll:
the whole history), and hands them to the live state as one scrape per server, under the
server's name (namespace/pod) and a source naming its selector. Reading is the batch report's
(preemptscope.fleet); the analysis is the live analysis of every other input.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta

from preemptscope.exporter.live import LiveState
from preemptscope.ingest.promapi import PromAuth, PromClient, PrometheusError

from preemptscope.fleet import FleetOptions, discover, read_group
from preemptscope.settings import ServeSettings, prometheus_token

LOG = logging.getLogger("preemptscope.exporter.promsource")


class PrometheusSource:
    def __init__(self, settings: ServeSettings) -> None:
        assert settings.prometheus is not None
        self.url = settings.prometheus
        self.selector = settings.prometheus_selector
        self.history = timedelta(seconds=settings.history)
        self.client = PromClient(
            self.url,
            auth=PromAuth(
                token=prometheus_token(settings.prometheus_token_file),
                ca_file=settings.prometheus_ca_file,
            ),
            # A poll must end before the next one is due.
            timeout=settings.prometheus_interval,
        )
        self._read_until: dict[str, datetime] = {}  # server -> newest sample read

    def close(self) -> None:
        self.client.close()

    def poll(self, live: LiveState, now: datetime | None = None) -> int:
        """Read what is new; the number of samples read. Failures become a failed scrape."""
        end = now or datetime.now(UTC)
        started = time.perf_counter()
        window = FleetOptions(self.url, end - self.history, end, selector=self.selector)
        try:
            servers = discover(self.client, window)
        except PrometheusError as exc:
            live.add_scrape(self.url, "prometheus", None, duration_s=0.0, error=str(exc))
            LOG.warning("discovery on %s failed: %s", self.url, exc)
            return 0
        read = 0
        for gone in set(self._read_until) - {server.name for server in servers}:
            live.unmark_input(f"prometheus\t{gone}")  # aged out: nothing more will come
        for server in servers:
            since = max(self._read_until.get(server.name, window.start), window.start)
            began = time.perf_counter()
            options = FleetOptions(self.url, since, end, selector=self.selector)
            try:
                item = read_group(self.client, server.name, [server], options)
            except PrometheusError as exc:
                source = f"{self.url} {server.name}"
                live.add_scrape(
                    source,
                    server.name,
                    None,
                    duration_s=time.perf_counter() - began,
                    error=str(exc),
                )
                continue
            frame = item.metrics
            if frame is None or frame.is_empty():
                continue
            newest = frame["timestamp"].max()
            if isinstance(newest, datetime):
                self._read_until[server.name] = newest
                # The next poll reads after `newest`: the server's windows up to it are done.
                live.mark_input(f"prometheus\t{server.name}", server.name, newest)
            live.add_scrape(
                item.sources[0].path,
                server.name,
                frame,
                duration_s=time.perf_counter() - began,
                now=newest.timestamp() if isinstance(newest, datetime) else None,
            )
            read += frame.height
        LOG.debug("read %d samples of %d servers in %.2f s", read, len(servers),
                  time.perf_counter() - started)  # fmt: skip
        return read
