"""The detail screen of a job whose text fields a role filled with megabytes (before migration
15 bounded them): it reads their beginnings and sizes, opens at once and `esc` / `q` answer."""

from __future__ import annotations

import time

import psycopg
import pytest
from textual.pilot import Pilot
from textual.widgets import Static

from leasectl.console.app import ConsoleApp
from leasectl.console.screens.detail import DetailScreen
from tests.console.test_console_db import drive
from tests.console.test_hostile import open_detail, widget_text
from tests.util import wait_until_pilot

OWNER_BYTES = 19_000_000
ERROR_BYTES = 2_000_000


def seed_big_text(conn: psycopg.Connection) -> int:
    """A Failed job with a 19 MB lease_owner and a 2 MB last_error, and an attempt as big."""
    conn.execute("ALTER TABLE leasectl.jobs DROP CONSTRAINT jobs_bounded_values")
    conn.execute("ALTER TABLE leasectl.job_attempts DROP CONSTRAINT job_attempts_bounded_values")
    row = conn.execute(
        "INSERT INTO leasectl.jobs (queue, status, attempts, lease_owner, last_error, "
        "finished_at) VALUES ('q', 'Failed', 1, repeat('O', %s), repeat('E', %s), now()) "
        "RETURNING id",
        (OWNER_BYTES, ERROR_BYTES),
    ).fetchone()
    assert row is not None
    conn.execute(
        "INSERT INTO leasectl.job_attempts (job_id, attempt, lease_owner, outcome, error) "
        "VALUES (%s, 1, repeat('O', %s), 'failed', repeat('E', %s))",
        (row[0], OWNER_BYTES, ERROR_BYTES),
    )
    return int(row[0])


@pytest.mark.full  # megabytes of text
def test_the_detail_of_a_job_with_megabytes_of_text_opens_and_closes(
    db_dsn: str, sql_conn: psycopg.Connection
) -> None:
    job_id = seed_big_text(sql_conn)
    took: list[float] = []

    async def scenario(app: ConsoleApp, pilot: Pilot[None]) -> None:
        for key in ("escape", "q"):
            started = time.monotonic()
            screen = await open_detail(app, pilot, job_id)
            took.append(time.monotonic() - started)
            body = widget_text(screen.query_one("#detail-content", Static), "the detail")
            assert f"first 4,096 characters of {OWNER_BYTES:,} bytes" in body
            assert f"first 4,096 characters of {ERROR_BYTES:,} bytes" in body
            assert f"leasectl inspect {job_id} --full" in body
            assert len(body) < 200_000
            await pilot.press(key)
            if key == "escape":
                await wait_until_pilot(
                    pilot, lambda: not isinstance(app.screen, DetailScreen), "back from detail"
                )

    app = drive(db_dsn, scenario)
    assert app.return_code is not None or not app.is_running  # `q` quit the console
    assert max(took) < 5, took  # about 0.2 s here; it was minutes, with keys ignored
