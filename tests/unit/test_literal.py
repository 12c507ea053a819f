"""The one rule for untrusted text: controls, format characters and separators become visible."""

from __future__ import annotations

import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from leasectl.core.literal import echo, shorten, visible
from tests.hostile import CORPUS, ESC


def test_escape_sequences_become_visible() -> None:
    assert visible("\x1b]0;PWNED\x07") == "\\x1b]0;PWNED\\x07"
    assert visible("a\x9bb") == "a\\x9bb"
    assert visible("\u202eevil") == "\\u202eevil"
    assert visible("a\u200bb") == "a\\u200bb"


def test_newlines_and_tabs_stay_only_where_a_field_may_span_lines() -> None:
    assert visible("a\nb\tc") == "a\\nb\\tc"
    assert visible("a\nb\tc", multiline=True) == "a\nb\tc"
    assert visible("a\r\nb", multiline=True) == "a\\r\nb"


def test_plain_text_and_markup_pass_unchanged() -> None:
    for text in ("payments", "[bold]x[/]", "日本語🙂", "e\u0301", "a b"):
        assert visible(text) == text


@given(st.text())
def test_nothing_a_terminal_acts_on_survives(text: str) -> None:
    for shown in (visible(text), visible(text, multiline=True)):
        assert ESC not in shown
        for char in shown:
            category = unicodedata.category(char)
            assert category not in ("Cf", "Zl", "Zp", "Cs"), repr(char)
            assert category != "Cc" or char in "\n\t", repr(char)


def test_the_corpus_is_shown_without_escape_bytes() -> None:
    for text in CORPUS:
        assert ESC not in visible(text)
        assert "\x9b" not in visible(text, multiline=True)


def test_shorten_says_how_long_the_value_was() -> None:
    assert shorten("abc", 5) == "abc"
    cut = shorten("x" * 1000, 40)
    assert len(cut) <= 40 and cut.endswith("(1,000 chars)")


def test_echo_quotes_a_bounded_escaped_value() -> None:
    said = echo("\x1b[2J" + "q" * 8000)
    assert ESC not in said and len(said) < 260 and said.startswith("'\\x1b[2J")
