"""The `preemptscope` command: a thin dispatcher over the subcommand modules."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# Polars' allocator (jemalloc) keeps freed pages for 10 s by default: streaming a log frees a
# chunk's worth every fraction of a second, so the resident size grew with the file. Freed
# pages go back after a second (at once cost four times the system time); read when Polars
# loads, so before any subcommand imports it; a setting of the user's own wins.
# docs/benchmarks.md has the figures.
os.environ.setdefault("_RJEM_MALLOC_CONF", "dirty_decay_ms:1000,muzzy_decay_ms:0")

from preemptscope import __version__
from preemptscope.errors import PreemptscopeError

# Each module defines `register(subparsers)` which adds its parser and sets `func`.
# Order is the order shown in `--help`.
SUBCOMMAND_MODULES = (
    "preemptscope.commands.demo",
    "preemptscope.commands.parse",
    "preemptscope.commands.report",
    "preemptscope.commands.capacity",
    "preemptscope.commands.whatif",
    "preemptscope.commands.scrape",
    "preemptscope.commands.serve",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with `only` one subcommand's (importing one module, not seven)."""
    parser = argparse.ArgumentParser(
        prog="preemptscope",
        description="Find out whether a vLLM deployment is over capacity, and prove it.",
    )
    parser.add_argument("--version", action="version", version=f"preemptscope {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMAND_MODULES:
        if only is None or name == only:
            importlib.import_module(name).register(subparsers)
    return parser


def _named_module(argv: Sequence[str]) -> str | None:
    """The module of the subcommand `argv` starts with, if it starts with one.

    Importing every subcommand (the analyzer, the simulator, the web service) costs ~0.3 s,
    a tenth of parsing a 1 GB log; with any option first (`-h`, `--version`) or an unknown
    command, the full parser answers as before.
    """
    if not argv:
        return None
    module = f"preemptscope.commands.{argv[0]}"
    return module if module in SUBCOMMAND_MODULES else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(_named_module(list(argv) if argv is not None else sys.argv[1:]))
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except PreemptscopeError as exc:
        print(f"preemptscope: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `preemptscope parse ... | head` closes stdout early; that is not an error.
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
