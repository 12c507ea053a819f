"""The panel tables redraw only what changed, and still show every change."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

from textual.app import App, ComposeResult

from leasectl.console.widgets.tables import RISK_STYLE, ProcessingTable, RowContext
from leasectl.models import JobStatus, PanelJob
from tests.console.sample import HB, NOW, W1, job, s


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


def keys(table: ProcessingTable) -> list[str | None]:
    return [row.key.value for row in table.ordered_rows]


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
        assert table.get_cell("1", "queue").style == RISK_STYLE
        assert table.get_cell("2", "queue").style == ""
        assert keys(table) == ["1", "2"]

    with_table(check)


def test_changed_rows_are_replaced_and_the_cursor_stays_on_its_job() -> None:
    def check(table: ProcessingTable, calls: dict[str, int]) -> None:
        table.show([running(1, 60), running(2, 90), running(3, 120)], ctx())
        table.move_cursor(row=1, animate=False)  # job 2
        table.show([running(4, 30), running(2, 90), running(3, 120)], ctx())
        assert keys(table) == ["4", "2", "3"]
        assert table.highlighted_key() == "2"
        table.show([running(3, 120), running(2, 90)], ctx())
        assert keys(table) == ["3", "2"]
        assert table.highlighted_key() == "2"

    with_table(check)
