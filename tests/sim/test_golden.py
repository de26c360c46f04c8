"""The engine's full outputs, bit for bit, against fingerprints of the reference engine.

tests/fixtures/sim_golden.json holds sha256 digests of every SimResult array (request times,
preemptions, resumes, step stats, token times) as the engine before the speed work computed
them (`python bench/sim_ab.py --against REV --write-golden`). A shortcut that makes the engine
faster must not move a single bit; a change of the model itself regenerates the file, on
purpose, in its own commit.
"""

from __future__ import annotations

import json

import pytest
from preemptscope.analysis.sim.engine import simulate

from tests.sim.abcases import GOLDEN, cases, differences, fingerprint, run_case

EXPECTED = json.loads(GOLDEN.read_text())["cases"]
CASES = {case[0]: case for case in cases(quick=True)}


def test_every_case_has_a_fingerprint() -> None:
    assert sorted(EXPECTED) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_are_bit_identical_to_the_reference(name: str) -> None:
    assert differences(EXPECTED[name], fingerprint(run_case(simulate, CASES[name]))) == []
