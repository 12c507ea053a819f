"""How a ``PanelTable`` draws a line as DataTable would, at a fraction of the cost: the styles of
one render pass (``Paint``), a cell's mouse meta, and one line of a cell (``cell_segments``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.renderables.styled import Styled


@dataclass(frozen=True)
class Paint:
    """The styles one render pass of a table uses, looked up once per pass, not once per line."""

    base: Style
    header: Style
    even: Style
    odd: Style
    cursor: Style
    hover: Style
    header_cursor: Style
    header_hover: Style
    show_cursor: bool
    show_hover: bool
    cursor_row: int
    hover_row: int

    def row_style(self, row: int) -> Style:
        if row == -1:
            return self.header
        return self.odd if row % 2 else self.even

    def component(self, row: int) -> Style:
        """What the hover and the cursor add to a row (DataTable's cell styles, row cursor)."""
        style = Style()
        if row == self.hover_row and self.show_cursor and self.show_hover:
            style += self.hover
            if row == -1:
                style += self.header_hover
        if row == self.cursor_row and self.show_cursor:
            style += self.cursor
            if row == -1:
                style += self.header_cursor
        return style


@functools.lru_cache(maxsize=4096)
def cell_meta(row: int, column: int) -> Style:
    """The meta DataTable's mouse handling reads from a cell's segments (made once: costly)."""
    return Style.from_meta({"row": row, "column": column})


def cell_segments(
    console: Console, cell: Text, width: int, padding: int, pre: Style, post: Style
) -> list[Segment]:
    """One line of a cell ``width`` wide, as DataTable renders it (``Styled(Padding(cell))``
    through ``Console.render_lines``, no wrapping) at a fraction of the cost. A cell that is not
    a single line of left-, right- or default-justified text takes Rich's own way."""
    inner = width - 2 * padding
    plain = cell.plain
    justify = cell.justify
    if inner <= 0 or "\n" in plain or "\t" in plain or justify in ("center", "full"):
        options = console.options.update_dimensions(width, 1).update(no_wrap=True)
        styled = Styled(Padding(cell, (0, padding)), pre_style=pre, post_style=post)
        return console.render_lines(styled, options)[0]
    text = cell
    if cell_len(plain) > inner or (justify == "right" and plain[-1:].isspace()):
        text = cell.copy()
        if justify == "right":
            text.rstrip()
        text.truncate(inner, overflow=text.overflow or "fold")
    # Rich pads right-justified text on the left and left-justified text on the right with
    # spaces in the text's own style; other text is padded with unstyled spaces.
    base = console.get_style(text.style) if text.style else None
    fill = inner - text.cell_len
    pad = " " * padding
    segments = [Segment(pad)]
    if justify == "right" and fill > 0:
        segments.append(Segment(" " * fill, base))
        fill = 0
    if text.spans:
        segments.extend(Text("\n").join([text]).render(console))
    elif text.plain:
        segments.append(Segment(text.plain, base))
    if fill > 0:
        segments.append(Segment(" " * fill, base if justify == "left" else None))
    segments.append(Segment(pad))
    if post:
        return [Segment(t, pre + s + post) for t, s, _ in segments if t]
    return [Segment(t, pre + s) for t, s, _ in segments if t]
