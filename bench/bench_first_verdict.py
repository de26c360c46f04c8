"""Time to the first verdict of `preemptscope serve` (issue 25: "within 3 s of its first
complete scrape"), default settings, scraping the demo vLLM endpoints on 127.0.0.1.

    python bench/bench_first_verdict.py [--runs 3] [--seconds 30] [-- extra serve flags]

One run: start the demo endpoints (exporter/demo_vllm.py) in this process, start `serve` as a
process, poll /readyz and /api/deployments every 50 ms. Reported per run, in seconds from the
end of the first scrape (the demo server's first answer):
  ready     /readyz first 200;
  verdict   the first verdict other than insufficient_data for every deployment;
and the first scrape itself from the process start (interpreter and imports).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import httpx
from preemptscope.exporter import demo_vllm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.exporter.conftest import serve_process  # noqa: E402


def one_run(seconds: float, extra: list[str]) -> dict[str, float | None]:
    first_answer: list[float] = []
    httpd = demo_vllm.serve(0)
    handler = httpd.RequestHandlerClass
    original = handler.do_GET  # type: ignore[attr-defined]

    def do_get(self: Any) -> None:
        original(self)
        if not first_answer:
            first_answer.append(time.monotonic())

    handler.do_GET = do_get  # type: ignore[attr-defined]
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    events: dict[str, float | None] = {"ready": None, "verdict": None}
    with TemporaryDirectory() as tmp:
        started = time.monotonic()
        process, url, _ = serve_process(
            "--port", "0", "--state-dir", f"{tmp}/state",
            "--scrape", f"{base}/overloaded/metrics=over",
            "--scrape", f"{base}/healthy/metrics=ok", *extra, drain=True,
        )  # fmt: skip
        try:
            with httpx.Client(base_url=url, timeout=5) as client:
                deadline = time.monotonic() + seconds
                while time.monotonic() < deadline and None in events.values():
                    now = time.monotonic()
                    if events["ready"] is None and client.get("/readyz").status_code == 200:
                        events["ready"] = now
                    if events["ready"] is not None:
                        listing = client.get("/api/deployments").json()["deployments"]
                        states = {d["name"]: d["verdict"] for d in listing}
                        if (
                            events["verdict"] is None
                            and states
                            and all(s != "insufficient_data" for s in states.values())
                        ):
                            events["verdict"] = now
                    time.sleep(0.05)
        finally:
            process.terminate()
            process.wait(timeout=20)
            httpd.shutdown()
            httpd.server_close()
    scrape = first_answer[0] if first_answer else None
    out: dict[str, float | None] = {
        "first_scrape_after_start": None if scrape is None else scrape - started
    }
    for name, at in events.items():
        out[name] = None if at is None or scrape is None else at - scrape
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("extra", nargs="*", help="serve flags (after --)")
    args = parser.parse_args()
    runs = [one_run(args.seconds, args.extra) for _ in range(args.runs)]
    for key in runs[0]:
        values = [r[key] for r in runs]
        shown = ", ".join("-" if v is None else f"{v:.2f}" for v in values)
        known = [v for v in values if v is not None]
        median = f"median {statistics.median(known):.2f} s" if known else "never"
        print(f"{key:26s} {median:16s} runs: {shown}")
    print(f"(serve {' '.join(args.extra) or 'default settings'}; {args.runs} runs)")


if __name__ == "__main__":
    main()
