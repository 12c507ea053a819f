"""The console's loose ends, from fixed data: the footer at 80 columns, left and right
widgets that never run into each other at any width, and the phrases it shares with `leasectl
status` (an owner's intervals, a job due since '-infinity')."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import timedelta

import pytest
from rich.console import Console
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Footer, Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.help import KEYS
from leasectl.console.source import StaticSource
from leasectl.console.widgets.bars import counts_groups, pack
from leasectl.console.widgets.tables import OwnersTable, PendingTable
from leasectl.core.models import PausedQueue, Snapshot
from leasectl.core.timestamps import RUN_AT_FLOOR, TIMESTAMP_MIN
from leasectl.present.status import owners_table
from tests.console.sample import NOW, OWNERS, PENDING, sample_snapshot
from tests.util import wait_until_pilot

Scenario = Callable[[ConsoleApp, Pilot[None]], Awaitable[None]]


def run_fixed(snapshot: Snapshot, size: tuple[int, int], scenario: Scenario, **kw: object) -> None:
    app = ConsoleApp(StaticSource(snapshot, **kw), clock=lambda: 1000.0)  # type: ignore[arg-type]

    async def run() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            await wait_until_pilot(pilot, lambda: app.privileges_checked, "the privilege check")
            await pilot.pause()
            await scenario(app, pilot)

    asyncio.run(run())


def footer_keys(app: ConsoleApp) -> list[Widget]:
    return list(app.main.query_one(Footer).children)


def test_the_footer_shows_p_and_fits_80_columns() -> None:
    """P (pause or resume the highlighted job's queue) was hidden from the footer; at 80x24 the
    footer shows every action key, find and help, each whole, and help lists P."""

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        keys = footer_keys(app)
        assert [getattr(k, "key", None) for k in keys] == [
            "slash", "r", "s", "R", "P", "f", "question_mark",
        ]  # fmt: skip
        for key in keys:
            assert key.region.width > 0 and key.region.right <= 80, key
        [pause] = [k for k in keys if getattr(k, "key", None) == "P"]
        assert "Pause/resume" in str(pause.render())
        assert any(key == "P" and "pause" in text for key, text in KEYS)

    run_fixed(sample_snapshot(), (80, 24), scenario)


def line(widget: Widget, y: int) -> str:
    """Row ``y`` of a widget as the screen draws it: its padding and its fill included."""
    [strip] = widget.render_lines(Region(0, y, widget.region.width, 1))
    assert strip.cell_length == widget.region.width
    return strip.text


def joined(left: Widget, right: Widget, y: int, right_y: int | None = None) -> tuple[str, str]:
    """Row ``y`` of two widgets side by side: the text either side of where they meet."""
    assert left.region.right == right.region.x, (left.region, right.region)
    return line(left, y), line(right, y if right_y is None else right_y)


def apart(pair: tuple[str, str]) -> bool:
    left, right = pair
    return not left or not right or left[-1] == " " or right[0] == " "


def laid_out(app: ConsoleApp) -> bool:
    """Whether the counts show what they hold at the current width (they are packed for it
    after a resize, once the new width is known)."""
    counts = app.main.query_one("#counts", Static)
    now = app.db_now()
    assert app.snapshot is not None and now is not None
    packed = pack(counts_groups(app.snapshot, now, app.filter), counts.size.width)
    return line(counts, 0).rstrip() == packed.plain.splitlines()[0].rstrip()


# A paused queue with a long reason: the summary's paused line is cut to the full width.
PAUSED = (PausedQueue("payments", NOW - timedelta(minutes=3), "alice", "card processor " * 20),)


@pytest.mark.full  # a sweep of every width
def test_left_and_right_never_touch_at_any_width() -> None:
    """At 80 columns the DSN's "…" ran into "db clock"; at 140 a summary line ran into the
    throughput label ("Stuck 2completed/min"). At every width from 80 to 200 there is a space
    between the status bar's halves and between the counts and the throughput."""
    where = "db.example.internal:5432/payments_production_eu_west_1?application_name=console"
    snap = replace(sample_snapshot(), paused=PAUSED, paused_total=1)

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        touching: list[tuple[int, str, tuple[str, str]]] = []
        for width in range(80, 201):
            await pilot.resize_terminal(width, 30)
            await wait_until_pilot(pilot, lambda w=width: app.main.size.width == w, "the resize")
            await wait_until_pilot(pilot, lambda: laid_out(app), "the summary laid out anew")
            status = (app.main.query_one("#status-left"), app.main.query_one("#status-right"))
            if not apart(pair := joined(*status, 0)):
                touching.append((width, "status", pair))
            counts = app.main.query_one("#counts", Static)
            label = app.main.query_one("#throughput-label", Static)
            if label.region.x > counts.region.x:  # wide: side by side
                if not apart(pair := joined(counts, label, 0, 0)):
                    touching.append((width, "summary", pair))
                spark = app.main.query_one("#sparkline")
                if not apart(pair := joined(counts, spark, 1, 0)):
                    touching.append((width, "summary", pair))
        assert [t[:2] for t in touching if t[1] == "summary"] == []
        assert not touching

    run_fixed(snap, (80, 30), scenario, where=where)


def test_both_servers_stay_in_sight_when_the_standby_is_stale() -> None:
    """With --read-dsn and a stale standby, at 140 columns the header cut the standby's
    address ("reads standby.exam…"). Narrower, the header gives up the server's version, then
    the standby's database name when it is the primary's, then the "db clock" label; wide, it
    shows all of them."""
    snap = replace(sample_snapshot(), read_lag=timedelta(seconds=45))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        left = app.main.query_one("#status-left")
        right = app.main.query_one("#status-right")
        shown: dict[int, tuple[str, str]] = {}
        for width, ends in (
            (200, "PostgreSQL 16.3"),
            (160, "reads standby.example:5433/payments"),
            (140, "reads standby.example:5433"),
            (120, "…"),
        ):
            await pilot.resize_terminal(width, 40)
            # (Laid out again after the resize: the left half then ends with ``ends``.)
            await wait_until_pilot(
                pilot,
                lambda w=width, e=ends: (
                    app.main.size.width == w and line(left, 0).rstrip().endswith(e)
                ),
                f"the header at {width} columns",
            )
            shown[width] = (line(left, 0), line(right, 0))
            assert "⚠ countdowns stale: standby 45s behind" in shown[width][1]
        assert (
            "db.example:5432/payments  reads standby.example:5433/payments  PostgreSQL"
            in (shown[200][0])
        )
        assert "db clock 09:30:00" in shown[200][1] and "db clock 09:30:00" in shown[160][1]
        assert "PostgreSQL" not in shown[160][0]
        assert "db.example:5432/payments  reads standby.example:5433" in shown[140][0]
        assert "db clock" not in shown[140][1] and "09:30:00 UTC" in shown[140][1]

    run_fixed(snap, (140, 40), scenario, read_where="standby.example:5433/payments")


def test_the_owners_intervals_read_as_leasectl_status_reads_them() -> None:
    """The console said ``1m00s/3m00s`` where `leasectl status` said ``1m/3m`` for the same
    owner: one phrase (present/times.py) for both."""
    slow = replace(OWNERS[0], heartbeat_every=timedelta(minutes=1), lease_ttl=timedelta(minutes=3))
    snap = replace(sample_snapshot(), owners=(slow, *OWNERS[1:]))

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        table = app.main.query_one("#owners", OwnersTable)
        column = table.shown_columns.index("intervals")
        assert table.cells_at(0)[column].plain == "1m/3m"
        assert table.cells_at(1)[column].plain == "10s/30s"

    run_fixed(snap, (160, 48), scenario)
    console = Console(width=200, record=True)
    console.print(owners_table([slow], NOW))
    assert " 1m/3m" in console.export_text()


def test_a_job_due_since_minus_infinity_has_waited_forever() -> None:
    """run_at '-infinity' (loaded as the earliest datetime), or the schema's earliest run_at
    that migration 5 made of it, is due "forever", not for 739,000 days."""
    for earliest in (TIMESTAMP_MIN, RUN_AT_FLOOR):
        pending = (replace(PENDING[0], run_at=earliest), *PENDING[1:])
        counts = replace(sample_snapshot().counts, oldest_due_at=earliest)
        snap = replace(sample_snapshot(), pending=pending, counts=counts)

        async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
            counts_text = str(app.main.query_one("#counts", Static).render())
            assert "oldest forever)" in counts_text
            table = app.main.query_one("#pending", PendingTable)
            waiting = table.cells_at(0)[table.shown_columns.index("waiting")].plain
            assert (waiting, table.cells_at(1)[table.shown_columns.index("waiting")].plain) == (
                "forever",
                "4m10s",
            )

        run_fixed(snap, (160, 48), scenario)
