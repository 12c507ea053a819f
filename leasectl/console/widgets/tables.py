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

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import ClassVar, Generic, Self, TypeVar

from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region
from textual.renderables.styled import Styled
from textual.strip import Strip
from textual.widgets import DataTable

from leasectl.console import view
from leasectl.console.view import Verdict
from leasectl.console.widgets import same_cells, same_text
from leasectl.core.filters import ListedJob
from leasectl.core.models import JobStatus, OwnerHealth, PanelJob
from leasectl.present.styles import (
    EXPIRED_STYLE,
    FRESHNESS_MARK,
    FRESHNESS_STYLE,
    LEASE_STYLE,
    PAUSED_STYLE,
    RISK_STYLE,
    STATUS_STYLE,
    LeaseState,
)
from leasectl.present.text import lit
from leasectl.present.times import age, countdown, due_text, lease_intervals, waiting_text

Row = TypeVar("Row")

SELECTED_MARK = "●"


@dataclass(frozen=True)
class RowContext:
    """What a row's cells depend on besides the row: the clock, the selection, the owners."""

    now: datetime
    selected: frozenset[int]
    owners: dict[str, OwnerHealth]
    risk_window: timedelta
    paused: frozenset[str] = frozenset()  # the queues the snapshot saw paused


Column = tuple[str, str, int | None]  # key, label, width (None: fit the content)


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

    def fitted_widths(self, available: int) -> tuple[int | None, ...]:
        """Each column's width, shrinking the FLEX ones so that the fixed columns fit (a
        dropped column's width is 0)."""
        kept = self.fitted_columns(available)
        widths = self._shrunk(kept, available)
        return tuple(widths[kept.index(i)] if i in kept else 0 for i in range(len(self.COLUMNS)))

    def fitted_columns(self, available: int) -> tuple[int, ...]:
        """The columns (indices) shown at this width: all, less the DROP ones, in order, until
        the rest fit with their FLEX columns at their minimum."""
        keys = [key for key, _, _ in self.COLUMNS]
        kept = list(range(len(keys)))
        for key in self.DROP:
            if self._excess(kept, available, minimal=True) <= 0:
                break
            kept.remove(keys.index(key))
        return tuple(kept)

    def _excess(self, kept: Sequence[int], available: int, *, minimal: bool) -> int:
        widths = [
            self.FLEX.get(self.COLUMNS[i][0], self.COLUMNS[i][2] or 0)
            if minimal
            else self.COLUMNS[i][2] or 0
            for i in kept
        ]
        padding = 2 * self.cell_padding * len(kept) + 1  # + the vertical scrollbar
        return sum(widths) + padding - available

    def _shrunk(self, kept: Sequence[int], available: int) -> list[int | None]:
        widths = [self.COLUMNS[i][2] for i in kept]
        excess = self._excess(kept, available, minimal=False)
        keys = [self.COLUMNS[i][0] for i in kept]
        for key, minimum in self.FLEX.items():  # in the order they give up width
            if key not in keys:
                continue
            i = keys.index(key)
            width = widths[i]
            if excess <= 0 or width is None:
                continue
            give = max(0, min(excess, width - minimum))
            widths[i] = width - give
            excess -= give
        return widths

    def _fit(self, available: int) -> bool:
        """(Re)create the columns for this width; True when they changed."""
        if available > 0:
            kept = self.fitted_columns(available)
            widths: tuple[int | None, ...] = tuple(self._shrunk(kept, available))
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


class JobTable(PanelTable[PanelJob]):
    def key_of(self, item: PanelJob) -> str:
        return str(item.id)

    @staticmethod
    def id_cell(job: PanelJob, ctx: RowContext, style: str = "") -> Text:
        if job.id in ctx.selected:
            return Text.assemble((SELECTED_MARK + " ", "bold magenta"), (str(job.id), style))
        return Text("  " + str(job.id), style=style)

    @staticmethod
    def attempts_cell(job: PanelJob, style: str = "") -> Text:
        spent = job.attempts >= job.max_attempts
        return Text(f"{job.attempts}/{job.max_attempts}", style=style or ("red" if spent else ""))


class PendingTable(JobTable):
    FLEX: ClassVar[dict[str, int]] = {"queue": 8}
    DROP = ("priority", "attempts", "run_at")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("priority", "PRI", 4),
        ("waiting", "WAITING", 8),
        ("attempts", "ATT", 5),
        ("run_at", "RUN AT", 10),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        delayed = item.run_at > ctx.now
        dim = "dim" if delayed else ""
        paused = item.queue in ctx.paused
        due_style = PAUSED_STYLE if paused else "cyan" if delayed else "dim"
        return (
            self.id_cell(item, ctx, dim),
            lit(item.queue, dim, no_wrap=True, overflow="ellipsis"),
            Text(str(item.priority), style=dim, justify="right"),
            Text(waiting_text(ctx.now, item.run_at), justify="right"),
            self.attempts_cell(item, dim),
            Text(due_text(ctx.now, item.run_at, paused=paused), style=due_style),
        )


class ProcessingTable(JobTable):
    # An owner id (host:pid:hex) is kept whole: the attempts column goes first.
    FLEX: ClassVar[dict[str, int]] = {"queue": 8}
    DROP = ("attempts", "heartbeat", "queue")
    COLUMNS = (
        ("state", "STATE", 9),
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("lease", "LEASE", 8),
        ("owner", "OWNER", 24),
        ("heartbeat", "HB AGE", 7),
        ("attempts", "ATT", 5),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        state = view.lease_state(item, ctx.now, ctx.risk_window)
        # A row in trouble is coloured whole; a healthy one only in its marker.
        style = "" if state is LeaseState.OK else LEASE_STYLE[state]
        marker = {
            LeaseState.OK: Text("  ok", style=LEASE_STYLE[state]),
            LeaseState.AT_RISK: Text("⚠ at risk", style=style),
            LeaseState.EXPIRED: Text("✖ expired", style=f"{style} reverse"),
        }[state]
        return (
            marker,
            self.id_cell(item, ctx, style),
            lit(item.queue, style, no_wrap=True, overflow="ellipsis"),
            Text(countdown(ctx.now, item.lease_until), style=style, justify="right"),
            lit(view.short_owner(item.lease_owner, 24), style, no_wrap=True, overflow="ellipsis"),
            Text(age(ctx.now, item.heartbeat_at), justify="right"),
            self.attempts_cell(item, style),
        )


class StuckTable(JobTable):
    FLEX: ClassVar[dict[str, int]] = {"error": 12, "diagnosis": 26, "owner": 20, "queue": 8}
    # Narrow, the panel keeps what decides an action: the diagnosis and the last owner (at 80
    # columns both whole, the last error left to the detail screen).
    DROP = ("attempts", "lapsed", "queue", "error", "state")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("state", "STATE", 7),
        ("lapsed", "LAPSED", 7),
        ("attempts", "ATT", 5),
        ("diagnosis", "DIAGNOSIS", 36),
        ("owner", "LAST OWNER", 24),
        ("error", "LAST ERROR", 46),
    )

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        expired = item.status == JobStatus.PROCESSING
        diagnosis = view.diagnose(item, ctx.owners)
        mark, diag_style = {
            Verdict.ALIVE: ("⚠ ", RISK_STYLE),
            Verdict.SILENT: ("○ ", "cyan"),
            Verdict.UNKNOWN: ("? ", "dim"),
            Verdict.QUARANTINED: ("⊘ ", STATUS_STYLE[JobStatus.STUCK]),
        }[diagnosis.verdict]
        # (The text quotes an actor and a reason already escaped: a Text, never markup.)
        diag = Text(mark + diagnosis.text, style=diag_style, no_wrap=True, overflow="ellipsis")
        lapsed = item.lapsed_at or item.lease_until
        error = (item.last_error or "")[:200].replace("\n", " ")
        return (
            self.id_cell(item, ctx, EXPIRED_STYLE if expired else ""),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            Text("expired", style=EXPIRED_STYLE)
            if expired
            else Text("Stuck", style=STATUS_STYLE[JobStatus.STUCK]),
            Text(age(ctx.now, lapsed), justify="right"),
            self.attempts_cell(item),
            diag,
            lit(view.short_owner(item.lease_owner, 24), no_wrap=True, overflow="ellipsis"),
            lit(error, "dim", no_wrap=True, overflow="ellipsis"),
        )


class OwnersTable(PanelTable[OwnerHealth]):
    FLEX: ClassVar[dict[str, int]] = {"queues": 6, "owner": 20}
    DROP = ("queues", "intervals", "next", "seen")
    COLUMNS = (
        ("owner", "OWNER", 34),
        ("freshness", "FRESHNESS", 10),
        ("seen", "LAST SIGN", 9),
        ("held", "HELD", 5),
        ("expired", "EXPIRED", 7),
        ("next", "EXPIRES", 8),
        ("intervals", "HB/TTL", 9),
        ("queues", "QUEUES", 24),
    )

    def key_of(self, item: OwnerHealth) -> str:
        return item.owner

    def cells(self, item: OwnerHealth, ctx: RowContext) -> tuple[Text, ...]:
        style = FRESHNESS_STYLE[item.freshness]
        nxt = item.next_expiry_at
        if nxt is None:
            next_text = Text("-", style="dim", justify="right")
        else:
            lapsed = nxt < ctx.now
            next_text = Text(
                countdown(ctx.now, nxt), style=EXPIRED_STYLE if lapsed else "", justify="right"
            )
        intervals = lease_intervals(item.heartbeat_every, item.lease_ttl)
        owner = lit(item.owner, no_wrap=True, overflow="ellipsis")
        host = f"{item.hostname}:{item.pid}" if item.hostname else ""
        if host and not item.owner.startswith(host):
            owner.append_text(lit(f" ({host})", "dim"))  # the default worker id already says it
        return (
            owner,
            Text(FRESHNESS_MARK[item.freshness], style=style),
            Text(age(ctx.now, item.last_sign_of_life), style=style, justify="right"),
            Text(str(item.held), justify="right"),
            Text(str(item.expired), style=EXPIRED_STYLE if item.expired else "", justify="right"),
            next_text,
            Text(intervals, style="dim"),
            lit(", ".join(item.queues), "dim", no_wrap=True, overflow="ellipsis"),
        )


class FailedTable(JobTable):
    """The Failed panel: the jobs that ran out of attempts, newest first. The error's class and
    its first line (the detail screen shows all of it)."""

    FLEX: ClassVar[dict[str, int]] = {"error": 20, "class": 12, "queue": 8}
    DROP = ("attempts", "class", "queue")
    COLUMNS = (
        ("id", "ID", 9),
        ("queue", "QUEUE", 12),
        ("attempts", "ATT", 5),
        ("class", "ERROR CLASS", 18),
        ("error", "LAST ERROR (first line)", 60),
        ("when", "FAILED", 8),
    )
    # A cell's text is cut here (an ellipsis) before the column cuts it further.
    ERROR_CHARS = 120

    def cells(self, item: PanelJob, ctx: RowContext) -> tuple[Text, ...]:
        klass, first = view.error_parts(item.last_error)
        return (
            self.id_cell(item, ctx),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            self.attempts_cell(item),
            lit(view.cut(klass, 40), "red", no_wrap=True, overflow="ellipsis")
            if klass
            else Text("-", style="dim"),
            lit(view.cut(first, self.ERROR_CHARS), no_wrap=True, overflow="ellipsis"),
            Text(age(ctx.now, item.finished_at), justify="right"),
        )


class FindTable(PanelTable[ListedJob]):
    """The find screen's results: a page of `leasectl list`, newest first."""

    FLEX: ClassVar[dict[str, int]] = {"payload": 12, "error": 16, "queue": 8, "owner": 10}
    DROP = ("payload", "owner", "attempts", "queue")
    COLUMNS = (
        ("id", "ID", 9),
        ("state", "STATE", 10),
        ("queue", "QUEUE", 12),
        ("attempts", "ATT", 5),
        ("owner", "OWNER", 18),
        ("error", "LAST ERROR (first line)", 44),
        ("payload", "PAYLOAD", 30),
        ("when", "AGE", 8),
    )
    CHARS = 120

    def key_of(self, item: ListedJob) -> str:
        return str(item.id)

    def cells(self, item: ListedJob, ctx: RowContext) -> tuple[Text, ...]:
        klass, first = view.error_parts(item.last_error)
        error = f"{klass}: {first}" if klass else first
        moment = item.finished_at or item.created_at
        return (
            Text(str(item.id), justify="right"),
            Text(item.status.value, style=STATUS_STYLE.get(item.status, "")),
            lit(item.queue, no_wrap=True, overflow="ellipsis"),
            Text(f"{item.attempts}/{item.max_attempts}"),
            lit(view.short_owner(item.lease_owner, 40), "dim", no_wrap=True, overflow="ellipsis"),
            lit(view.cut(error, self.CHARS), no_wrap=True, overflow="ellipsis")
            if error
            else Text("-", style="dim"),
            lit(
                view.cut(item.payload_text or f"({item.payload_bytes or 0:,} bytes)", self.CHARS),
                "dim",
                no_wrap=True,
                overflow="ellipsis",
            ),
            Text(age(ctx.now, moment), justify="right"),
        )
