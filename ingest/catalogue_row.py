"""One row of the catalogue: `LineFormat`, a message format and where its values go.

Owns the row's fields only; the rows themselves are in the `catalogue_*` tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LineFormat:
    """One row of the catalogue: a message format and where its values go."""

    name: str
    kind: str  # frame kind (see ingest/schema.py FRAME_SCHEMAS)
    literal: str  # substring every such message contains: the vectorised prefilter
    pattern: str  # matched at the start of the message; named groups feed columns
    versions: str  # vLLM releases that print it
    example: str  # a real (or constructed, said so in docs) line, prefix included
    # Constant columns for this row (e.g. the request event, the KV quantity kind).
    constants: dict[str, str] = field(default_factory=dict)
    # KV rows that print several quantities: (group, kind, unit) emitted as separate rows.
    quantities: tuple[tuple[str, str, str], ...] = ()
    # Config rows whose payload is a key=value list parsed by code (origin name).
    config_origin: str | None = None
    # Rows found anywhere in a line, even without a vLLM header (bare pastes, other formats).
    bare_ok: bool = True
