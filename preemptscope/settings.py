"""`preemptscope serve` settings resolved from flags, environment, config file and defaults.

The rows are `preemptscope/settings_table.py`'s; each drives a flag (`--scrape-interval`), an
environment variable (`PREEMPTSCOPE_SCRAPE_INTERVAL`) and a TOML key (`scrape_interval`), and
`python -m preemptscope.settings` prints the table in docs/exporter.md. Precedence, highest
first: flag, environment, config file, default. This module owns parsing and precedence; the
`--log`/`--scrape` target forms are `preemptscope/targets.py`'s. It never starts the service.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from preemptscope.errors import ConfigError
from preemptscope.settings_table import BY_NAME, DEFAULT_PORT, ENV_PREFIX, SETTINGS, Kind, Setting
from preemptscope.targets import LogTarget, ScrapeTarget, parse_log_target, parse_scrape_target

__all__ = [
    "BY_NAME",
    "DEFAULT_PORT",
    "ENV_PREFIX",
    "SETTINGS",
    "Kind",
    "LogTarget",
    "ScrapeTarget",
    "ServeSettings",
    "Setting",
    "add_arguments",
    "load_config_file",
    "markdown_table",
    "parse_bytes",
    "parse_duration",
    "parse_log_target",
    "parse_scrape_target",
    "prometheus_token",
    "read_secret",
    "resolve",
]


@dataclass(frozen=True)
class ServeSettings:
    """Resolved settings; `origins` says where each value came from (flag/env/config/default)."""

    logs: tuple[LogTarget, ...]
    scrapes: tuple[ScrapeTarget, ...]
    state_dir: Path
    host: str
    port: int
    allowed_hosts: tuple[str, ...]
    token: str | None
    protect_metrics: bool
    window: float
    history: float
    analysis_interval: float
    poll_interval: float
    min_episode: float
    resolve_after: float
    clock: str
    log_timezone: str
    scrape_interval: float
    scrape_timeout: float
    scrape_max_size: int
    start_at: str
    max_upload: int
    log_level: str
    log_format: str
    access_log: bool
    ready_after: float
    prometheus: str | None = None
    prometheus_selector: str | None = None
    prometheus_interval: float = 30.0
    prometheus_token_file: str | None = None  # checked readable and non-empty here
    prometheus_ca_file: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict)


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|min|m|h|d)?\s*$")
_DURATION_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    None: 1.0,
}
_BYTES = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_BYTE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4}


def parse_duration(text: str) -> float:
    """'250ms', '10s', '5m' (or '5min'), '1h', '1d' or a bare number of seconds -> seconds (> 0)."""
    match = _DURATION.match(text)
    if not match:
        raise ValueError(f"expected a duration such as 10s, 5m or 250ms, got {text!r}")
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"expected a positive duration, got {text!r}")
    return seconds


def parse_bytes(text: str) -> int:
    """'64MiB', '10MB', '512k' or a bare number of bytes -> bytes (> 0)."""
    match = _BYTES.match(text)
    if not match:
        raise ValueError(f"expected a size such as 64MiB or 10MB, got {text!r}")
    unit = (match.group(2) or "").lower()
    if unit.endswith("ib"):
        factor = 1024 ** ("kmgt".index(unit[0]) + 1)
    else:
        factor = _BYTE_UNITS[unit.rstrip("b") if unit != "b" else "b"]
    size = int(float(match.group(1)) * factor)
    if size <= 0:
        raise ValueError(f"expected a positive size, got {text!r}")
    return size


def _convert(setting: Setting, raw: Any, origin: str) -> Any:
    """Turn a raw value (string from flag/env, or TOML value) into the setting's type."""
    try:
        if setting.kind == "list":
            if isinstance(raw, str):
                return [part.strip() for part in raw.split(",") if part.strip()]
            if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
                return list(raw)
            raise ValueError("expected a list of strings")
        if setting.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off", ""):
                return False
            raise ValueError(f"expected true or false, got {raw!r}")
        if setting.kind == "int":
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise ValueError(f"expected an integer, got {raw!r}")
            try:
                value = int(raw)
            except ValueError:
                what = "a port number 0..65535" if setting.name == "port" else "an integer"
                raise ValueError(f"expected {what}, got {raw!r}") from None
            if setting.name == "port" and not 0 <= value <= 65535:
                raise ValueError(f"expected a port 0..65535, got {value}")
            return value
        if setting.kind == "duration":
            if isinstance(raw, int | float) and not isinstance(raw, bool):
                raw = str(raw)
            return parse_duration(str(raw))
        if setting.kind == "bytes":
            if isinstance(raw, int) and not isinstance(raw, bool):
                raw = str(raw)
            return parse_bytes(str(raw))
        if setting.kind == "choice":
            text = str(raw).strip().lower()
            if text not in setting.choices:
                raise ValueError(f"expected one of {', '.join(setting.choices)}, got {raw!r}")
            return text
        if not isinstance(raw, str):
            raise ValueError(f"expected a string, got {raw!r}")
        return raw
    except ValueError as exc:
        where = {"flag": setting.flag, "env": setting.env}.get(origin, origin)
        raise ConfigError(f"{where}: {exc}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per setting, plus --config. Defaults stay None so precedence can be applied."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="TOML file with any of the settings below as top-level keys"
        f" (env: {ENV_PREFIX}CONFIG).",
    )
    for setting in SETTINGS:
        help_text = f"{setting.help} (env: {setting.env}; default: {_default_text(setting)})"
        if setting.kind == "list":
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                action="append",
                default=None,
                metavar=setting.metavar,
                help=help_text,
            )
        elif setting.kind == "bool":
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text,
            )
        else:
            parser.add_argument(
                setting.flag,
                dest=setting.name,
                default=None,
                metavar=_metavar(setting),
                help=help_text,
            )


def _metavar(setting: Setting) -> str:
    if setting.metavar:
        return setting.metavar
    return {
        "duration": "DURATION",
        "bytes": "SIZE",
        "int": "N",
        "choice": "{" + ",".join(setting.choices) + "}",
    }.get(setting.kind, setting.name.upper())


def _default_text(setting: Setting) -> str:
    default = setting.default
    if default is None or default == []:
        return "unset"
    if setting.kind == "duration":
        return _format_duration(float(default))
    if setting.kind == "bytes":
        return _format_bytes(int(default))
    if setting.kind == "bool":
        return "true" if default else "false"
    return str(default)


def _format_duration(seconds: float) -> str:
    for unit, factor in (("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= factor and (seconds / factor).is_integer():
            return f"{int(seconds / factor)}{unit}"
    return f"{round(seconds * 1000)}ms"


def _format_bytes(size: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def load_config_file(path: str) -> dict[str, Any]:
    """Read a TOML config; unknown keys are an error (typos must not pass silently)."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    unknown = sorted(set(data) - set(BY_NAME))
    if unknown:
        known = ", ".join(BY_NAME)
        raise ConfigError(f"{path}: unknown setting(s) {', '.join(unknown)} (known: {known})")
    return data


def resolve(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServeSettings:
    """Apply flag > environment > config file > default, validate, and return typed settings."""
    env = os.environ if environ is None else environ
    flags = vars(args) if args is not None else {}
    config_path = flags.get("config") or env.get(ENV_PREFIX + "CONFIG")
    config = load_config_file(config_path) if config_path else {}
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for setting in SETTINGS:
        if flags.get(setting.name) is not None:
            raw, origin = flags[setting.name], "flag"
            if setting.kind == "list":
                # Each flag occurrence is one entry; commas are literal there.
                values[setting.name], origins[setting.name] = list(raw), origin
                continue
        elif setting.env in env:
            raw, origin = env[setting.env], "env"
        elif setting.name in config:
            raw, origin = config[setting.name], f"{config_path} ({setting.name})"
        else:
            values[setting.name], origins[setting.name] = setting.default, "default"
            continue
        values[setting.name] = _convert(setting, raw, origin)
        origins[setting.name] = "flag" if origin == "flag" else origin
    return _build(values, origins)


def _build(values: dict[str, Any], origins: dict[str, str]) -> ServeSettings:
    token: str | None = values["token"]
    if values["token_file"]:
        if token:
            raise ConfigError("--token and --token-file both given; use one")
        try:
            token = Path(values["token_file"]).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"{values['token_file']}: cannot read token file: {exc}") from None
        if not token:
            raise ConfigError(f"{values['token_file']}: token file is empty")
    if token is not None and len(token) < 16:
        raise ConfigError("the bearer token must be at least 16 characters long")
    if values["protect_metrics"] and not token:
        raise ConfigError("--protect-metrics needs a token (--token or --token-file)")
    if origins.get("scrape_timeout") == "default":
        # Unset, the deadline follows a shorter interval (as Prometheus' scrape_timeout does).
        values["scrape_timeout"] = min(values["scrape_timeout"], values["scrape_interval"])
    if values["scrape_timeout"] > values["scrape_interval"]:
        raise ConfigError(
            f"--scrape-timeout ({values['scrape_timeout']}s) must not exceed "
            f"--scrape-interval ({values['scrape_interval']}s)"
        )
    if values["history"] < values["window"]:
        raise ConfigError("--history must be at least one --window long")
    try:
        ZoneInfo(values["log_timezone"])
    except (ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            f"--log-timezone {values['log_timezone']!r}: unknown time zone (expected an IANA"
            " name such as UTC or Europe/Berlin)"
        ) from None
    logs = tuple(parse_log_target(item) for item in values["log"])
    scrapes = tuple(parse_scrape_target(item) for item in values["scrape"])
    _check_unique([t.path for t in logs], "--log")
    _check_unique([t.url for t in scrapes], "--scrape")
    return ServeSettings(
        logs=logs,
        scrapes=scrapes,
        state_dir=Path(values["state_dir"]),
        host=values["host"],
        port=values["port"],
        allowed_hosts=tuple(_host_name(h) for h in values["allowed_hosts"]),
        token=token,
        protect_metrics=values["protect_metrics"],
        window=values["window"],
        history=values["history"],
        analysis_interval=values["analysis_interval"],
        poll_interval=values["poll_interval"],
        min_episode=values["min_episode"],
        resolve_after=values["resolve_after"],
        clock=values["clock"],
        log_timezone=values["log_timezone"],
        scrape_interval=values["scrape_interval"],
        scrape_timeout=values["scrape_timeout"],
        scrape_max_size=values["scrape_max_size"],
        start_at=values["start_at"],
        max_upload=values["max_upload"],
        log_level=values["log_level"],
        log_format=values["log_format"],
        access_log=values["access_log"],
        ready_after=values["ready_after"],
        prometheus=values["prometheus"],
        prometheus_selector=values["prometheus_selector"],
        prometheus_interval=values["prometheus_interval"],
        prometheus_token_file=_checked_token_file(values["prometheus_token_file"]),
        prometheus_ca_file=values["prometheus_ca_file"],
        origins=origins,
    )


def _host_name(item: str) -> str:
    name = item.strip().lower()
    if name != "*" and not re.match(r"^[a-z0-9_.-]+$|^\[[0-9a-f:.]+\]$", name):
        raise ConfigError(
            f"--allowed-hosts {item!r}: expected a host name without port or scheme"
            " (e.g. preemptscope.monitoring.svc), or *"
        )
    return name


def _check_unique(items: Sequence[str], flag: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            raise ConfigError(f"{flag} {item} given twice")
        seen.add(item)


def _checked_token_file(path: str | None) -> str | None:
    if path:
        prometheus_token(path)
    return path or None


def read_secret(path: str, flag: str) -> str:
    """A token or password kept in a file (`flag` names it in errors): stripped, never empty."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{flag} {path}: cannot read: {exc}") from None
    if not value:
        raise ConfigError(f"{flag} {path}: the file is empty")
    return value


def prometheus_token(path: str | None) -> str | None:
    """The bearer token in --prometheus-token-file (read when the Prometheus source starts)."""
    return read_secret(path, "--prometheus-token-file") if path else None


def markdown_table() -> str:
    """The settings table for docs/exporter.md, generated so docs and code cannot drift."""
    rows = [
        "| flag | environment | config key | default | meaning |",
        "|---|---|---|---|---|",
        f"| `--config FILE` | `{ENV_PREFIX}CONFIG` | — | unset "
        "| TOML file with any of the keys below |",
    ]
    for setting in SETTINGS:
        meta = "" if setting.kind == "bool" else f" {_metavar(setting)}"
        choices = f" One of: {', '.join(setting.choices)}." if setting.choices else ""
        rows.append(
            f"| `{setting.flag}{meta}` | `{setting.env}` | `{setting.name}` "
            f"| {_default_text(setting)} | {setting.help}{choices} |"
        )
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown_table())
