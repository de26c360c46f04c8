"""preemptscope.jsonout writes what json.dump writes: the same values, indented at the top."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from preemptscope import jsonout

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


def _dumped(value: object, **kwargs: object) -> str:
    out = io.StringIO()
    jsonout.dump(value, out, **kwargs)  # type: ignore[arg-type]
    return out.getvalue()


@given(values, st.integers(min_value=0, max_value=6))
def test_same_values_at_any_depth(value: object, depth: int) -> None:
    assert json.loads(_dumped(value, depth=depth)) == value


@given(values)
def test_deep_enough_is_json_dump_indent_2(value: object) -> None:
    assert _dumped(value, depth=64) == json.dumps(value, indent=2) + "\n"


def test_deep_values_on_one_line_and_defaults() -> None:
    value = {"deployments": [{"windows": [{"a": 1, "b": [1, 2]}]}], 3: True}
    text = _dumped(value, depth=3, default=str)
    assert '      "windows": [{"a": 1, "b": [1, 2]}]' in text.splitlines()
    assert '"3": true' in text
    when = datetime(2026, 1, 1, tzinfo=UTC)
    assert json.loads(_dumped({"at": [when]}, default=str)) == {"at": [str(when)]}
