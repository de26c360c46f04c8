"""The one table of `preemptscope serve` settings: one row per setting.

Each row drives a command-line flag (`--scrape-interval`), an environment variable
(`PREEMPTSCOPE_SCRAPE_INTERVAL`) and a key of the TOML config file (`scrape_interval`); the
table in docs/exporter.md is generated from it (`python -m preemptscope.settings`). Rows only:
parsing and precedence are `preemptscope/settings.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

ENV_PREFIX = "PREEMPTSCOPE_"
# Not vLLM's 8000 (the service usually runs next to vLLM), not an allocated exporter port.
DEFAULT_PORT = 18700
Kind = Literal["str", "int", "bool", "duration", "bytes", "list", "choice"]


@dataclass(frozen=True)
class Setting:
    name: str  # attribute and config-file key
    kind: Kind
    default: Any
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    secret: bool = False  # never echoed back in errors or the startup banner

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "log",
        "list",
        [],
        "vLLM log file to follow like `tail -F`; repeatable. DEPLOYMENT defaults to the file stem."
        " In the environment, separate entries with commas.",
        metavar="PATH[=DEPLOYMENT]",
    ),
    Setting(
        "scrape",
        "list",
        [],
        "vLLM /metrics URL to scrape; repeatable. DEPLOYMENT defaults to host:port."
        " In the environment, separate entries with commas.",
        metavar="URL[=DEPLOYMENT]",
    ),
    Setting(
        "state_dir",
        "str",
        "preemptscope-state",
        "Directory for the checkpoint (file offsets, exported totals and the live history);"
        " one service per dir.",
        metavar="DIR",
    ),
    Setting(
        "host", "str", "127.0.0.1", "Address to bind. Use 0.0.0.0 only behind a network policy."
    ),
    Setting(
        "port",
        "int",
        DEFAULT_PORT,
        "TCP port to bind (0 picks a free one). The default is used by no common LLM server"
        " (vLLM and Triton take 8000, llama.cpp and TGI 8080, SGLang 30000, Ollama 11434)"
        " and lies outside Prometheus' exporter port range 9100-9999 (DCGM's 9400 included).",
    ),
    Setting(
        "allowed_hosts",
        "list",
        [],
        "Host names the service answers to besides IP addresses, localhost and --host (a"
        " request for any other Host gets 400: DNS rebinding). `*` turns the check off."
        " In the environment, separate entries with commas.",
        metavar="NAME",
    ),
    Setting(
        "token",
        "str",
        None,
        "Bearer token required by the JSON API and the dashboard (unset: open).",
        secret=True,
    ),
    Setting(
        "token_file",
        "str",
        None,
        "Read the bearer token from this file (e.g. a mounted secret) instead of --token.",
        metavar="PATH",
    ),
    Setting(
        "protect_metrics",
        "bool",
        False,
        "Require the bearer token on /metrics too (Prometheus then needs `authorization`).",
    ),
    Setting("window", "duration", 60.0, "Analysis window length (e.g. 30s, 1m)."),
    Setting(
        "history",
        "duration",
        900.0,
        "How much recent data the live analysis keeps (in memory and the state directory) and"
        " analyses (e.g. 15m).",
    ),
    Setting(
        "analysis_interval",
        "duration",
        1.0,
        "How often the live report is recomputed when new data arrived.",
    ),
    Setting(
        "poll_interval", "duration", 0.2, "How often followed files are checked for new lines."
    ),
    Setting(
        "min_episode",
        "duration",
        120.0,
        "How long over-capacity windows must last before the verdict says over capacity.",
    ),
    Setting(
        "resolve_after",
        "duration",
        120.0,
        "How long after the last over-capacity window the live verdict stops saying over"
        " capacity (the batch report keeps an hour).",
    ),
    Setting(
        "clock",
        "choice",
        "wall",
        "What 'now' is for the live analysis: the wall clock (live logs), or the newest record"
        " read (replaying old logs, e.g. `preemptscope demo` output).",
        choices=("wall", "data"),
    ),
    Setting(
        "log_timezone",
        "str",
        "UTC",
        "IANA zone of the followed logs' naive timestamps (vLLM prints local time).",
        metavar="ZONE",
    ),
    Setting("scrape_interval", "duration", 10.0, "Interval between scrapes of each --scrape URL."),
    Setting(
        "scrape_timeout",
        "duration",
        5.0,
        "Deadline of one whole scrape (not per read: a body trickled byte by byte is cut too)."
        " No redirect is followed. Unset, it is the scrape interval when that is shorter.",
    ),
    Setting(
        "scrape_max_size",
        "bytes",
        16 * 1024 * 1024,
        "Largest /metrics body read from a --scrape target, after decompression (a gzip"
        " bomb is refused, counted as a failed scrape).",
    ),
    Setting(
        "prometheus",
        "str",
        None,
        "Read every vLLM server's samples from this Prometheus HTTP API (or Thanos, Mimir, ...)"
        " instead of scraping pods: one central service for a fleet, each server named"
        " namespace/pod (docs/fleet.md).",
        metavar="URL",
    ),
    Setting(
        "prometheus_selector",
        "str",
        None,
        "With --prometheus: label matchers added to every query, e.g. '{namespace=\"llm\"}'.",
        metavar="SELECTOR",
    ),
    Setting(
        "prometheus_interval",
        "duration",
        30.0,
        "With --prometheus: how often new samples are read (and new servers discovered).",
    ),
    Setting(
        "prometheus_token_file",
        "str",
        None,
        "With --prometheus: bearer token for the Prometheus API, read from this file.",
        metavar="PATH",
    ),
    Setting(
        "prometheus_ca_file",
        "str",
        None,
        "With --prometheus: PEM CA bundle for an https Prometheus.",
        metavar="PATH",
    ),
    Setting(
        "start_at",
        "choice",
        "beginning",
        "Where to start reading a log seen for the first time (no checkpoint): the whole file"
        " or only lines written from now on.",
        choices=("beginning", "end"),
    ),
    Setting(
        "max_upload",
        "bytes",
        64 * 1024 * 1024,
        "Largest request body POST /api/report accepts (e.g. 64MiB); larger gets 413.",
    ),
    Setting(
        "log_level",
        "choice",
        "info",
        "Level of preemptscope's own log on stderr.",
        choices=("debug", "info", "warning", "error"),
    ),
    Setting(
        "log_format",
        "choice",
        "text",
        "Format of the log on stderr: lines for people, or one JSON object per line for log"
        " collectors.",
        choices=("text", "json"),
    ),
    Setting(
        "access_log",
        "bool",
        False,
        "Log every HTTP request (method, path, status, duration; query values such as"
        " ?token= are redacted). Off: only errors are logged.",
    ),
    Setting(
        "ready_after",
        "duration",
        600.0,
        "/readyz fails (503) when nothing was read from any input (a log line, a successful"
        " scrape) for this long, or no analysis finished for this long.",
    ),
)

BY_NAME: dict[str, Setting] = {s.name: s for s in SETTINGS}
