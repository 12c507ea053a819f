"""Three real `leasectl watch` processes racing over the same schedules, against one database:
each slot becomes one job, whichever watcher gets there first (schedule_enqueue, migration 19)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from leasectl.core.schedules import ScheduleSpec
from tests.integration.test_cli import _env
from tests.stores import Stores
from tests.util import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.full]

SCHEDULES = 20
MISSED = 30  # minutes each schedule's watcher was down


def test_three_watchers_enqueue_each_slot_once(db_dsn: str, sql_conn: Any, tmp_path: Path) -> None:
    """20 every-minute schedules, down for 30 minutes (catch-up all): three watchers started at
    once enqueue every missed slot of each exactly once, and nothing else."""
    with Stores.connect(db_dsn, "leasectl") as store:
        for i in range(SCHEDULES):
            spec = ScheduleSpec(f"s{i}", "* * * * *", "q", catch_up="all", catch_up_limit=1000)
            store.ops.put_schedule(spec, actor="test", reason=None)
    logs = [tmp_path / f"watch-{i}.log" for i in range(3)]
    watchers = []
    for log in logs:
        with log.open("wb") as err:  # (the child has its own descriptor)
            watchers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "leasectl", "watch", "--interval", "100ms"],
                    env=_env(db_dsn),
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    # All three are passing before the schedules fall due: they race for the same slots.
    wait_until(lambda: all("watching" in log.read_text() for log in logs), timeout=60,
               what="three watchers running")  # fmt: skip
    sql_conn.execute(
        "UPDATE leasectl.schedules SET next_slot = date_trunc('minute', now()) - %s",
        (timedelta(minutes=MISSED),),
    )
    started = sql_conn.execute("SELECT date_trunc('minute', now())").fetchone()[0]
    try:

        def caught_up() -> bool:
            row = sql_conn.execute(
                "SELECT count(*) FROM leasectl.schedules WHERE next_slot <= %s", (started,)
            ).fetchone()
            return row is not None and row[0] == 0

        wait_until(caught_up, timeout=60, what="every schedule caught up")
    finally:
        for proc in watchers:
            proc.send_signal(signal.SIGTERM)
        for proc in watchers:
            proc.wait(timeout=30)
    said_logs = [log.read_text() for log in logs]
    assert all(proc.returncode == 0 for proc in watchers), said_logs
    assert all("Traceback" not in log for log in said_logs), said_logs
    slots = sql_conn.execute(
        "SELECT schedule, slot, job_id FROM leasectl.schedule_slots ORDER BY schedule, slot"
    ).fetchall()
    by_schedule: dict[str, list[datetime]] = {}
    for name, slot, _ in slots:
        by_schedule.setdefault(name, []).append(slot)
    first = started - timedelta(minutes=MISSED)
    for name, got in by_schedule.items():
        # Every minute from the first missed slot on, once, with no gap (the watchers may have
        # gone on to the minutes after `started` before they stopped).
        expected = [first + timedelta(minutes=m) for m in range(len(got))]
        assert got == expected, name
        assert len(got) >= MISSED + 1, name
    assert len(by_schedule) == SCHEDULES
    job_ids = [job for _, _, job in slots]
    assert None not in job_ids and len(set(job_ids)) == len(job_ids)
    jobs = sql_conn.execute("SELECT count(*) FROM leasectl.jobs WHERE queue = 'q'").fetchone()
    assert jobs == (len(slots),)
    # What the watchers say they enqueued adds up to the jobs there are: no watcher counted a
    # slot another one had (its schedule_enqueue returned only the slots it inserted).
    said = [sum(int(n) for n in re.findall(r"enqueued (\d+) scheduled job", log))
            for log in said_logs]  # fmt: skip
    assert sum(said) == len(slots), (said, said_logs)


def test_racing_passes_on_separate_connections_enqueue_a_slot_once(db_dsn: str) -> None:
    """The race at its narrowest: 8 threads, each its own connection, hand schedule_enqueue the
    same due slots at the same moment; each slot is enqueued by one of them."""
    import threading

    from leasectl.core.schedules import SlotPlan
    from leasectl.db.schedules import DueSchedule

    with Stores.connect(db_dsn, "leasectl") as store:
        store.ops.put_schedule(ScheduleSpec("s", "* * * * *", "q"), actor="t", reason=None)
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE leasectl.schedules SET next_slot = date_trunc('minute', now()) - "
            "interval '5 minutes'"
        )
    stores = [Stores.connect(db_dsn, "leasectl", max_size=1) for _ in range(8)]
    try:
        [due] = stores[0].ops.due_schedules(10)
        assert isinstance(due, DueSchedule)
        plan = SlotPlan(
            tuple(due.next_slot + timedelta(minutes=m) for m in range(6)),
            0,
            due.next_slot + timedelta(minutes=6),
        )
        barrier = threading.Barrier(len(stores))
        results: list[int] = []

        def race(s: Stores) -> None:
            barrier.wait()
            results.append(len(s.ops.enqueue_slots(due, plan)))

        threads = [threading.Thread(target=race, args=(s,)) for s in stores]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(results) == [0] * 7 + [6]
    finally:
        for s in stores:
            s.close()
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM leasectl.jobs").fetchone() == (6,)
