"""Property tests: whatever text a log holds, it stays text."""

from __future__ import annotations

import json
from dataclasses import replace
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st
from preemptscope.analysis.report import Advice, Evidence
from preemptscope.dashboards.figures import plot_text, verdict_card_html
from preemptscope.dashboards.html import script_json

from tests.dashboards.synthetic import make_deployment

CARD_TAGS = {"section", "h2", "h3", "span", "p", "b", "table", "thead", "tbody", "tr", "th", "td"}
CARD_TAGS |= {"code"}
hostile = st.text(alphabet=st.sampled_from(list("<>&\"'/=!-[]` \n\u2028sciptrg")) | st.characters())


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: set[str] = set()
        self.attrs: list[tuple[str, str | None]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@settings(max_examples=60, deadline=None)
@given(name=hostile, message=hostile, flag=hostile)
def test_card_has_only_our_markup(name: str, message: str, flag: str) -> None:
    dep = make_deployment(count=3)
    dep = replace(
        dep,
        name=name,
        verdict=replace(dep.verdict, evidence=[Evidence("x", message, 1.0)]),
        advice=[Advice(1, "act", flag, flag, flag, message)],
    )
    parser = Collect()
    parser.feed(verdict_card_html(dep))
    parser.close()
    assert parser.tags <= CARD_TAGS
    assert {a for a, _ in parser.attrs} <= {"class", "data-state", "data-code"}
    text = "".join(parser.text)
    assert message.replace("\r", "") in text.replace("\r", "")  # shown, as typed


@settings(max_examples=200, deadline=None)
@given(value=st.recursive(hostile | st.integers() | st.none(), lambda c: st.lists(c, max_size=3)))
def test_script_json_cannot_close_the_script_and_round_trips(value: object) -> None:
    text = script_json({"k": value})
    assert "<" not in text and ">" not in text and "&" not in text
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text) == {"k": value}


@given(text=hostile)
def test_plot_text_leaves_no_tag(text: str) -> None:
    out = plot_text(text)
    assert "<" not in out and ">" not in out
