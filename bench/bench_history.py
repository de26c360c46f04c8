"""Size and cost of the live history in the state directory (exporter/history.py).

    python bench/bench_history.py

Two demo vLLM servers (exporter/demo_vllm.py) scraped every 10 s for 15 minutes (the default
--history): the incremental segments (one table per scrape, as checkpoints write them) and the
compacted history (one table per deployment, as every 60th checkpoint writes it), with the time
to encode and decode each.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import polars as pl
from preemptscope.exporter import demo_vllm
from preemptscope.exporter.history import HistorySegment, decode, encode
from preemptscope.ingest.metrics import parse_metrics_text

SCRAPES = 90  # 15 minutes at 10 s
T0 = datetime(2026, 12, 5, tzinfo=UTC)


def timed(segment: HistorySegment) -> tuple[int, float, float]:
    started = time.perf_counter()
    data = encode(segment)
    encoded = time.perf_counter() - started
    started = time.perf_counter()
    decode(data)
    return len(data), encoded, time.perf_counter() - started


def main() -> None:
    scraped: list[tuple[str, pl.DataFrame]] = []
    for name, profile in (("over", demo_vllm.OVERLOADED), ("ok", demo_vllm.HEALTHY)):
        server = demo_vllm.SimulatedServer(profile, seed=1, clock=0.0)
        for i in range(SCRAPES):
            text = server.exposition(10.0 * (i + 1)).decode()
            at = T0 + timedelta(seconds=10 * i)
            scraped.append(
                (name, parse_metrics_text(text, timestamp=at, source="s", deployment=name))
            )
    rows = scraped[0][1].height
    merged = [(n, pl.concat([f for m, f in scraped if m == n])) for n in ("over", "ok")]
    for label, segment in (
        (f"{len(scraped)} scrapes, one table each", HistorySegment(metrics=scraped)),
        ("compacted (one table per deployment)", HistorySegment(metrics=merged)),
    ):
        size, encoded, decoded = timed(segment)
        print(
            f"{label:40s} {size / 1e3:8.1f} KB  encode {encoded * 1e3:6.1f} ms"
            f"  decode {decoded * 1e3:6.1f} ms"
        )
    print(f"({rows} samples a scrape; 2 servers, {SCRAPES} scrapes each)")


if __name__ == "__main__":
    main()
