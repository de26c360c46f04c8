"""A hostile scrape target on 127.0.0.1: gzip bomb, redirect to another local service, a body
trickled one byte per 2 s. Each scrape fails, is counted, and shutdown does not hang."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from preemptscope.ingest.scrape import fetch_metrics_text

from preemptscope.errors import ScrapeError
from tests.exporter.conftest import metric_value, running_service, wait_for
from tests.exporter.hostile import gzip_bomb, metrics, redirect_to, serving, trickle

MiB = 1024 * 1024


def test_fetch_refuses_bomb_redirect_and_trickle() -> None:
    with (
        serving({"/metrics": metrics, "/internal": metrics}) as friend,
        serving(
            {
                "/bomb": gzip_bomb(64 * MiB),
                "/small-gzip": gzip_bomb(1000),
                "/redirect": redirect_to(f"{friend.url}/internal"),
                "/trickle": trickle(2.0),
                "/pauses": trickle(2.9),
            }
        ) as evil,
    ):
        assert "vllm:num_requests_running" in fetch_metrics_text(f"{friend.url}/metrics", timeout=3)
        # A gzip body under the cap is decompressed as usual.
        assert fetch_metrics_text(f"{evil.url}/small-gzip", timeout=3) == "\0" * 1000
        with pytest.raises(ScrapeError, match=r"larger than 1048576 bytes \(decompressed\)"):
            fetch_metrics_text(f"{evil.url}/bomb", timeout=3, max_bytes=MiB)
        with pytest.raises(ScrapeError, match=r"HTTP 302 redirect to .*/internal not followed"):
            fetch_metrics_text(f"{evil.url}/redirect", timeout=3)
        assert "/internal" not in friend.hits
        for path in ("/trickle", "/pauses"):
            started = time.monotonic()
            with pytest.raises(ScrapeError, match="timed out after 3 s"):
                fetch_metrics_text(f"{evil.url}{path}", timeout=3)
            # The deadline holds inside a blocked read too: /pauses sends a byte every 2.9 s,
            # so checking between reads alone would end it at 5.8 s.
            assert time.monotonic() - started < 4.5, path


def test_service_counts_each_hostile_failure_and_stops(tmp_path: Path) -> None:
    with (
        serving({"/metrics": metrics, "/internal": metrics}) as friend,
        serving(
            {
                "/bomb": gzip_bomb(64 * MiB),
                "/redirect": redirect_to(f"{friend.url}/internal"),
                "/trickle": trickle(2.0),
            }
        ) as evil,
    ):
        with running_service(
            tmp_path / "state",
            "--scrape",
            f"{evil.url}/bomb=bomb",
            "--scrape",
            f"{evil.url}/redirect=redirect",
            "--scrape",
            f"{evil.url}/trickle=trickle",
            "--scrape",
            f"{friend.url}/metrics=good",
            "--scrape-interval",
            "3s",
            "--scrape-timeout",
            "3s",
            "--scrape-max-size",
            "1MiB",
        ) as live:
            client = live.client()

            def failed(name: str) -> dict[str, object] | None:
                response = client.get(f"/api/deployments/{name}")
                if response.status_code != 200:
                    return None
                scrapes = response.json()["live"]["scrapes"]
                return scrapes[0] if scrapes and scrapes[0]["failures"] >= 1 else None

            bomb = wait_for(lambda: failed("bomb"), timeout=30)
            assert "larger than 1048576 bytes" in str(bomb["last_error"])
            redirect = wait_for(lambda: failed("redirect"), timeout=30)
            assert "redirect" in str(redirect["last_error"])
            assert "not followed" in str(redirect["last_error"])
            slow = wait_for(lambda: failed("trickle"), timeout=30)
            assert "timed out" in str(slow["last_error"])
            text = client.get("/metrics").text
            for name in ("bomb", "redirect", "trickle"):
                assert metric_value(text, "preemptscope_scrape_up", deployment=name) == 0.0
                failures = metric_value(text, "preemptscope_scrape_failures_total", deployment=name)
                assert failures is not None and failures >= 1
            assert metric_value(text, "preemptscope_scrape_up", deployment="good") == 1.0
            assert "/internal" not in friend.hits  # the redirect led nowhere
            service = live.service
        assert service is not None
        # Shutdown waited for every scrape thread; none is stuck in a read.
        assert [t.name for t in service._threads if t.is_alive()] == []
