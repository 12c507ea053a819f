"""`status --check` with thresholds: one line per queue past a limit, exit 3; JSON says which."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg

from leasectl.core.literal import echo
from tests.hostile import MARKUP, TERMINAL, UNICODE
from tests.integration.test_cli import cli
from tests.seed import OWNER
from tests.stores import Stores


def arrange(store: Stores, sql_conn: psycopg.Connection) -> None:
    """Queue a: 2 expired leases, 1 Stuck job, a due job waiting 10 minutes.
    Queue b: 1 expired lease, a due job waiting 1 minute."""
    a = store.ops.enqueue([{}] * 4, queue="a")
    b = store.ops.enqueue([{}] * 2, queue="b")
    held = store.work.claim("a", OWNER, timedelta(minutes=5), limit=3)
    held += store.work.claim("b", OWNER, timedelta(minutes=5), limit=1)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET lease_until = now() - interval '1 minute' WHERE id = ANY(%s)",
        ([le.job_id for le in held],),
    )
    moved = store.ops.operator_mark_stuck(store.ops.seen_now([a[2]]), actor="t", reason="r")
    assert moved.changed == (a[2],)
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = now() - interval '10 minutes' WHERE id = %s", (a[3],)
    )
    sql_conn.execute(
        "UPDATE leasectl.jobs SET run_at = now() - interval '1 minute' WHERE id = %s", (b[1],)
    )


def warnings(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert all(line.startswith("leasectl: check failed: queue ") for line in lines), stderr
    return [line.removeprefix("leasectl: check failed: ") for line in lines]


def test_thresholds_print_one_line_per_violation_and_exit_3(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    arrange(store, sql_conn)
    proc = cli("status", "--max-expired", "1", "--max-oldest-due", "5m", dsn=db_dsn)
    assert proc.returncode == 3, proc.stderr
    assert warnings(proc.stderr) == [
        "queue 'a': 2 expired lease(s), more than --max-expired 1",
        "queue 'a': 1 Stuck job(s), more than --max-stuck 0",
        proc.stderr.splitlines()[2].removeprefix("leasectl: check failed: "),
    ]
    assert proc.stderr.splitlines()[2].startswith(
        "leasectl: check failed: queue 'a': the oldest due job has waited 10m"
    )
    assert proc.stderr.splitlines()[2].endswith("longer than --max-oldest-due 5m00s")
    # Every limit high enough: no line, exit 0 (a's Stuck job is allowed by --max-stuck 1).
    ok = cli(
        "status", "--max-expired", "2", "--max-stuck", "1", "--max-oldest-due", "11m",
        dsn=db_dsn,
    )  # fmt: skip
    assert (ok.returncode, ok.stderr) == (0, "")
    # Each limit on its own, per queue.
    assert warnings(cli("status", "--max-expired", "0", "--max-stuck", "5", dsn=db_dsn).stderr) == [
        "queue 'a': 2 expired lease(s), more than --max-expired 0",
        "queue 'b': 1 expired lease(s), more than --max-expired 0",
    ]
    only_b = cli("status", "-q", "b", "--max-expired", "0", "--max-oldest-due", "30s", dsn=db_dsn)
    assert only_b.returncode == 3
    got = warnings(only_b.stderr)
    assert got[0] == "queue 'b': 1 expired lease(s), more than --max-expired 0"
    assert got[1].startswith("queue 'b': the oldest due job has waited 1m") and len(got) == 2
    b_ok = cli("status", "-q", "b", "--max-expired", "1", "--max-oldest-due", "5m", dsn=db_dsn)
    assert (b_ok.returncode, b_ok.stderr) == (0, "")


def test_thresholds_in_json(db_dsn: str, store: Stores, sql_conn: psycopg.Connection) -> None:
    arrange(store, sql_conn)
    proc = cli("status", "--json", "--max-expired", "1", "--max-stuck", "1", dsn=db_dsn)
    assert proc.returncode == 3
    check = json.loads(proc.stdout)["check"]
    assert check == {
        "expired": 3,
        "stuck": 1,
        "ok": False,
        "thresholds": {
            "max_expired": 1,
            "max_stuck": 1,
            "max_oldest_due_s": None,
            "max_late_schedules": None,
        },
        "violations": [
            {
                "queue": "a",
                "measure": "expired",
                "value": 2,
                "capped": False,
                "estimated": False,
                "limit": 1,
            }
        ],
    }
    aged = cli(
        "status", "--json", "--max-expired", "9", "--max-stuck", "9", "--max-oldest-due", "2m",
        dsn=db_dsn,
    )  # fmt: skip
    [v] = json.loads(aged.stdout)["check"]["violations"]
    assert v["queue"] == "a" and v["measure"] == "oldest_due" and v["limit"] == 120
    assert 600 <= v["value"] < 900


def test_hostile_queue_names_in_violations_are_literal(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    names = [text[:200] for text in TERMINAL + UNICODE + MARKUP]
    for name in names:
        store.ops.enqueue([{}], queue=name)
    proc = cli("status", "--max-oldest-due", "0", "--max-expired", "0", dsn=db_dsn)
    assert proc.returncode == 3
    lines = proc.stderr.splitlines()
    assert len(lines) == len(names), proc.stderr  # one line each, whatever the name holds
    assert "\x1b" not in proc.stderr and "\x9b" not in proc.stderr and "\x07" not in proc.stderr
    for name in names:
        assert any(f"queue {echo(name)}: the oldest due job" in line for line in lines), name


def late_schedules(store: Stores, sql_conn: psycopg.Connection, late: int) -> None:
    """``late`` schedules 10 minutes overdue; one paused and as overdue (not late); one whose
    next slot is 1 minute overdue (within LATE_AFTER: not late)."""
    from leasectl.core.schedules import ScheduleSpec

    for i in range(late):
        store.ops.put_schedule(ScheduleSpec(f"late{i}", "* * * * *", "q"), actor="t", reason="r")
    for name in ("paused", "recent"):
        store.ops.put_schedule(ScheduleSpec(name, "* * * * *", "q"), actor="t", reason="r")
    store.ops.pause_schedule("paused", actor="t", reason="r")
    sql_conn.execute(
        "UPDATE leasectl.schedules SET next_slot = now() - CASE WHEN name = 'recent' "
        "THEN interval '1 minute' ELSE interval '10 minutes' END"
    )


def test_late_schedules_fail_the_check_only_past_max_late_schedules(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    late_schedules(store, sql_conn, 2)
    # Not checked unless asked: --check alone passes.
    assert cli("status", "--check", dsn=db_dsn).returncode == 0
    proc = cli("status", "--max-late-schedules", "1", dsn=db_dsn)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        "leasectl: check failed: 2 late schedule(s) (next slot over 2m00s overdue), "
        "more than --max-late-schedules 1"
    ]
    ok = cli("status", "--max-late-schedules", "2", dsn=db_dsn)
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    shown = cli("status", "--max-late-schedules", "0", "--json", dsn=db_dsn)
    assert shown.returncode == 3, shown.stderr
    check = json.loads(shown.stdout)["check"]
    assert check["ok"] is False and check["thresholds"]["max_late_schedules"] == 0
    assert check["violations"] == [
        {
            "queue": None,
            "measure": "late_schedules",
            "value": 2,
            "capped": False,
            "estimated": False,
            "limit": 0,
        }
    ]


def test_more_late_schedules_than_read_are_a_lower_bound(
    db_dsn: str, store: Stores, sql_conn: psycopg.Connection
) -> None:
    """`status` reads 100 late schedules (or the limit + 1): past that the count is `N+`."""
    late_schedules(store, sql_conn, 103)
    proc = cli("status", "--max-late-schedules", "5", dsn=db_dsn)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.splitlines() == [
        "leasectl: check failed: 100+ late schedule(s) (next slot over 2m00s overdue), "
        "more than --max-late-schedules 5"
    ]
    wide = cli("status", "--max-late-schedules", "101", "--json", dsn=db_dsn)
    assert wide.returncode == 3, wide.stderr
    assert json.loads(wide.stdout)["check"]["violations"][0]["value"] == 102
    assert cli("status", "--max-late-schedules", "103", dsn=db_dsn).returncode == 0
