"""The project's single exception root and its few specialisations."""

from __future__ import annotations


class PreemptscopeError(Exception):
    """Root of every error preemptscope raises on purpose."""


class InputError(PreemptscopeError):
    """Bad input: names the file, the line (when known) and what was expected."""

    def __init__(self, path: str, reason: str, line: int | None = None) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {reason}")


class ConfigError(PreemptscopeError):
    """A setting, flag or configuration file is invalid."""


class ScrapeError(PreemptscopeError):
    """A /metrics endpoint could not be read or parsed."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"{url}: {reason}")
