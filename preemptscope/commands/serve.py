"""`preemptscope serve`: follow logs and scrape vLLM, serve /metrics, the API and the dashboard."""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preemptscope import settings as settings_mod
from preemptscope.errors import ConfigError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from preemptscope.exporter.service import Service


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the live service: follow logs, scrape /metrics, export Prometheus metrics",
        description=(
            "Follow vLLM logs (like tail -F) and scrape vLLM /metrics, analyse them on sliding"
            " windows, and serve /metrics, a JSON API (/api/deployments, /docs) and the live"
            " dashboard. Every flag can also be set by an environment variable or a TOML config"
            " file; flags win over the environment, which wins over the file."
        ),
    )
    settings_mod.add_arguments(parser)
    parser.set_defaults(func=run)


def build(config: settings_mod.ServeSettings) -> tuple[Service, FastAPI]:
    """The service and its app, wired as `preemptscope serve` runs them (tests use this)."""
    from preemptscope.exporter.app import create_app
    from preemptscope.exporter.service import Service

    service = Service(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            service.stop()

    app = create_app(
        service.snapshot,
        token=config.token,
        protect_metrics=config.protect_metrics,
        max_upload=config.max_upload,
        is_ready=service.ready,
        window_s=config.window,
        lifespan=lifespan,
    )
    return service, app


def run(args: argparse.Namespace) -> int:
    import uvicorn

    config = settings_mod.resolve(args)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not config.logs and not config.scrapes:
        raise ConfigError("nothing to watch: give at least one --log PATH or --scrape URL")
    service, app = build(config)
    service.open()  # a locked or damaged state directory fails here, with a clear message
    for target in config.logs:
        parent = Path(target.path).parent
        if not parent.is_dir():
            raise ConfigError(f"--log {target.path}: directory {parent} does not exist")
        if not Path(target.path).exists():
            logging.getLogger("preemptscope.serve").warning(
                "%s does not exist yet; following it from when it appears", target.path
            )
    if config.host not in ("127.0.0.1", "::1", "localhost") and config.token is None:
        logging.getLogger("preemptscope.serve").warning(
            "binding %s without --token: the API and dashboard are open to the network",
            config.host,
        )
    uvicorn.run(app, host=config.host, port=config.port, log_level=config.log_level)
    return 0
