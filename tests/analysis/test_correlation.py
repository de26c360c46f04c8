"""Spearman's rho (no scipy), lags and episodes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from preemptscope.analysis.correlation import pearson, ranks, spearman


def test_ranks_average_ties() -> None:
    assert ranks([10.0, 20.0, 20.0, 5.0]) == [2.0, 3.5, 3.5, 1.0]


def test_spearman_textbook_values() -> None:
    # no ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) = 1 - 6 * 4 / 120
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # ties: Pearson of average ranks, 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(4.5 / math.sqrt(22.5))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)


def test_undefined_cases() -> None:
    assert spearman([1, 2], [1, 2]) is None  # too few points
    assert spearman([1, 1, 1], [1, 2, 3]) is None  # constant series
    with pytest.raises(ValueError):
        pearson([1, 2, 3], [1, 2])


@given(st.lists(st.tuples(st.integers(-50, 50), st.integers(-50, 50)), min_size=3, max_size=40))
def test_spearman_is_bounded_symmetric_and_monotone_invariant(
    pairs: list[tuple[int, int]],
) -> None:
    x = [float(a) for a, _ in pairs]
    y = [float(b) for _, b in pairs]
    rho = spearman(x, y)
    if rho is None:
        return
    assert -1.0 <= rho <= 1.0
    assert spearman(y, x) == pytest.approx(rho)
    # ranks do not change under a strictly increasing transform
    assert spearman([v**3 for v in x], y) == pytest.approx(rho)
