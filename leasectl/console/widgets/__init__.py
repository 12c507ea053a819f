"""The console's widgets, the input that keeps untrusted text literal, and the change checks that
keep them from redrawing for nothing. (Untrusted text reaches a cell through
``leasectl.present.text.lit``, as in the CLI.)"""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widgets import Input, Static

from leasectl.core.literal import visible


class LiteralInput(Input):
    """An ``Input`` that keeps what it shows literal. Keys only type printable characters, but a
    paste (a queue name copied from a log, a web page) can carry ESC or bidi controls, and a
    value set from data (the current filter) can hold anything: both are escaped as ``lit``
    escapes them."""

    def validate_value(self, value: str) -> str:
        return visible(value)

    def replace(self, text: str, start: int, end: int) -> None:
        super().replace(visible(text), start, end)  # escaped here, so the cursor lands after it


def same_text(a: Text, b: Text) -> bool:
    """Whether two texts render alike. ``Text ==`` compares only the characters and the spans,
    not the base style or justification: a cell that only changed colour would be missed."""
    return (
        a.plain == b.plain
        and a.style == b.style
        and a.spans == b.spans
        and a.justify == b.justify
        and a.overflow == b.overflow
        and a.no_wrap == b.no_wrap
    )


def same_cells(a: Sequence[Text], b: Sequence[Text]) -> bool:
    return len(a) == len(b) and all(same_text(x, y) for x, y in zip(a, b, strict=True))


def show_text(widget: Static, content: Text | str) -> None:
    """``Static.update`` lays the whole screen out again even when the text is the same: a
    refresh updates only the lines whose text changed."""
    old = widget.content
    if isinstance(old, Text) and isinstance(content, Text):
        if same_text(old, content):
            return
    elif type(old) is type(content) and old == content:
        return
    widget.update(content)
