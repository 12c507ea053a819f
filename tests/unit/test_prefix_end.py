"""``prefix_end``: the upper end of a prefix's range, which the console's owner filter walks on
the Pending owner index instead of reading every Pending row."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from leasectl.core.filters import prefix_end

# Text as PostgreSQL stores it: no NUL, no lone surrogate. U+10FFFF and the last code point
# before the surrogates are drawn often: they are where the increment carries or jumps.
EDGES = st.sampled_from(["\U0010ffff", "\ud7ff", "\ue000", "a", "z", "é", "\x01"])
CHARS = st.one_of(EDGES, st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
TEXT = st.lists(CHARS, max_size=6).map("".join)


@given(TEXT, TEXT)
def test_the_range_holds_exactly_the_strings_with_the_prefix(prefix: str, text: str) -> None:
    end = prefix_end(prefix)
    in_range = prefix <= text and (end is None or text < end)
    assert in_range == text.startswith(prefix)


@given(TEXT, TEXT)
def test_the_strings_with_the_prefix_and_a_longer_tail_are_in_range(prefix: str, tail: str) -> None:
    end = prefix_end(prefix)
    assert end is None or prefix + tail < end


def test_the_ends_carry_past_the_last_code_point_and_skip_the_surrogates() -> None:
    assert prefix_end("worker-1") == "worker-2"
    assert prefix_end("ab\U0010ffff\U0010ffff") == "ac"
    assert prefix_end("a\ud7ff") == "a\ue000"
    assert prefix_end("") is None
    assert prefix_end("\U0010ffff") is None
