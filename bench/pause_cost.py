"""What the paused-queue check costs the worker's round trip: A/B, interleaved, one server.

    python -m bench.pause_cost DSN [--rounds 12] [--single 2000] [--batch-trips 200]

``jobs_complete_and_claim`` as the worker runs it (prepared once through ``db/hot.py``, the
worker's session settings, each claim resumed at the previous one's key) in two variants on
two connections of one fresh database: *before*, the statement without the pause check (the
same text with the ``NOT EXISTS (... queue_state ...)`` line removed), and *after*, as shipped.
Single-job mode: each trip completes the one job of the previous trip and claims one; batch
mode (concurrency 50): completes the 50 of the previous trip and claims 50. The variants take
turns, round by round (the order alternating), so that the drift of a shared machine and of the
claim index (dead entries of claimed jobs) falls on both alike. One queue is paused (another
queue's), as on a system that uses pauses. Prints the median over rounds of each variant's mean
client-side time per round trip and of the server backend's CPU time per round trip (from
/proc/PID/schedstat: a local server; far less disturbed by a busy machine than wall time), and
the differences.
"""

from __future__ import annotations

import argparse
import statistics
import time
import types
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql

from leasectl.db import hot
from leasectl.db import sql as queries
from leasectl.db.connection import Database
from leasectl.db.loaders import fast_adapters
from leasectl.db.work import claim_from

SCHEMA = "leasectl"
NAME = "jobs_complete_and_claim"
_TTL = timedelta(seconds=30)
CHECK = (
    "          AND NOT EXISTS (SELECT FROM {schema}.queue_state AS s WHERE s.queue = %(queue)s)\n"
)


def without_check() -> queries.Query:
    shipped = queries.get(NAME)
    assert shipped.text.count(CHECK) == 1, "the pause check is not in the claim as expected"
    return queries.Query(NAME + "_before", shipped.description, shipped.text.replace(CHECK, ""))


def fresh_database(base: str, name: str, jobs: int) -> str:
    """A new database ``name`` on ``base``'s server (dropped first if it exists), migrated,
    with ``jobs`` due Pending jobs in queue ``q`` (VACUUM ANALYZEd); returns its DSN."""
    with psycopg.connect(base, autocommit=True) as conn:
        drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        conn.execute(drop)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = conninfo.make_conninfo(base, dbname=name)
    with Database.connect(dsn, SCHEMA, check_schema=False) as db:
        db.migrate()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO leasectl.jobs (queue, run_at) SELECT 'q', now() - interval '1 hour' "
            "+ interval '1 ms' * i FROM generate_series(1, %s) AS i",
            (jobs,),
        )
        conn.execute("VACUUM ANALYZE leasectl.jobs")
    return dsn


class Variant:
    """One statement variant on its own connection, keeping its leases between trips."""

    def __init__(self, db: Database, name: str) -> None:
        self.conn = db.borrow()
        self.hot = hot.HotConnection(self.conn, SCHEMA, fast_adapters(self.conn))
        self.name = name
        self.done: list[tuple[int, int]] = []
        self.key: Any = None
        self.times: list[float] = []  # mean seconds per trip, per round
        row = self.conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        self.schedstat = Path(f"/proc/{row[0]}/schedstat")  # a local server's backend
        self.cpu: list[float] = []  # its CPU seconds per trip, per round

    def server_cpu(self) -> float:
        """The backend's CPU time so far (ns precision; 0 when the server is not local)."""
        try:
            return int(self.schedstat.read_text().split()[0]) / 1e9
        except OSError:
            return 0.0

    def round(self, trips: int, limit: int) -> None:
        start, cpu = time.perf_counter(), self.server_cpu()
        for _ in range(trips):
            rows, names = self.hot.run(
                self.name,
                {
                    "done_ids": "{" + ",".join(str(i) for i, _ in self.done) + "}",
                    "done_attempts": "{" + ",".join(str(a) for _, a in self.done) + "}",
                    "owner": "bench",
                    "queue": "q",
                    "ttl": _TTL,
                    "limit": limit,
                    **claim_from(self.key),
                },
            )
            if not rows or rows[0][0] is None:
                raise SystemExit("the queue ran dry: seed more jobs")
            at = {n: names.index(n) for n in ("id", "attempts", "priority", "run_at")}
            self.done = [(r[at["id"]], r[at["attempts"]]) for r in rows]
            first = min(rows, key=lambda r: (r[at["priority"]], r[at["run_at"]], r[at["id"]]))
            self.key = (first[at["priority"]], first[at["run_at"]], first[at["id"]])
        self.times.append((time.perf_counter() - start) / trips)
        self.cpu.append((self.server_cpu() - cpu) / trips)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--single", type=int, default=2000, help="single-job trips per round")
    p.add_argument("--batch-trips", type=int, default=200, help="50-job trips per round")
    a = p.parse_args()
    jobs = 2 * a.rounds * (a.single + 50 * a.batch_trips) + 10_000
    name = "leasectl_pause_cost"
    dsn = fresh_database(a.dsn, name, jobs)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO leasectl.queue_state (queue, paused_by, reason) "
                "VALUES ('other', 'bench', 'another queue is paused')"
            )
            conn.execute("VACUUM ANALYZE leasectl.queue_state")
        before = without_check()
        real = queries

        def get(query_name: str) -> queries.Query:
            return before if query_name == before.name else real.get(query_name)

        hot.queries = types.SimpleNamespace(get=get, numbered=real.numbered)  # type: ignore[assignment]
        db = Database.connect(dsn, SCHEMA, max_size=4, generic_plans=True)
        try:
            for mode, trips, limit in (("single-job", a.single, 1), ("c=50", a.batch_trips, 50)):
                variants = [Variant(db, before.name), Variant(db, NAME)]
                for v in variants:
                    v.round(max(1, trips // 10), limit)  # prepare and warm up
                    v.times.clear()
                    v.cpu.clear()
                for r in range(a.rounds):
                    for v in variants if r % 2 == 0 else variants[::-1]:
                        v.round(trips, limit)
                b, s = (statistics.median(v.times) * 1e6 for v in variants)
                bc, sc = (statistics.median(v.cpu) * 1e6 for v in variants)
                print(
                    f"{mode}: server CPU per trip (the backend's): before {bc:.1f} µs, after "
                    f"{sc:.1f} µs, difference {sc - bc:+.1f} µs ({(sc - bc) / bc:+.1%})"
                )
                print(
                    f"{mode}: before {b:.1f} µs/trip, after {s:.1f} µs/trip, "
                    f"difference {s - b:+.1f} µs ({(s - b) / b:+.1%}); medians of "
                    f"{a.rounds} rounds of {trips} trips; every round (before, after): "
                    + ", ".join(
                        f"{x * 1e6:.0f}/{y * 1e6:.0f}"
                        for x, y in zip(*(v.times for v in variants), strict=True)
                    )
                )
                for v in variants:
                    db.give_back(v.conn)
        finally:
            db.close()
    finally:
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    main()
