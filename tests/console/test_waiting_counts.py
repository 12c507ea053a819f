"""The console's counts say how many jobs are Waiting behind their concurrency key, when there
are any: Pilot tests over fixed data (a StaticSource), and the refresh's count on a real
PostgreSQL."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from textual.widgets import Static

from leasectl.console.app import ConsoleApp
from leasectl.console.source import StaticSource
from leasectl.core.enqueue import NewJob
from leasectl.core.models import Snapshot
from tests.console.sample import sample_snapshot
from tests.stores import Stores
from tests.util import wait_until_pilot


def with_counts(**counts: object) -> Snapshot:
    snap = sample_snapshot()
    return replace(snap, counts=replace(snap.counts, **counts))


def summary_of(snap: Snapshot, size: tuple[int, int]) -> str:
    app = ConsoleApp(StaticSource(snap), clock=lambda: 1000.0)
    shown: list[str] = []

    async def go() -> None:
        async with app.run_test(size=size) as pilot:
            await wait_until_pilot(pilot, lambda: app.polls >= 1, "the first refresh")
            shown.append(str(app.main.query_one("#counts", Static).render()))

    asyncio.run(go())
    return shown[0]


def test_the_counts_say_how_many_jobs_wait_behind_their_key() -> None:
    text = summary_of(with_counts(waiting=1234), (160, 40))
    assert "Waiting 1,234" in text
    stuck_at = text.index("Stuck ")
    assert stuck_at < text.index("Waiting 1,234")  # after Stuck, as the statuses go


def test_a_count_at_its_cap_reads_as_a_lower_bound_and_fits_80_columns() -> None:
    text = summary_of(with_counts(waiting=6000, waiting_capped=True), (80, 40))
    assert "Waiting 6,000+" in text
    assert all(len(line) <= 80 for line in text.splitlines())


def test_no_waiting_jobs_no_waiting_count() -> None:
    assert "Waiting" not in summary_of(with_counts(waiting=0), (160, 40))


def test_the_refresh_counts_the_waiting_jobs_of_the_filtered_queue(store: Stores) -> None:
    store.ops.enqueue_jobs([NewJob(n, queue="pay", concurrency_key="k") for n in range(3)])
    store.ops.enqueue_jobs([NewJob(n, queue="mail", concurrency_key="m") for n in range(2)])
    everyone = store.panels.snapshot(None, 10).counts
    assert (everyone.waiting, everyone.waiting_capped, everyone.pending) == (3, False, 2)
    assert store.panels.snapshot("pay", 10).counts.waiting == 2
