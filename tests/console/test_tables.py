"""The panel tables redraw only what changed, and still show every change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from rich.console import Console
from rich.padding import Padding
from rich.style import Style
from rich.text import Text
from textual.app import App, ComposeResult
from textual.renderables.styled import Styled
from textual.strip import Strip
from textual.widgets import DataTable

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.detail import DetailScreen
from leasectl.console.source import StaticSource
from leasectl.console.widgets.drawing import cell_segments
from leasectl.console.widgets.tables import OwnersTable, ProcessingTable, RowContext
from leasectl.core.models import JobStatus, PanelJob
from leasectl.present.styles import RISK_STYLE
from tests.console.sample import (
    HB,
    NOW,
    OWNERS,
    PROCESSING,
    W1,
    job,
    s,
    sample_detail,
    sample_snapshot,
)
from tests.util import wait_until_pilot


def ctx(now_offset: float = 0) -> RowContext:
    return RowContext(now=NOW + s(now_offset), selected=frozenset(), owners={}, risk_window=HB)


def running(id: int, lease_in: float) -> PanelJob:
    return job(id, JobStatus.PROCESSING, owner=W1, lease_in=lease_in, hb_ago=1)


class TableApp(App[None]):
    def compose(self) -> ComposeResult:
        yield ProcessingTable(id="processing")


def with_table(check: Callable[[ProcessingTable, dict[str, int]], None]) -> None:
    """Run ``check`` on a mounted table; the dict counts calls to clear and update_cell."""

    async def run() -> None:
        app = TableApp()
        async with app.run_test(size=(120, 20)) as pilot:
            table = app.query_one(ProcessingTable)
            calls = {"clear": 0, "update_cell": 0}
            for name in calls:
                original = getattr(table, name)

                def counted(
                    *args: object,
                    _o: Callable[..., object] = original,
                    _n: str = name,
                    **kwargs: object,
                ) -> object:
                    calls[_n] += 1
                    return _o(*args, **kwargs)

                setattr(table, name, counted)
            check(table, calls)
            await pilot.pause()

    asyncio.run(run())


def keys(table: ProcessingTable) -> list[str]:
    """The job ids the table shows, top to bottom (rows are keyed by position)."""
    return [table.cells_at(i)[1].plain.strip() for i in range(table.row_count)]


def test_same_rows_unchanged_leave_the_table_alone() -> None:
    def check(table: ProcessingTable, calls: dict[str, int]) -> None:
        jobs = [running(1, 60), running(2, 90)]
        table.show(jobs, ctx())
        calls.update(clear=0, update_cell=0)
        table.show([replace(j) for j in jobs], ctx())  # a new poll, the same rows
        assert calls == {"clear": 0, "update_cell": 0}

    with_table(check)


def test_same_rows_update_only_changed_cells_even_a_colour_change() -> None:
    def check(table: ProcessingTable, calls: dict[str, int]) -> None:
        table.show([running(1, 60), running(2, 90)], ctx())
        calls.update(clear=0, update_cell=0)
        # Job 1's lease now ends within the heartbeat interval: at risk. Its queue cell keeps its
        # text and only changes colour (rich's Text == would call it unchanged).
        table.show([running(1, 5), running(2, 90)], ctx())
        assert calls["clear"] == 0 and calls["update_cell"] > 0
        assert table.get_row_at(0)[2].style == RISK_STYLE  # job 1's queue
        assert table.get_row_at(1)[2].style == ""
        assert keys(table) == ["1", "2"]

    with_table(check)


def test_changed_rows_are_updated_in_place_and_the_cursor_stays_on_its_job() -> None:
    def check(table: ProcessingTable, calls: dict[str, int]) -> None:
        table.show([running(1, 60), running(2, 90), running(3, 120)], ctx())
        table.move_cursor(row=1, animate=False)  # job 2
        calls.update(clear=0, update_cell=0)
        table.show([running(4, 30), running(2, 90), running(3, 120)], ctx())
        assert calls["clear"] == 0 and calls["update_cell"] > 0
        assert keys(table) == ["4", "2", "3"]
        assert table.highlighted_key() == "2"
        table.show([running(3, 120), running(2, 90)], ctx())
        assert keys(table) == ["3", "2"]
        assert table.highlighted_key() == "2"

    with_table(check)


def test_rows_replaced_by_another_set_keep_the_job_under_the_cursor() -> None:
    def check(table: ProcessingTable, calls: dict[str, int]) -> None:
        table.show([running(i, 30 + i) for i in range(1, 6)], ctx())
        table.move_cursor(row=3, animate=False)  # job 4
        table.show([running(9, 10), running(4, 34), running(8, 50)], ctx())
        assert keys(table) == ["9", "4", "8"]
        assert table.cursor_row == 1 and table.highlighted() == running(4, 34)
        table.show([running(7, 20), running(6, 25)], ctx())  # job 4 gone: the same position
        assert keys(table) == ["7", "6"] and table.highlighted_key() == "6"
        table.show([], ctx())
        assert table.row_count == 0 and table.highlighted() is None
        table.show([running(5, 40)], ctx())
        assert keys(table) == ["5"] and table.highlighted_key() == "5"

    with_table(check)


def test_after_a_poll_lists_other_rows_enter_opens_the_job_under_the_cursor() -> None:
    """Rows are keyed by position: what a selected row stands for comes from the table's items."""

    async def run() -> None:
        source = StaticSource(sample_snapshot(), details={1042: sample_detail()})
        app = ConsoleApp(source, clock=lambda: 1000.0)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            table = app.main.query_one(ProcessingTable)
            await pilot.press("2", "down", "down")
            assert table.highlighted_key() == "1042"
            others = tuple(running(2000 + i, 30 + i) for i in range(4))
            source.data = replace(source.data, processing=(*others[:3], PROCESSING[2], others[3]))
            app.poll_now()
            await wait_until_pilot(pilot, lambda: app.polls >= 2, "the second refresh")
            assert keys(table) == ["2000", "2001", "2002", "1042", "2003"]
            assert table.cursor_row == 3 and table.highlighted_key() == "1042"
            await pilot.press("enter")
            await wait_until_pilot(
                pilot, lambda: isinstance(app.screen, DetailScreen), "the detail"
            )
            assert isinstance(app.screen, DetailScreen) and app.screen.job_id == 1042
            await pilot.press("escape")
            await wait_until_pilot(pilot, lambda: app.screen is app.main, "the main screen")

            owners = app.main.query_one(OwnersTable)
            await pilot.press("4", "down")
            source.data = replace(source.data, owners=OWNERS[::-1])
            app.poll_now()
            await wait_until_pilot(pilot, lambda: app.polls >= 3, "the third refresh")
            assert owners.cursor_row == len(OWNERS) - 2
            await pilot.press("enter")
            assert app.filter.owner == OWNERS[1].owner

    asyncio.run(run())


def drawn(strip: Strip) -> list[tuple[str, Style | None]]:
    """A line's text runs by style (how the segments are split does not show)."""
    runs: list[tuple[str, Style | None]] = []
    for segment in strip:
        if runs and runs[-1][1] == segment.style:
            runs[-1] = (runs[-1][0] + segment.text, segment.style)
        elif segment.text:
            runs.append((segment.text, segment.style))
    return runs


def test_tables_draw_their_lines_as_datatable_does() -> None:
    """The panels draw their own lines (cheaper): text, styles and the row/column meta that
    mouse handling reads must be what DataTable would draw, with the cursor, a selection mark,
    the mouse over a row, and scrolled down and sideways."""

    def lines_differ(app: ConsoleApp) -> list[str]:
        differ = []
        for table in app.main.tables:
            table._pseudo_class_state = table.get_pseudo_class_state()  # as render_lines does
            for y in range(table.size.height):
                if drawn(table.render_line(y)) != drawn(DataTable.render_line(table, y)):
                    differ.append(f"{table.id}:{y}")
        return differ

    async def run(size: tuple[int, int]) -> None:
        snap = sample_snapshot()
        many = tuple(running(3000 + i, 5 + i) for i in range(60))
        app = ConsoleApp(StaticSource(replace(snap, processing=many)), clock=lambda: 1000.0)
        async with app.run_test(size=size) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            assert lines_differ(app) == []
            await pilot.press("2", "down", "down", "space")
            await pilot.hover("#processing", offset=(4, 5))
            await pilot.pause()
            assert lines_differ(app) == []
            app.main.query_one(ProcessingTable).scroll_to(x=3, y=20, animate=False)
            await pilot.pause()
            assert lines_differ(app) == []

    asyncio.run(run((160, 48)))
    asyncio.run(run((60, 30)))


def test_a_cell_is_drawn_as_rich_draws_it() -> None:
    """The quick way to draw a cell against Rich's: justified, cut short, with spans, and the
    cells that take Rich's own way (centred, several lines)."""
    console = Console(width=80)
    pre = Style(bgcolor="grey11") + Style.from_meta({"row": 1, "column": 2})
    marked = Text.assemble(("● ", "bold magenta"), ("1042", "red"))
    cells = [
        Text("payments"),
        Text("dim", style="dim"),
        Text("12s", justify="right", style="bold"),
        Text("1/5  ", justify="right"),
        Text("left", justify="left", style="cyan"),
        Text("a very long owner name that does not fit", style="dim"),
        Text("lease expired at 09:15 owner w3", overflow="ellipsis", no_wrap=True),
        Text("too long to fit, cropped", overflow="crop", justify="right"),
        marked,
        Text(""),
        Text("mid", justify="center"),
        Text("two\nlines"),
    ]
    for cell in cells:
        for post in (Style(), Style(bgcolor="blue")):
            for width in (14, 6, 2):
                options = console.options.update_dimensions(width, 1).update(no_wrap=True)
                rich = console.render_lines(Styled(Padding(cell, (0, 1)), pre, post), options)[0]
                quick = cell_segments(console, cell, width, 1, pre, post)
                assert drawn(Strip(quick)) == drawn(Strip(rich)), (cell, width, post)


def test_rows_out_of_sight_are_made_only_when_drawn_or_read() -> None:
    """A panel lists up to 100 rows and shows a dozen: a poll or a tick makes the cells of the
    rows in sight; a row that comes into sight later shows the cells of the latest tick."""

    async def run() -> None:
        app = TableApp()
        async with app.run_test(size=(120, 20)) as pilot:
            table = app.query_one(ProcessingTable)
            made: list[int] = []
            original = table.cells

            def counted(item: PanelJob, row_ctx: RowContext) -> tuple[Text, ...]:
                made.append(item.id)
                return original(item, row_ctx)

            table.cells = counted  # type: ignore[method-assign]
            jobs = [running(i, 60 + i) for i in range(1, 101)]
            table.show(jobs, ctx())
            await pilot.pause()
            assert 10 <= len(set(made)) <= 40, made  # the rows in sight and a margin, not 100
            made.clear()
            table.tick(ctx(30))  # the clock moved on: 30 s less on every lease
            await pilot.pause()
            assert 10 <= len(set(made)) <= 40 and 80 not in made, made
            # Read without being drawn: made now, from the latest tick.
            assert table.cells_at(79)[3].plain.strip() == "1m50s"  # job 80: 140 s - 30 s
            # Scrolled into sight: drawn from the latest tick too.
            table.move_cursor(row=99, animate=False)
            await pilot.pause()
            assert 100 in made
            lines = [
                "".join(seg.text for seg in table.render_line(y)) for y in range(table.size.height)
            ]
            assert any("100" in line.split() and "2m10s" in line.split() for line in lines), lines

    asyncio.run(run())
