"""The catalogue is data: every row's example line parses into that row's frame."""

from __future__ import annotations

import polars as pl
import pytest
from preemptscope.ingest import catalogue as cat
from preemptscope.ingest.logs import ParseOptions, parse_lines

OPTIONS = ParseOptions(year=2025)


@pytest.mark.parametrize("row", cat.ALL_ROWS, ids=lambda row: row.name)
def test_row_example_parses_into_its_kind(row: cat.LineFormat) -> None:
    assert row.literal in row.example
    assert row.versions and row.example
    frames = parse_lines([row.example], source="c", deployment="c", options=OPTIONS)
    assert frames.accounting.parsed_lines == 1, frames["unrecognized"]
    assert frames[row.kind].height >= 1, row.name
    for name, value in row.constants.items():
        if name in frames[row.kind].columns:
            assert frames[row.kind][name][0] == value


@pytest.mark.parametrize("envelope", cat.FOREIGN_ENVELOPES, ids=lambda env: env.name)
def test_foreign_envelopes_are_understood(envelope: cat.Envelope) -> None:
    frames = parse_lines([envelope.example], source="c", deployment="c", options=OPTIONS)
    assert frames.accounting.unrecognized_lines == 0
    recognised = sum(
        frame.height for kind, frame in frames.frames.items() if kind != "unrecognized"
    )
    assert recognised == 1
    levels = pl.concat(
        [f.select("level") for k, f in frames.frames.items() if k != "unrecognized"]
    )["level"].to_list()
    assert levels[0] in cat.LEVELS


def test_row_names_are_unique() -> None:
    names = [row.name for row in cat.ALL_ROWS]
    assert len(names) == len(set(names))
