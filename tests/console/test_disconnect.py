"""Losing the server: a banner with the next retry, the last data kept, recovery by itself."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from leasectl.console.app import ConsoleApp
from leasectl.console.source import DatabaseSource
from leasectl.console.widgets.tables import PendingTable
from leasectl.db.embedded import EmbeddedServer
from tests.conftest import SCHEMA
from tests.stores import Stores
from tests.util import wait_until_pilot


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    srv = EmbeddedServer.temporary()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop(remove=True, mode="immediate")


@pytest.mark.slow
def test_banner_while_the_server_is_down_then_recovery(server: EmbeddedServer) -> None:
    dsn = server.dsn()
    with Stores.connect(dsn, SCHEMA, check_schema=False) as store:
        store.db.migrate()
        store.ops.enqueue([{"n": i} for i in range(3)], queue="payments")
    source = DatabaseSource.connect(dsn, SCHEMA)
    app = ConsoleApp(source, refresh=timedelta(milliseconds=300))

    def banner() -> Static:
        return app.main.query_one("#banner", Static)

    async def scenario(pilot: Pilot[None]) -> None:
        await wait_until_pilot(pilot, lambda: app.snapshot is not None, "the first refresh")
        assert not banner().has_class("-shown")
        rows = app.main.query_one("#pending", PendingTable).row_count
        assert rows == 3

        await asyncio.to_thread(server.stop, mode="fast")
        await wait_until_pilot(pilot, lambda: banner().has_class("-shown"), "the banner", 20)
        await wait_until_pilot(pilot, lambda: app.next_poll_at is not None, "a retry to be armed")
        await pilot.pause(1.1)  # let the banner's countdown and the data's age tick
        text = str(banner().render())
        assert "DATABASE UNREACHABLE" in text
        assert "next retry in" in text or "retrying now" in text
        assert "showing data from" in text
        assert app.connected is False
        # The last data stays on screen, with its age.
        assert app.main.query_one("#pending", PendingTable).row_count == rows
        assert "disconnected" in str(app.main.query_one("#status-left").render())

        await asyncio.to_thread(server.start)
        await wait_until_pilot(pilot, lambda: app.connected is True, "the reconnection", 40)
        await wait_until_pilot(
            pilot, lambda: not banner().has_class("-shown"), "the banner to clear"
        )
        assert app.error is None

    async def run() -> None:
        async with app.run_test(size=(160, 48)) as pilot:
            await scenario(pilot)

    try:
        asyncio.run(run())
    finally:
        source.close()
