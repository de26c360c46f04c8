"""One settings table drives flags, environment, config file and the docs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from preemptscope import settings as s
from preemptscope.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    s.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_precedence_flag_over_env_over_file_over_default(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('window = "30s"\nport = 9100\nscrape_interval = "20s"\nlog = ["a.log=x"]\n')
    env = {"PREEMPTSCOPE_PORT": "9200", "PREEMPTSCOPE_CONFIG": str(config)}
    resolved = s.resolve(parse("--port", "9300"), environ=env)
    assert resolved.port == 9300 and resolved.origins["port"] == "flag"
    assert s.resolve(parse(), environ=env).port == 9200
    assert resolved.window == 30.0 and "serve.toml" in resolved.origins["window"]
    assert resolved.scrape_interval == 20.0
    assert resolved.logs == (s.LogTarget("a.log", "x"),)
    assert resolved.history == 900.0 and resolved.origins["history"] == "default"


def test_environment_lists_booleans_and_units() -> None:
    env = {
        "PREEMPTSCOPE_LOG": "/var/log/a.log=chat, /var/log/b.log",
        "PREEMPTSCOPE_SCRAPE": "http://10.0.0.1:8000/metrics",
        "PREEMPTSCOPE_PROTECT_METRICS": "yes",
        "PREEMPTSCOPE_TOKEN": "x" * 20,
        "PREEMPTSCOPE_MAX_UPLOAD": "10MiB",
        "PREEMPTSCOPE_POLL_INTERVAL": "250ms",
    }
    resolved = s.resolve(parse(), environ=env)
    assert [t.deployment for t in resolved.logs] == ["chat", "b"]
    assert resolved.scrapes[0].deployment == "10.0.0.1:8000"
    assert resolved.protect_metrics is True
    assert resolved.max_upload == 10 * 1024 * 1024
    assert resolved.poll_interval == pytest.approx(0.25)


def test_repeated_flags_keep_commas_literal() -> None:
    resolved = s.resolve(parse("--log", "a,b.log", "--log", "c.log=prod"), environ={})
    assert [t.path for t in resolved.logs] == ["a,b.log", "c.log"]


def test_url_with_query_keeps_its_equals_sign() -> None:
    target = s.parse_scrape_target("http://h:8000/metrics?name[]=vllm:x")
    assert target.url == "http://h:8000/metrics?name[]=vllm:x"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (("--window", "soon"), {}, "--window: expected a duration"),
        (("--port", "70000"), {}, "--port: expected a port"),
        ((), {"PREEMPTSCOPE_WINDOW": "-5s"}, "PREEMPTSCOPE_WINDOW: expected a duration"),
        (("--protect-metrics",), {}, "--protect-metrics needs a token"),
        (("--token", "short"), {}, "at least 16 characters"),
        (("--scrape-timeout", "20s"), {}, "must not exceed --scrape-interval"),
        (("--scrape", "ftp://x"), {}, "expected an http:// or https:// URL"),
        (("--log", "a.log", "--log", "a.log"), {}, "--log a.log given twice"),
        (("--log-timezone", "Mars/Base"), {}, "unknown time zone"),
        (("--start-at", "middle"), {}, "expected one of beginning, end"),
    ],
)
def test_bad_values_name_the_setting(
    argv: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        s.resolve(parse(*argv), environ=env)


def test_config_file_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("windw = '1m'\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: unknown setting\(s\) windw"):
        s.resolve(parse("--config", str(bad)), environ={})
    broken = tmp_path / "broken.toml"
    broken.write_text("window = \n")
    with pytest.raises(ConfigError, match=r"broken\.toml: invalid TOML"):
        s.resolve(parse("--config", str(broken)), environ={})
    with pytest.raises(ConfigError, match="config file not found"):
        s.resolve(parse("--config", str(tmp_path / "missing.toml")), environ={})


def test_token_file(tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("a-long-enough-token-value\n")
    assert s.resolve(parse("--token-file", str(secret)), environ={}).token == (
        "a-long-enough-token-value"
    )


def test_every_setting_has_flag_env_and_key() -> None:
    parser = argparse.ArgumentParser()
    s.add_arguments(parser)
    flags = {opt for action in parser._actions for opt in action.option_strings}
    for setting in s.SETTINGS:
        assert setting.flag in flags
        assert setting.env == "PREEMPTSCOPE_" + setting.name.upper()
        assert setting.name in s.ServeSettings.__dataclass_fields__ or setting.name in (
            "log",
            "scrape",
            "token_file",
        )


def test_docs_table_is_generated_from_the_settings() -> None:
    """docs/exporter.md holds exactly `python -m preemptscope.settings` between markers."""
    text = (ROOT / "docs" / "exporter.md").read_text()
    match = re.search(
        r"<!-- settings-table:start -->\n(.*?)<!-- settings-table:end -->", text, re.S
    )
    assert match, "settings table markers missing from docs/exporter.md"
    assert match.group(1) == s.markdown_table(), (
        "docs/exporter.md is stale: regenerate with `python -m preemptscope.settings`"
    )
