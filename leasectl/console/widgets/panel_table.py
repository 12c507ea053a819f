"""The four panels' tables. Rows are keyed by position: a poll updates the cells that changed in
place (clearing a DataTable and adding every row again re-measures every cell and lays the table
out anew). Every time-bound cell is re-rendered each second from the estimated database clock,
between polls.

The tables draw their own lines. DataTable throws away every rendered cell of a table whenever
any one cell changes and renders each visible cell again through Rich's layout machinery: when a
poll changes the rows of all four panels, that was most of a refresh. A ``PanelTable`` keeps each
row's rendered line until that row's cells, its stripe, the cursor or the hover change, and
renders a one-line cell with a few Text operations. DataTable still owns the rows, the cursor,
scrolling, keys and mouse: the lines look as DataTable draws them, with the same segment meta
(``row``, ``column``) that its mouse handling reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import ClassVar, Generic, Self, TypeVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable

from leasectl.console.fitting import Column, ColumnLayout
from leasectl.console.widgets import same_cells, same_text
from leasectl.console.widgets.drawing import Paint, cell_meta, cell_segments
from leasectl.core.models import OwnerHealth

Row = TypeVar("Row")


@dataclass(frozen=True)
class RowContext:
    """What a row's cells depend on besides the row: the clock, the selection, the owners."""

    now: datetime
    selected: frozenset[int]
    owners: dict[str, OwnerHealth]
    risk_window: timedelta
    paused: frozenset[str] = frozenset()  # the queues the snapshot saw paused
    # The limited queues whose due jobs wait, and why ("at cap", "rate-limited": view.py).
    held: Mapping[str, str] = field(default_factory=dict)


class PanelTable(DataTable[Text], Generic[Row]):
    """A table whose rows are replaced on every poll and whose cells are refreshed every tick."""

    COLUMNS: ClassVar[tuple[Column, ...]] = ()
    # Columns that give up width, down to a minimum, when the panel is too narrow for all.
    FLEX: ClassVar[dict[str, int]] = {}
    # Columns left out, in this order, when the others at their minimum widths still do not
    # fit: the least needed first, so that a narrow panel keeps what decides an action.
    DROP: ClassVar[tuple[str, ...]] = ()
    # Within a tick the cell updates' repaints are made one, at the end. (Class defaults: the
    # base class's __init__ already repaints.)
    _deferring = False
    _repaint_deferred = False

    def __init__(self, *, id: str) -> None:
        super().__init__(
            id=id,
            cursor_type="row",
            zebra_stripes=True,
            cursor_foreground_priority="renderable",
        )
        self.items: list[Row] = []
        # Each table row's cells, by position; None for a row out of sight whose cells were not
        # made since its item or the clock changed (made when it is drawn or read).
        self._shown: list[tuple[Text, ...] | None] = []
        self._widths: tuple[int | None, ...] = ()
        # The columns shown (indices into COLUMNS) at the current width; the others are dropped.
        self._kept: tuple[int, ...] = tuple(range(len(self.COLUMNS)))
        self._ctx: RowContext | None = None
        self._paint: Paint | None = None
        # Each row's rendered line: the cells it shows, how it was painted, and the line.
        self._lines: dict[int, tuple[tuple[Text, ...], tuple[object, ...], Strip]] = {}

    def refresh(
        self,
        *regions: Region,
        repaint: bool = True,
        layout: bool = False,
        recompose: bool = False,
    ) -> Self:
        """Every ``update_cell`` repaints the table; a tick's updates need it once."""
        if self._deferring and not (regions or layout or recompose):
            self._repaint_deferred = self._repaint_deferred or repaint
            return self
        return super().refresh(*regions, repaint=repaint, layout=layout, recompose=recompose)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint = self._paint_styles()
        try:
            return super().render_lines(crop)
        finally:
            self._paint = None

    def _paint_styles(self) -> Paint:
        component = self.get_component_rich_style
        row_style = self.get_component_styles
        return Paint(
            base=self.rich_style,
            header=row_style("datatable--header").rich_style,
            even=row_style("datatable--even-row").rich_style,
            odd=row_style("datatable--odd-row").rich_style,
            cursor=component("datatable--cursor"),
            hover=component("datatable--hover"),
            header_cursor=component("datatable--header-cursor"),
            header_hover=component("datatable--header-hover"),
            show_cursor=self.show_cursor,
            # DataTable shows the hover row only after the mouse moved, not after a key.
            show_hover=bool(getattr(self, "_show_hover_cursor", False)),
            cursor_row=self.cursor_coordinate.row,
            hover_row=self.hover_coordinate.row,
        )

    def render_line(self, y: int) -> Strip:
        paint = self._paint or self._paint_styles()
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        row = y - 1 + scroll_y if y >= 1 else -1  # the header stays on top
        if row >= len(self._shown) or not self.columns:
            return Strip.blank(width, paint.base)
        columns = self.ordered_columns
        cells = tuple(c.label for c in columns) if row == -1 else self.cells_at(row)
        widths = tuple(column.get_render_width(self) for column in columns)
        row_style = paint.row_style(row)
        component = paint.component(row)
        how = (row_style, component, widths, width, scroll_x, paint.base)
        cached = self._lines.get(row)
        if (
            cached is not None
            and (cached[0] is cells or (row == -1 and cached[0] == cells))
            and cached[1] == how
        ):
            return cached[2]
        post = Style.from_color(bgcolor=component.bgcolor)
        console = self.app.console
        segments: list[Segment] = []
        for index, (cell, cell_width) in enumerate(zip(cells, widths, strict=False)):
            pre = row_style + cell_meta(row, index) + component
            segments.extend(cell_segments(console, cell, cell_width, self.cell_padding, pre, post))
        rest = width - sum(widths)
        if rest > 0:  # the row's stripe, cursor and hover reach the right edge
            meta = Style.from_meta({"row": row, "column": 0, "out_of_bounds": True})
            segments.append(Segment(" " * rest, row_style + component + meta))
        strip = Strip(segments)
        if scroll_x:
            strip = strip.crop(scroll_x, scroll_x + width)
        strip = strip.adjust_cell_length(width, paint.base).simplify()
        self._lines[row] = (cells, how, strip)
        return strip

    def on_mount(self) -> None:
        self._fit(self.size.width)

    def on_resize(self) -> None:
        if self._fit(self.size.width) and self._ctx is not None:
            self.show(self.items, self._ctx)

    def column_layout(self) -> ColumnLayout:
        """The columns and how they give way (``fitting.py``), at the table's cell padding."""
        return ColumnLayout(self.COLUMNS, self.FLEX, self.DROP, self.cell_padding)

    def fitted_widths(self, available: int) -> tuple[int | None, ...]:
        """Each column's width, shrinking the FLEX ones so that the fixed columns fit (a
        dropped column's width is 0)."""
        return self.column_layout().fitted_widths(available)

    def fitted_columns(self, available: int) -> tuple[int, ...]:
        """The columns (indices) shown at this width (``ColumnLayout.fitted_columns``)."""
        return self.column_layout().fitted_columns(available)

    def _fit(self, available: int) -> bool:
        """(Re)create the columns for this width; True when they changed."""
        if available > 0:
            layout = self.column_layout()
            kept = layout.fitted_columns(available)
            widths: tuple[int | None, ...] = tuple(layout.shrunk(kept, available))
        else:
            kept, widths = self._kept, self._widths
        if (widths, kept) == (self._widths, self._kept) and self.columns:
            return False
        self._kept = kept
        self._widths = widths or tuple(self.COLUMNS[i][2] for i in kept)
        self.clear(columns=True)
        self._shown = []
        self._lines.clear()
        for i, width in zip(self._kept, self._widths, strict=True):
            key, label, _ = self.COLUMNS[i]
            self.add_column(label, key=key, width=width)
        return True

    @property
    def shown_columns(self) -> tuple[str, ...]:
        """The keys of the columns shown at the current width."""
        return tuple(self.COLUMNS[i][0] for i in self._kept)

    def _cells(self, item: Row, ctx: RowContext) -> tuple[Text, ...]:
        """The cells of the columns shown."""
        cells = self.cells(item, ctx)
        if len(self._kept) == len(cells):
            return cells
        return tuple(cells[i] for i in self._kept)

    def key_of(self, item: Row) -> str:
        raise NotImplementedError

    def cells(self, item: Row, ctx: RowContext) -> tuple[Text, ...]:
        raise NotImplementedError

    def show(self, items: Sequence[Row], ctx: RowContext) -> None:
        """Show these rows, keeping the cursor on the same item when it is still listed (else on
        the same position)."""
        before = [self.key_of(item) for item in self.items]
        keep = self.highlighted_key()
        index = self.cursor_row
        self.items = list(items)
        self.tick(ctx)
        keys = [self.key_of(item) for item in self.items]
        if keys != before and keys:
            target = keys.index(keep) if keep in keys else min(max(index, 0), len(keys) - 1)
            if target != self.cursor_row:
                self.move_cursor(row=target, animate=False)

    def tick(self, ctx: RowContext) -> None:
        """Bring the table's rows in line with ``items``: update only the cells whose text or
        style changed (often none: then nothing is redrawn), add rows for extra positions and
        remove surplus rows from the end."""
        self._ctx = ctx
        self._deferring = True
        try:
            self._sync(ctx)
        finally:
            self._deferring = False
        if self._repaint_deferred:
            self._repaint_deferred = False
            self.refresh()

    def _sync(self, ctx: RowContext) -> None:
        """Make the cells of the rows in sight (and a few around them); the others only learn
        that theirs are out of date: a panel lists up to a limit of rows (100 by default) but
        shows a dozen, and a tick would make every cell of every row each second."""
        shown = self._shown
        sight = self._in_sight()
        for row, item in enumerate(self.items):
            if row not in sight:
                if row < len(shown):
                    shown[row] = None
                else:
                    self.add_row(*self._blank(), key=str(row))
                    shown.append(None)
                continue
            cells = self._cells(item, ctx)
            if row >= len(shown):
                self.add_row(*cells, key=str(row))
                shown.append(cells)
                continue
            old = shown[row]
            if old is None or not same_cells(old, cells):
                self._put(row, cells, old)
        if not self.items and shown:
            self.clear()
            shown.clear()
        while len(shown) > len(self.items):
            shown.pop()
            self.remove_row(str(len(shown)))
        for row in [row for row in self._lines if row >= len(shown)]:
            del self._lines[row]

    # Rows made around the ones in sight, so that a step of the cursor or the scroll draws rows
    # already made.
    SIGHT_MARGIN = 5

    def _in_sight(self) -> range:
        top = self.scroll_offset.y
        rows = max(0, self.size.height - 1)  # below the header
        return range(max(0, top - self.SIGHT_MARGIN), top + rows + self.SIGHT_MARGIN)

    def _blank(self) -> tuple[Text, ...]:
        return tuple(Text() for _ in self._kept)

    def cells_at(self, row: int) -> tuple[Text, ...]:
        """What table row ``row`` shows, or would show when scrolled into sight: its cells, made
        now if they are out of date (a row that comes into sight; its DataTable cells are brought
        up to date without a repaint of their own, as the row is being drawn). (``get_row_at``
        holds the cells of a row out of sight only once it was drawn: DataTable reads it for
        every row it adds, and would make them all.)"""
        cells = self._shown[row]
        if cells is None:
            ctx = self._ctx
            cells = self._cells(self.items[row], ctx) if ctx is not None else self._blank()
            deferring, self._deferring = self._deferring, True
            repaint = self._repaint_deferred
            try:
                self._put(row, cells, None)
            finally:
                self._deferring, self._repaint_deferred = deferring, repaint
        return cells

    def _put(self, row: int, cells: tuple[Text, ...], old: tuple[Text, ...] | None) -> None:
        """Table row ``row`` shows ``cells`` now: its DataTable cells that differ from ``old``
        (all of them without ``old``) are updated."""
        for index, column in enumerate(self.shown_columns):
            if old is None or not same_text(old[index], cells[index]):
                self.update_cell(str(row), column, cells[index])
        self._shown[row] = cells

    def item_at(self, row: int) -> Row | None:
        return self.items[row] if 0 <= row < len(self.items) else None

    def highlighted(self) -> Row | None:
        if not self.items:
            return None
        return self.items[min(max(self.cursor_row, 0), len(self.items) - 1)]

    def highlighted_key(self) -> str | None:
        item = self.highlighted()
        return self.key_of(item) if item is not None else None
