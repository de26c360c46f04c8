"""JSON for people and programs at once: indented at the top, one line per deep value."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import IO, Any

# Python's json module indents with its pure-Python encoder (a 100-server report took 20-45 s
# of it); below this depth the C encoder writes each value on one line (a report: one window,
# one piece of evidence a line).
DEPTH = 4


def dump(
    value: object,
    stream: IO[str],
    *,
    depth: int = DEPTH,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """Write `value` as `json.dump(indent=2)` does for its first `depth` levels."""
    stream.write(_text(value, depth, 0, default))
    stream.write("\n")


def _text(value: object, depth: int, level: int, default: Callable[[Any], Any] | None) -> str:
    if depth == 0 or not isinstance(value, dict | list) or not value:
        return json.dumps(value, default=default)
    inner, outer = "  " * (level + 1), "  " * level
    if isinstance(value, dict):
        # A key as json writes it (non-string keys become "1", "true", "null").
        items = [
            f"{inner}{json.dumps({key: 0})[1:-4]}: {_text(v, depth - 1, level + 1, default)}"
            for key, v in value.items()
        ]
        return "{\n" + ",\n".join(items) + "\n" + outer + "}"
    items = [inner + _text(v, depth - 1, level + 1, default) for v in value]
    return "[\n" + ",\n".join(items) + "\n" + outer + "]"
