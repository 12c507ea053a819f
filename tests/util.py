"""Polling helpers: wait for a condition with a deadline instead of sleeping.

``wait_until`` is the one poll loop; ``wait_until_pilot`` is the same loop for a Textual Pilot
(a polling app is never idle, so the console tests yield to it between checks instead of
sleeping). Both name what they waited for when the deadline passes. ``scratch_parent`` says
where the tests' throwaway servers keep their data.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

if TYPE_CHECKING:
    from textual.pilot import Pilot

T = TypeVar("T")

# The session's embedded server's superuser password (tests/conftest.py): the tests that show a
# DSN's password must never be printed give it, and the server asks for it.
SUPERUSER_PASSWORD = "hunter2-Zq9-never-printed"


# Where scratch_parent looks first, and how much room it must have.
_MEMORY_FS = Path("/dev/shm")
# (The full tier's largest database, the estimates' 2M Pending and 10M finished jobs, took the
# memory filesystem to 4.4 GB at its peak.)
_MEMORY_FS_ROOM = 8 << 30


def scratch_parent() -> Path | None:
    """The directory the tests' throwaway embedded servers make theirs in: the memory
    filesystem when it has 8 GiB free, else the system's temporary directory (None).
    ``LEASECTL_TEST_TMPDIR`` names another (empty: the system's).

    Each test clones a database: about a thousand files made and, after the test, removed.
    On an ext4 without a journal (this project's CI machines), each file made scans past the
    inodes removed recently (a profile of the clone: most of its time in the kernel's
    ``recently_deleted``): a clone took 220-350 ms there against about 20 ms in memory, and
    the clones were a third of the fast tier's time. The servers are not durable anyway
    (fsync off)."""
    given = os.environ.get("LEASECTL_TEST_TMPDIR")
    if given is not None:
        return Path(given) if given else None
    try:
        room = os.statvfs(_MEMORY_FS)
    except OSError:
        return None
    if room.f_bavail * room.f_frsize < _MEMORY_FS_ROOM or not os.access(_MEMORY_FS, os.W_OK):
        return None
    return _MEMORY_FS


def _describe(predicate: Callable[[], object]) -> str:
    """The predicate's source line (a lambda says what it waits for), else its name."""
    try:
        return " ".join(inspect.getsource(predicate).split())
    except (OSError, TypeError):
        return getattr(predicate, "__qualname__", repr(predicate))


class _Deadline:
    """Fails the test, naming what it waited for, once ``timeout`` has passed."""

    def __init__(self, timeout: float, what: str, predicate: Callable[[], object]) -> None:
        self.timeout = timeout
        self.what = what or _describe(predicate)
        self.at = time.monotonic() + timeout

    def check(self) -> None:
        if time.monotonic() > self.at:
            raise AssertionError(f"timed out after {self.timeout:g}s waiting for {self.what}")


def wait_until(
    predicate: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.02, what: str = ""
) -> T:
    """Return the first truthy value of ``predicate()``; fail the test after ``timeout``."""
    deadline = _Deadline(timeout, what, predicate)
    while True:
        value = predicate()
        if value:
            return value
        deadline.check()
        time.sleep(interval)


async def wait_until_pilot(
    pilot: Pilot[Any], condition: Callable[[], object], what: str, timeout: float = 15.0
) -> None:
    """``wait_until`` for the console: the app runs between checks (``pilot.pause``)."""
    deadline = _Deadline(timeout, what, condition)
    while not condition():
        deadline.check()
        await pilot.pause(0.05)


def wait_for_lock_wait(conn: psycopg.Connection[Any], *, what: str) -> None:
    """Wait until exactly one session of ``conn``'s database waits on a lock."""
    wait_until(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            == (1,)
        ),
        what=what,
    )


def vacuum_until_all_visible(conn: psycopg.Connection[Any], table: str) -> None:
    """VACUUM ANALYZE ``table`` (schema-qualified) until the visibility map marks every page
    all-visible, with a deadline. A VACUUM cannot mark a page while a transaction that began
    before its last insert runs in the database (an autovacuum ANALYZE of the fresh rows), nor
    before the insert's commit record is flushed (the temporary servers commit asynchronously:
    the rows' hint bits wait for the WAL writer)."""

    def marked() -> bool:
        conn.execute(f"VACUUM ANALYZE {table}")
        row = conn.execute(
            "SELECT relallvisible, relpages FROM pg_catalog.pg_class WHERE oid = %s::regclass",
            (table,),
        ).fetchone()
        return row is not None and row[0] >= row[1]

    wait_until(marked, timeout=30, interval=0.1, what=f"{table}: every page all-visible")
