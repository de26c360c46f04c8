"""`preemptscope serve`: follow logs and scrape vLLM, serve /metrics, the API and the dashboard."""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preemptscope import settings as settings_mod
from preemptscope.errors import ConfigError

# Exit status when the port cannot be bound (2 is bad input, 3 is `report --fail-on`).
EXIT_BIND = 4

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
            f" Exit status: 2 on a bad setting, {EXIT_BIND} when the port cannot be bound."
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

    # A name given to --host is a name the service answers to.
    named_host = () if config.host in ("0.0.0.0", "::") else (config.host.lower(),)
    app = create_app(
        service.snapshot,
        token=config.token,
        protect_metrics=config.protect_metrics,
        max_upload=config.max_upload,
        is_ready=service.readiness,
        window_s=config.window,
        lifespan=lifespan,
        allowed_hosts=(*config.allowed_hosts, *named_host),
        access_log=config.access_log,
    )
    return service, app


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts; ConfigError-free: OSError."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def _bind_message(host: str, port: int, exc: OSError) -> str:
    why = {
        errno.EADDRINUSE: "the port is in use"
        + (" (by default by vLLM itself)" if port == 8000 else ""),
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
        errno.EADDRNOTAVAIL: "no such address on this machine",
    }.get(exc.errno or 0, exc.strerror or str(exc))
    return (
        f"preemptscope: error: cannot listen on {host}:{port}: {why};"
        " choose another with --port (or PREEMPTSCOPE_PORT)"
    )


def run(args: argparse.Namespace) -> int:
    from preemptscope.exporter.accesslog import configure_logging

    config = settings_mod.resolve(args)
    configure_logging(config.log_level, config.log_format)
    if not config.logs and not config.scrapes and not config.prometheus:
        raise ConfigError(
            "nothing to watch: give at least one --log PATH, --scrape URL or --prometheus URL"
        )
    try:
        sock = bind(config.host, config.port)
    except socket.gaierror as exc:
        raise ConfigError(f"--host {config.host}: cannot resolve: {exc.strerror}") from None
    except OSError as exc:
        print(_bind_message(config.host, config.port, exc), file=sys.stderr)
        return EXIT_BIND
    try:
        return _serve(config, sock)
    finally:
        sock.close()


def _serve(config: settings_mod.ServeSettings, sock: socket.socket) -> int:
    import uvicorn

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
    bound = sock.getsockname()
    logging.getLogger("preemptscope.serve").info(
        "serving on http://%s:%s (docs: /docs, metrics: /metrics)",
        f"[{bound[0]}]" if ":" in bound[0] else bound[0],
        bound[1],
    )
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=config.log_level,
            log_config=None,  # configure_logging's handler (text or JSON)
            access_log=False,  # uvicorn's would write ?token= query strings; see --access-log
        )
    )
    server.run(sockets=[sock])
    return 0
