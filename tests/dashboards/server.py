"""A real uvicorn server on 127.0.0.1, port 0, running a small app with the dashboard router."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI, Header, HTTPException
from preemptscope.analysis.report import Report
from preemptscope.exporter.pages import build_router

TOKEN = "s3cret-token"


@dataclass
class Holder:
    """The report the app serves; tests swap it to see the page update."""

    report: Report

    def get(self) -> Report:
        return self.report


def require_token(authorization: str | None = Header(default=None)) -> None:
    if authorization != f"Bearer {TOKEN}":
        raise HTTPException(status_code=401, detail="bearer token required")


def make_app(holder: Holder, *, token: bool) -> FastAPI:
    app = FastAPI()
    app.include_router(build_router(holder.get, [require_token] if token else []))
    return app


@contextmanager
def serve(app: FastAPI) -> Iterator[str]:
    """Run `app` in a thread; yields its base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
