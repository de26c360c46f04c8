"""What a vLLM version can print: the facts about versions that decide whether a count exists."""

from __future__ import annotations

import re

# V0's scheduler warns on the 1st, 51st, 101st, ... preemption from v0.4.3 on (vLLM #4647);
# earlier versions preempt silently, so their logs hold no preemption count at all.
V0_WARNING_SINCE = (0, 4, 3)

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "0.6.3.dev173+g36ea7907", "v0.5.0.post1", "0.4"; None if unknown."""
    if not version:
        return None
    found = _VERSION.match(version.strip())
    if found is None:
        return None
    major, minor, patch = found.groups()
    return int(major), int(minor), int(patch or 0)


def v0_warns_preemption(version: str | None) -> bool | None:
    """True when this version's V0 engine prints the preemption warning, None when unknown."""
    parsed = version_tuple(version)
    return None if parsed is None else parsed >= V0_WARNING_SINCE
