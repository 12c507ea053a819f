"""Seed a realistic incident into a database and take SVG screenshots of the console.

    python screenshots/make_screenshots.py "host=127.0.0.1 user=postgres dbname=leasectl_shots" \
        [--reset] [--schema leasectl] [--out screenshots] [--live 0]

The state: three payment workers (one fresh, one late, one silent), a mail worker, a stopped
report worker; jobs at risk and expired; quarantined Stuck jobs; retries waiting with run_at in
the future; a backlog; and 30 minutes of completions that slow down at the end. It writes
``console-main.svg`` (160x48), ``console-narrow.svg`` (80x24), ``console-detail.svg``,
``console-confirm.svg``, ``console-failed.svg`` and ``console-find.svg`` (120x36); for
``console-paused.svg`` (160x48) it pauses the payments queue, and resumes it after. With
``--live N`` it then keeps the healthy workers heartbeating for N seconds, so that `leasectl tui`
can be watched against the same state.

The target schema must be empty, or ``--reset`` given (which TRUNCATEs the leasectl tables).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg import sql
from textual.pilot import Pilot

from leasectl.console.app import ConsoleApp
from leasectl.console.source import DatabaseSource
from leasectl.core.models import Lease
from leasectl.db.connection import Database
from leasectl.db.operations import Operations
from leasectl.db.work import WorkerStore

HB = timedelta(seconds=10)
TTL = timedelta(seconds=30)
W1 = "pay-worker-1:4121:a1b2c3"  # fresh
W2 = "pay-worker-2:4188:d4e5f6"  # late: its last heartbeat was 20 s ago
W3 = "pay-worker-3:5012:0f9e8d"  # silent: gone for two minutes, leases expired
M1 = "mail-worker-1:777:aa11bb"  # fresh, another queue
R1 = "report-worker:901:cc22dd"  # stopped cleanly, left a Stuck job behind
PAUSED_BY = "operator:alice@ops-1"
PAUSED_WHY = "card processor outage, INC-4471: no charges until their all-clear"


def seed(dsn: str, schema: str, *, reset: bool) -> dict[str, list[Lease]]:
    """Build the incident; returns the leases held by the healthy workers (for --live)."""
    db = Database.connect(dsn, schema, check_schema=False, max_size=2)
    try:
        db.migrate()
        with psycopg.connect(dsn, autocommit=True) as conn:
            _prepare(conn, schema, reset=reset)
            _history(conn, schema)
        leases = _live(WorkerStore(db), Operations(db), dsn, schema)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ANALYZE {}.jobs").format(sql.Identifier(schema)))
            # The history of the finished jobs inserted directly (as their workers' claims and
            # completions would have written it), and a fold: the minute's backlog sample.
            conn.execute(
                _t(
                    conn,
                    schema,
                    """
                    INSERT INTO {s}.queue_history (queue, minute, started, completed, pickup)
                    SELECT queue, date_trunc('minute', finished_at, 'UTC'), count(*), count(*),
                           ARRAY[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, count(*)]::bigint[]
                    FROM {s}.jobs
                    WHERE status = 'Completed' AND finished_at > now() - interval '1 hour'
                    GROUP BY 1, 2
                    ON CONFLICT (queue, minute) DO NOTHING
                    """,
                )
            )
            conn.execute(_t(conn, schema, "SELECT {s}.history_fold(100000, 1000, 6000, 100)"))
        return leases
    finally:
        db.close()


def _t(conn: psycopg.Connection, schema: str, text: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def _prepare(conn: psycopg.Connection, schema: str, *, reset: bool) -> None:
    jobs = conn.execute(_t(conn, schema, "SELECT count(*) FROM {s}.jobs")).fetchone()
    if jobs and jobs[0] and not reset:
        sys.exit(f"schema {schema!r} already has {jobs[0]} jobs; pass --reset to empty it")
    if reset:
        conn.execute(
            _t(
                conn,
                schema,
                "TRUNCATE {s}.jobs, {s}.job_attempts, {s}.job_events, {s}.workers, "
                "{s}.queue_state, {s}.queue_events, {s}.queue_history, "
                "{s}.queue_history_deltas, {s}.queue_backlog, {s}.queue_backlog_minutes",
            )
        )


def _history(conn: psycopg.Connection, schema: str) -> None:
    """Finished history, inserted directly: a week of it, then 30 minutes of completions at
    about 230 a minute that collapse to 25 a minute in the last 10 (payments stopped moving),
    and a few permanent failures."""
    insert = _t(
        conn,
        schema,
        """
        INSERT INTO {s}.jobs (queue, payload, status, attempts, lease_owner, heartbeat_at,
                              created_at, updated_at, finished_at, run_at)
        SELECT CASE WHEN g %% 5 = 0 THEN 'emails' ELSE 'payments' END,
               jsonb_build_object('order_id', 'ord_' || g), 'Completed', 1,
               CASE WHEN g %% 5 = 0 THEN 'mail-worker-1:777:aa11bb'
                    ELSE 'pay-worker-1:4121:a1b2c3' END,
               t, t - interval '2 seconds', t, t, t - interval '3 seconds'
        FROM generate_series(1, %(n)s) AS g,
             LATERAL (SELECT now() - make_interval(
                 secs => %(start)s::float8 + g * %(step)s::float8)) AS x(t)
        """,
    )
    conn.execute(insert, {"n": 250, "start": 0.0, "step": 600 / 250})
    conn.execute(insert, {"n": 4600, "start": 600.0, "step": 1200 / 4600})
    conn.execute(insert, {"n": 50000, "start": 1800.0, "step": 7 * 86400 / 50000})
    conn.execute(
        _t(
            conn,
            schema,
            """
            INSERT INTO {s}.jobs (queue, status, attempts, max_attempts, lease_owner,
                                  last_error, finished_at)
            SELECT 'payments', 'Failed', 5, 5, 'pay-worker-2:4188:d4e5f6',
                   'card declined: do_not_honor', now() - make_interval(secs => g * 97)
            FROM generate_series(1, 40) AS g
            """,
        )
    )


def _live(work: WorkerStore, ops: Operations, dsn: str, schema: str) -> dict[str, list[Lease]]:
    for worker, host, pid, queues, stopped in (
        (W1, "pay-worker-1", 4121, ["payments"], False),
        (W2, "pay-worker-2", 4188, ["payments"], False),
        (W3, "pay-worker-3", 5012, ["payments"], False),
        (M1, "mail-worker-1", 777, ["emails"], False),
        (R1, "report-worker", 901, ["reports"], True),
    ):
        work.worker_register(
            worker, hostname=host, pid=pid, queues=queues, lease_ttl=TTL, heartbeat_every=HB
        )
        if stopped:
            work.worker_stopped(worker)

    payment = {"amount_cents": 129900, "currency": "EUR", "customer": {"id": "cus_4471"}}
    ops.enqueue([{**payment, "order_id": f"ord_{i:05d}"} for i in range(40)], queue="payments")
    ops.enqueue([{"to": f"user{i}@example.com"} for i in range(6)], queue="emails")
    ops.enqueue([{"report": "daily"} for _ in range(2)], queue="reports")

    with psycopg.connect(dsn, autocommit=True) as conn:
        # The backlog has been building up for a few minutes.
        conn.execute(
            _t(
                conn,
                schema,
                "UPDATE {s}.jobs SET run_at = now() - make_interval(secs => 400 - id % 400), "
                "created_at = now() - make_interval(secs => 400 - id % 400) "
                "WHERE status = 'Pending'",
            )
        )

    # Retries: leased, failed, back to Pending with run_at in the future.
    for delay in (42, 95, 180):
        (lease,) = work.claim("payments", W2, TTL)
        work.fail(lease, "gateway 503 Service Unavailable", retry_delay=timedelta(seconds=delay))

    # One job for the detail screen: its lease expired under the silent worker, the watcher
    # requeued it, pay-worker-1 took it (attempt 2) and then stopped heartbeating it.
    (first,) = work.claim("payments", W3, TTL)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            _t(
                conn,
                schema,
                "UPDATE {s}.jobs SET lease_until = now() - interval '1 minute' WHERE id = %s",
            ),
            (first.job_id,),
        )
    ops.requeue_expired(
        limit=1, queue="payments", mark=False, actor="watcher@ops-1:311", reason="lease expired"
    )
    detail = work.claim_by_id(first.job_id, W1, TTL)
    assert detail is not None

    held: dict[str, list[Lease]] = {W1: [], W2: [], M1: []}
    held[W1] += work.claim("payments", W1, TTL, limit=5)
    held[W2] += work.claim("payments", W2, TTL, limit=3)
    held[M1] += work.claim("emails", M1, TTL, limit=2)
    silent = work.claim("payments", W3, TTL, limit=3)
    report = work.claim("reports", R1, TTL, limit=1)

    with psycopg.connect(dsn, autocommit=True) as conn:

        def shift(ids: list[int], lease_s: float, heartbeat_s: float) -> None:
            conn.execute(
                _t(
                    conn,
                    schema,
                    "UPDATE {s}.jobs SET lease_until = now() + make_interval(secs => %s), "
                    "heartbeat_at = now() - make_interval(secs => %s) WHERE id = ANY(%s)",
                ),
                (lease_s, heartbeat_s, ids),
            )

        # The silent worker's leases lapsed; its worker row stopped updating 2 minutes ago.
        shift([le.job_id for le in silent], -75, 105)
        conn.execute(
            _t(
                conn,
                schema,
                "UPDATE {s}.workers SET last_seen_at = now() - interval '2 minutes' "
                "WHERE worker_id = %s",
            ),
            (W3,),
        )
        # The late worker: last heartbeat 20 s ago, one lease about to lapse.
        conn.execute(
            _t(
                conn,
                schema,
                "UPDATE {s}.workers SET last_seen_at = now() - interval '20 seconds' "
                "WHERE worker_id = %s",
            ),
            (W2,),
        )
        conn.execute(
            _t(
                conn,
                schema,
                "UPDATE {s}.workers SET last_seen_at = now() - interval '15 minutes', "
                "stopped_at = now() - interval '15 minutes' WHERE worker_id = %s",
            ),
            (R1,),
        )
        shift([held[W2][0].job_id], 5, 25)
        shift([le.job_id for le in held[W2][1:]], 12, 18)
        # pay-worker-1 is up but one of its jobs stopped heartbeating: "owner alive".
        shift([detail.job_id], -9, 39)
        # The stopped report worker's job lapsed 10 minutes ago.
        shift([le.job_id for le in report], -600, 630)

    # The watcher (in mark mode) quarantined the report job and one of the silent worker's.
    ops.requeue_expired(
        limit=1, queue="reports", mark=True, actor="watcher@ops-1:311", reason="watch --mode mark"
    )
    ops.requeue_expired(
        limit=1, queue="payments", mark=True, actor="watcher@ops-1:311", reason="watch --mode mark"
    )
    return held


async def _wait(pilot: Pilot[None], what: str, cond: Callable[[], object]) -> None:
    """A polling app is never idle: wait for a condition, with a deadline."""
    deadline = time.monotonic() + 15
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await pilot.pause(0.05)


async def shoot(dsn: str, schema: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    async def take(name: str, size: tuple[int, int], keys: list[str]) -> None:
        source = DatabaseSource.connect(dsn, schema)
        app = ConsoleApp(source, refresh=timedelta(seconds=2))
        try:
            async with app.run_test(size=size) as pilot:
                await _wait(pilot, "the first refresh", lambda: app.snapshot is not None)
                await _wait(pilot, "the privilege check", lambda: app.privileges_checked)
                for key in keys:
                    if key == "owner-alive":  # move to the stuck job whose owner is alive
                        assert app.snapshot is not None
                        ids = [j.lease_owner for j in app.snapshot.stuck]
                        for _ in range(ids.index(W1)):
                            await pilot.press("down")
                        continue
                    if key == "wait:queues":  # the Queues view's rows, before `enter`
                        await _wait(pilot, "the Queues view", lambda: app.screen.reads)
                        continue
                    if key.startswith("type:"):  # text typed into an input
                        await pilot.press(*key.removeprefix("type:"))
                        continue
                    await pilot.press(key)
                    await pilot.pause(0.1)
                if name == "console-find":
                    await pilot.pause(1.5)  # the search runs in the background
                if name in ("console-queues", "console-queue"):  # read in the background too
                    await _wait(pilot, "the queues' read", lambda: getattr(app.screen, "reads", 0))
                if name == "console-detail":
                    await _wait(
                        pilot, "the job detail", lambda: getattr(app.screen, "detail", None)
                    )
                await pilot.pause(0.3)
                app.save_screenshot(str(out / f"{name}.svg"))
                print(f"wrote {out / f'{name}.svg'}")
        finally:
            source.close()

    await take("console-main", (160, 48), [])
    # An operator paused payments while the card processor is down: the summary says who and
    # why; the end of the Pending panel shows its jobs paused (its retries' countdowns too),
    # the other queues' ready.
    ops = Operations(Database.connect(dsn, schema, max_size=1))
    try:
        ops.pause("payments", actor=PAUSED_BY, reason=PAUSED_WHY)
        with psycopg.connect(dsn, autocommit=True) as conn:  # paused a while ago, not just now
            conn.execute(
                sql.SQL("UPDATE {}.queue_state SET paused_at = now() - interval '7 min'").format(
                    sql.Identifier(schema)
                )
            )
        try:
            await take("console-paused", (160, 48), ["1", "ctrl+end"])
        finally:
            ops.resume("payments", actor=PAUSED_BY, reason="screenshot taken")
    finally:
        ops.db.close()
    await take("console-narrow", (80, 24), ["3"])
    await take("console-detail", (160, 48), ["3", "owner-alive", "enter"])
    await take("console-confirm", (160, 48), ["R"])
    await take("console-failed", (120, 36), ["5"])
    await take("console-find", (120, 36), ["f", "type:state:failed queue:payments", "enter"])
    await take("console-queues", (160, 48), ["Q"])
    await take("console-queue", (160, 48), ["Q", "wait:queues", "enter"])


def live(dsn: str, schema: str, held: dict[str, list[Lease]], seconds: float) -> None:
    """Keep the healthy workers heartbeating (and completing now and then) for a while."""
    work = WorkerStore(Database.connect(dsn, schema))
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            for worker, leases in held.items():
                work.worker_seen(worker)
                if leases:
                    work.heartbeat(leases, TTL)
            time.sleep(HB.total_seconds() / 2)
    finally:
        work.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsn")
    parser.add_argument("--schema", default="leasectl")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent)
    parser.add_argument("--reset", action="store_true")
    parser.add_argument("--no-shots", action="store_true", help="only seed")
    parser.add_argument("--live", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    os.environ.setdefault("TZ", "UTC")
    time.tzset()
    held = seed(args.dsn, args.schema, reset=args.reset)
    if not args.no_shots:
        asyncio.run(shoot(args.dsn, args.schema, args.out))
    if args.live > 0:
        live(args.dsn, args.schema, held, args.live)


if __name__ == "__main__":
    main()
